/**
 * What the adapters share about commands: a pump that reads a child's output stream (a web `ReadableStream`, as
 * `Bun.spawn` and `Deno.Command` give) into
 * callbacks, with pause and resume for flow control.
 *
 * @module
 */

/** Pumps a readable stream into callbacks until it ends or is released. */
export class StreamPump {
  #reader: ReadableStreamDefaultReader<Uint8Array>;
  #paused = false;
  #wake: (() => void) | undefined;

  /** Starts reading `stream`; `onEnd` is called once, when it ends, fails or is released. */
  constructor(stream: ReadableStream<Uint8Array>, onData: (chunk: Uint8Array) => void, onEnd: () => void) {
    this.#reader = stream.getReader();
    void this.#run(onData).finally(onEnd);
  }

  async #run(onData: (chunk: Uint8Array) => void): Promise<void> {
    try {
      while (true) {
        while (this.#paused) await new Promise<void>((resolve) => (this.#wake = resolve));
        const { done, value } = await this.#reader.read();
        if (done) return;
        onData(value);
      }
    } catch {
      // A released or broken pipe ends the stream.
    }
  }

  /** Stops reading after the current chunk. */
  pause(): void {
    this.#paused = true;
  }

  /** Resumes reading. */
  resume(): void {
    this.#paused = false;
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /** Stops reading for good and releases the pipe. */
  release(): void {
    this.#reader.cancel().catch(() => {});
    this.resume();
  }
}

/** Releases the pump of `fd`, or of both outputs when `fd` is not given. */
export function releasePumps(
  pumps: readonly [unknown, StreamPump | undefined, StreamPump | undefined],
  fd?: 1 | 2,
): void {
  if (fd !== 2) pumps[1]?.release();
  if (fd !== 1) pumps[2]?.release();
}

/**
 * What the adapters share about commands: a pump that reads a child's output stream (a web `ReadableStream`, as
 * `Bun.spawn` and `Deno.Command` give) into
 * callbacks, with pause and resume for flow control.
 *
 * @module
 */

import { SpawnFailed } from "../core/adapter.ts";

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

/** A runtime's spawn error (thrown, or reported) as the {@linkcode SpawnFailed} a worker reports to its host. */
export function spawnFailed(error: unknown): SpawnFailed {
  const errno = (error as { errno?: unknown })?.errno;
  return new SpawnFailed({
    code: errorCode(error),
    errno: typeof errno === "number" ? errno : undefined,
    message: error instanceof Error ? error.message : String(error),
  });
}

/** Maps a runtime's thrown spawn error to an errno name. */
function errorCode(error: unknown): string {
  const code = (error as { code?: unknown })?.code;
  if (typeof code === "string") return code;
  const name = (error as { name?: unknown })?.name;
  if (name === "NotFound") return "ENOENT";
  if (name === "PermissionDenied") return "EACCES";
  if (name === "NotADirectory") return "ENOTDIR";
  return "EUNKNOWN";
}

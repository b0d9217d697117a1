/**
 * A streamed output on the host: the sink contract an API shape implements, credit batching, and the web
 * `ReadableStream` the Deno and Bun shapes hand out (with `text()`, `json()`, `bytes()` and `arrayBuffer()`).
 *
 * @module
 */

import { concatBytes, type StreamFd } from "./frame.ts";

/**
 * Where a streamed output's bytes go on the host. The sink credits the worker (through the `credit`
 * callback it was created with) as its consumer reads, which is what bounds memory on both sides.
 */
export interface OutputSink {
  /** Bytes arrived; the chunk is owned by the sink. */
  push(chunk: Uint8Array): void;
  /** The stream ended. */
  end(): void;
  /** The request failed; the stream ends with `error`. */
  error(error: unknown): void;
}

/** What a sink may tell the worker about its stream. */
export interface OutputControls {
  /** The consumer read `bytes` more; the worker may send that many more. */
  credit(bytes: number): void;
  /** Nobody will read the stream any more: the worker closes the pipe (the child sees EPIPE). */
  release(): void;
  /** Bytes the worker sends ahead of credit. */
  window: number;
}

/**
 * Credits in batches: bytes a consumer took are credited once they reach half the window (or at once
 * when asked), so a stream read chunk by chunk does not send the worker a frame per chunk.
 */
export class CreditBatch {
  readonly #credit: (bytes: number) => void;
  readonly #threshold: number;
  #held = 0;

  /** Creates a batch for the stream `controls` belong to. */
  constructor(controls: OutputControls) {
    this.#credit = controls.credit;
    this.#threshold = Math.max(1, controls.window >> 1);
  }

  /** Counts `bytes` as taken, without crediting them yet. */
  hold(bytes: number): void {
    this.#held += bytes;
  }

  /** Credits what is held if it has reached half the window. */
  flushIfFull(): void {
    if (this.#held >= this.#threshold) this.flush();
  }

  /** Credits what is held. */
  flush(): void {
    if (this.#held === 0) return;
    const bytes = this.#held;
    this.#held = 0;
    this.#credit(bytes);
  }

  /** Forgets what is held: the stream is gone. */
  drop(): void {
    this.#held = 0;
  }
}

/** Creates the sink of one streamed output. */
export type OutputSinkFactory = (fd: StreamFd, controls: OutputControls) => OutputSink;

/**
 * A command's output as a web `ReadableStream` with the helpers `Deno.ChildProcess` and Bun's `Subprocess` give theirs:
 * each reads the stream to its end.
 */
export interface OutputReadableStream extends ReadableStream<Uint8Array> {
  /** The whole output as bytes. */
  bytes(): Promise<Uint8Array<ArrayBuffer>>;
  /** The whole output as an `ArrayBuffer`. */
  arrayBuffer(): Promise<ArrayBuffer>;
  /** The whole output decoded as UTF-8. */
  text(): Promise<string>;
  /** The whole output parsed as JSON. */
  json(): Promise<unknown>;
}

const READ_HELPERS: Record<string, (this: ReadableStream<Uint8Array>) => Promise<unknown>> = {
  bytes() {
    return readToEnd(this);
  },
  async arrayBuffer() {
    return (await readToEnd(this)).buffer;
  },
  async text() {
    return new TextDecoder().decode(await readToEnd(this));
  },
  async json() {
    return JSON.parse(new TextDecoder().decode(await readToEnd(this)));
  },
};

let OutputReadable: typeof ReadableStream<Uint8Array> | undefined;

/**
 * The class of the web `ReadableStream` of a command's output: {@linkcode OutputReadableStream}'s helpers put once on
 * its prototype where the runtime's own streams lack them (Bun's have them), so nothing is made per spawn. Made on
 * first use: the first touch of `ReadableStream` loads the runtime's web streams (about 3 ms on Node, 1.7 on Deno),
 * which a script that only calls `output()` never needs.
 */
function outputReadable(): typeof ReadableStream<Uint8Array> {
  if (OutputReadable !== undefined) return OutputReadable;
  const made = class extends ReadableStream<Uint8Array> {};
  for (const name of Object.keys(READ_HELPERS)) {
    if (!(name in ReadableStream.prototype)) {
      Object.defineProperty(made.prototype, name, { value: READ_HELPERS[name], configurable: true, writable: true });
    }
  }
  OutputReadable = made;
  return made;
}

/**
 * Reads a stream to its end into a buffer of its own, as `new Response(stream).bytes()` would, without a `Response`:
 * Node loads its whole fetch implementation on the first one, tens of ms (`node bench/cold_start.mjs`).
 */
async function readToEnd(stream: ReadableStream<Uint8Array>): Promise<Uint8Array<ArrayBuffer>> {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  for (let read = await reader.read(); !read.done; read = await reader.read()) chunks.push(read.value);
  const bytes = concatBytes(chunks);
  // One chunk comes back as it is: a view that may share its buffer, which arrayBuffer() must not hand out.
  return (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : bytes.slice()) as Uint8Array<
    ArrayBuffer
  >;
}
/** A stream of output from the worker as a web `ReadableStream`, crediting the worker as the consumer reads. */
export class OutputStream implements OutputSink {
  readonly readable: OutputReadableStream;
  #queue: Uint8Array[] = [];
  #ended = false;
  #error: unknown;
  #waiting: (() => void) | undefined;

  constructor(controls: OutputControls) {
    const credits = new CreditBatch(controls);
    this.readable = new (outputReadable())({
      pull: async (controller) => {
        while (this.#queue.length === 0 && !this.#ended && this.#error === undefined) {
          await new Promise<void>((resolve) => (this.#waiting = resolve));
        }
        const chunk = this.#queue.shift();
        if (chunk !== undefined) {
          controller.enqueue(chunk);
          credits.hold(chunk.byteLength);
          if (this.#queue.length === 0) credits.flush();
          else credits.flushIfFull();
          return;
        }
        if (this.#error !== undefined) controller.error(this.#error);
        else controller.close();
      },
      cancel: () => {
        this.#queue = [];
        if (!this.#ended && this.#error === undefined) controls.release();
      },
    }, { highWaterMark: 0 }) as OutputReadableStream;
  }

  push(chunk: Uint8Array): void {
    this.#queue.push(chunk);
    this.#wake();
  }

  end(): void {
    this.#ended = true;
    this.#wake();
  }

  error(error: unknown): void {
    if (this.#ended) return;
    this.#error = error;
    this.#wake();
  }

  #wake(): void {
    const waiting = this.#waiting;
    this.#waiting = undefined;
    waiting?.();
  }
}

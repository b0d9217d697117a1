/**
 * The child's stdio as Node streams: output that credits the worker as it is read, input that writes to the worker.
 * Both are `net.Socket`s, as Node's pipe sockets are (code such as zx checks `child.stderr instanceof Socket`), with
 * no handle: their reads, writes, ends and destroys are the pool's.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { Socket } from "node:net";
import type { Readable, Writable } from "node:stream";
import { setImmediate } from "node:timers";
import { CreditBatch, type OutputControls } from "../../core/output_stream.ts";
import { errnoOf } from "./errors.ts";

/** Streams destroyed in this turn of the event loop, whose 'close' is still to come. */
const closing: Array<{ stream: Readable | Writable; hadError: boolean }> = [];

/**
 * Emits a destroyed stream's 'close' as Node's stdio sockets do: from the close callback of their handle, which libuv
 * runs in a later phase of the event loop, the handle closed last first. Code that destroys a child's stdout and then
 * its stdin in one turn sees stdin's 'close' first (execa's `.duplex()` keeps the first stream error it sees).
 */
function closeLikeAHandle(stream: Readable | Writable, hadError: boolean): void {
  if (closing.push({ stream, hadError }) > 1) return;
  setImmediate(() => {
    while (closing.length > 0) {
      const { stream, hadError } = closing.pop()!;
      stream.emit("close", hadError);
    }
  });
}

/**
 * What a child's pipe socket shows and does as a `net.Socket` that no handle or connection backs: the getters give what
 * Node gives for a pipe (no addresses, pending once destroyed, bytes counted as they pass), the TCP settings do nothing,
 * and a `setTimeout()` timer is refreshed as bytes pass and stays quiet once the stream is destroyed. Without a handle,
 * each runtime's own `net.Socket` (Node's, Bun's, Deno's polyfill) would wait in these for a 'connect' that never
 * comes, or give a socket's empty addresses.
 */
class PipeSocket extends Socket {
  #bytesRead = 0;
  #bytesWritten = 0;

  constructor(options?: { readable?: boolean }) {
    super(options);
    // Bun's sets it to 0; Node's leaves it unset until a setTimeout().
    if (this.timeout === 0) (this as { timeout?: number }).timeout = undefined;
  }

  /** Does nothing, as on a pipe. */
  override setNoDelay(_noDelay?: boolean): this {
    return this;
  }

  /** Does nothing, as on a pipe. */
  override setKeepAlive(..._args: unknown[]): this {
    return this;
  }

  /** Empty, as for a pipe. */
  override address(): Record<string, never> {
    return {};
  }

  static {
    // Getters where each runtime's `net.Socket` has its own (or, on Bun, a property: each takes and ignores a value).
    Object.defineProperties(PipeSocket.prototype, {
      /** Whether the stream is destroyed: a child's pipe is open from the start, till its handle goes. */
      pending: {
        get(this: PipeSocket) {
          return this.destroyed;
        },
        set() {},
        configurable: true,
      },
      /** The bytes read from the pipe so far. */
      bytesRead: {
        get(this: PipeSocket) {
          return this.#bytesRead;
        },
        set() {},
        configurable: true,
      },
      /** The bytes buffered to write (deprecated in Node: `writableLength`). */
      bufferSize: {
        get(this: PipeSocket) {
          return this.writableLength;
        },
        set() {},
        configurable: true,
      },
      /** The bytes written so far: those passed on, and those still buffered. */
      bytesWritten: {
        get(this: PipeSocket) {
          let buffered = 0;
          const queue = (this as unknown as { writableBuffer: Array<{ chunk: Buffer | string; encoding: string }> })
            .writableBuffer;
          for (const { chunk, encoding } of queue) buffered += bytesOf(chunk, encoding).length;
          return this.#bytesWritten + buffered;
        },
        set() {},
        configurable: true,
      },
    });
  }

  /** @internal The stream's bytes passed: counted, and a `setTimeout()` timer refreshed. */
  passed(bytes: number, direction: "read" | "written"): void {
    if (direction === "read") this.#bytesRead += bytes;
    else this.#bytesWritten += bytes;
    (this as unknown as { _unrefTimer(): void })._unrefTimer();
  }

  /** Several buffered chunks, written as one (through each subclass's `_write`, which takes Node's "buffer"). */
  override _writev(
    chunks: Array<{ chunk: Buffer | string; encoding: string }>,
    callback: (error?: Error | null) => void,
  ): void {
    this._write(concatChunks(chunks), "buffer" as BufferEncoding, callback);
  }

  /** @internal Emits 'timeout' unless the stream is destroyed (its timer outlives it here). */
  _onTimeout(): void {
    if (!this.destroyed) this.emit("timeout");
  }
}

/** A written chunk as bytes: a `net.Socket` hands its `_write` strings as they were written. */
function bytesOf(chunk: Buffer | string, encoding: string): Buffer {
  return typeof chunk === "string" ? Buffer.from(chunk, encoding as BufferEncoding) : chunk;
}

/** Written chunks as one buffer. */
function concatChunks(chunks: Array<{ chunk: Buffer | string; encoding: string }>): Buffer {
  return Buffer.concat(chunks.map(({ chunk, encoding }) => bytesOf(chunk, encoding)));
}

/**
 * A child's stdout or stderr: a `net.Socket` that credits the worker as the consumer reads. As Node's pipe socket (one
 * end of a socketpair) it is writable too, into the command's end, which commands do not read: a write is taken while
 * the command runs, and the output then ends in an ECONNRESET error, as a socket closed with unread bytes does on
 * Linux; once the command has exited or its output has ended, a write fails with EPIPE. `end()` finishes at once.
 */
export class OutputReadable extends PipeSocket {
  readonly #controls: OutputControls;
  readonly #credits: CreditBatch;
  /** The output's end arrived from the worker. */
  #ended = false;
  /** The command exited (or its output ended): nobody holds the pipe's other end. */
  #hungUp = false;
  /** Bytes written into the command's end of the pipe, which it never reads. */
  #unread = 0;
  /** Told when the buffer may have crossed its high-water mark (reading starts or stops, as on a pipe). */
  onPressure: (() => void) | undefined;
  /** Whether this stream keeps the host alive while it is read (a pipe socket's `ref()`/`unref()`). */
  refed = true;

  constructor(controls: OutputControls) {
    super(); // as Node's pipe socket: not half open; 'close' comes from _destroy, as a socket's from its handle
    this.#controls = controls;
    this.#credits = new CreditBatch(controls);
  }

  override _read(): void {
    this.#credits.flush();
    this.onPressure?.();
  }

  override _write(chunk: Buffer | string, encoding: string, callback: (error?: Error | null) => void): void {
    if (this.#hungUp) return callback(uvError("EPIPE", "write"));
    const bytes = bytesOf(chunk, encoding).length;
    this.#unread += bytes;
    this.passed(bytes, "written");
    callback();
  }

  override _final(callback: (error?: Error | null) => void): void {
    callback();
  }

  /** Lets this output keep the host alive while it is read (the default), as a pipe socket's `ref()`. */
  override ref(): this {
    this.refed = true;
    this.onPressure?.();
    return this;
  }

  /** Stops this output keeping the host alive, as a pipe socket's `unref()`. */
  override unref(): this {
    this.refed = false;
    this.onPressure?.();
    return this;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // Destroyed before its end: close the pipe in the worker, as destroying a pipe's read end does.
    if (!this.#ended && !this.readableEnded) this.#controls.release();
    this.#credits.drop();
    callback(error);
    closeLikeAHandle(this, error !== null);
  }

  deliver(chunk: Uint8Array): void {
    if (this.destroyed || this.readableEnded) {
      this.#controls.credit(chunk.byteLength); // in flight before the release; nobody reads it
      return;
    }
    this.passed(chunk.byteLength, "read");
    // Credited in batches while Node's buffer takes more; past its high-water mark, once it asks to _read.
    this.#credits.hold(chunk.byteLength);
    if (this.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) this.#credits.flushIfFull();
    else this.onPressure?.();
  }

  finish(): void {
    this.#ended = this.#hungUp = true;
    if (this.destroyed || this.readableEnded) return;
    if (this.#unread > 0) this.destroy(uvError("ECONNRESET", "read"));
    else this.push(null);
  }

  /** The command exited: a write fails from now on. */
  hangUp(): void {
    this.#hungUp = true;
  }
}

/**
 * A child's stdin: a `net.Socket` that writes to the worker, not readable, as Node's pipe socket, with a pipe socket's
 * `ref()`/`unref()` for code that calls them. Other commands may write into it too (given as their stdout or stderr):
 * the command's stdin ends once this stream and each of them has ended, as a pipe's reader sees its end once every
 * writer has closed it.
 */
export class InputWritable extends PipeSocket {
  readonly #send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void;
  readonly #end: () => void;
  /** This stream and the relays writing into the command's stdin. */
  #writers = 1;

  constructor(send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void, end: () => void) {
    super({ readable: false }); // as Node's pipe socket; 'close' comes from _destroy, as a socket's from its handle
    this.#send = send;
    this.#end = end;
  }

  /** Never called: the stream is not readable. */
  override _read(): void {}

  override _write(chunk: Buffer | string, encoding: string, callback: (error?: Error | null) => void): void {
    const bytes = bytesOf(chunk, encoding);
    this.passed(bytes.length, "written");
    this.#send(bytes, callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#release();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#end();
    callback(error);
    closeLikeAHandle(this, error !== null);
  }

  #release(): void {
    if (--this.#writers === 0) this.#end();
  }

  /**
   * Writes all of `source` (another command's output) into the command's stdin, which it holds open until
   * then; resolves once the last bytes reached the command's pipe (or `source` was destroyed).
   */
  relay(source: Readable): Promise<void> {
    this.#writers++;
    return (async () => {
      for await (const chunk of source) await new Promise((written) => this.#send(chunk, written));
    })().catch(() => {}).finally(() => this.#release());
  }

  /** Does nothing: stdin never keeps the host alive here. */
  override ref(): this {
    return this;
  }

  /** Does nothing: stdin never keeps the host alive here. */
  override unref(): this {
    return this;
  }
}

/** An error of a system call on a pipe, as Node's (`errno`, `code` and `syscall`, in that order). */
function uvError(code: "EPIPE" | "ECONNRESET", syscall: "read" | "write"): Error & UvFields {
  const errno = errnoOf(code) ?? (code === "EPIPE" ? -32 : -104);
  return Object.assign(new Error(`${syscall} ${code}`), { errno, code, syscall });
}

interface UvFields {
  errno: number;
  code: string;
  syscall: string;
}

/** A write into a pipe whose reader has gone. */
export function epipe(): Error & UvFields {
  return uvError("EPIPE", "write");
}

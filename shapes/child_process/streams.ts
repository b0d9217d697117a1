/**
 * The child's stdio as Node streams: output that credits the worker as it is read, input that writes to the worker.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { Readable, Writable } from "node:stream";
import { setImmediate } from "node:timers";
import { CreditBatch, type OutputControls } from "../../core/output_stream.ts";
import { errnoOf, type NodeError, nodeError } from "./errors.ts";

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

/** A readable child output as a Node stream; credits the worker as the consumer reads. */
export class OutputReadable extends Readable {
  readonly #controls: OutputControls;
  readonly #credits: CreditBatch;
  /** Told when the buffer may have crossed its high-water mark (reading starts or stops, as on a pipe). */
  onPressure: (() => void) | undefined;
  /** Whether this stream keeps the host alive while it is read (a pipe socket's `ref()`/`unref()`). */
  refed = true;

  constructor(controls: OutputControls) {
    super({ emitClose: false }); // 'close' comes from _destroy, as a socket's from its handle
    this.#controls = controls;
    this.#credits = new CreditBatch(controls);
  }

  override _read(): void {
    this.#credits.flush();
    this.onPressure?.();
  }

  /** Lets this output keep the host alive while it is read (the default), as a pipe socket's `ref()`. */
  ref(): this {
    this.refed = true;
    this.onPressure?.();
    return this;
  }

  /** Stops this output keeping the host alive, as a pipe socket's `unref()`. */
  unref(): this {
    this.refed = false;
    this.onPressure?.();
    return this;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // Destroyed before its end: close the pipe in the worker, as destroying a pipe's read end does.
    if (!this.readableEnded) this.#controls.release();
    this.#credits.drop();
    callback(error);
    closeLikeAHandle(this, error !== null);
  }

  deliver(chunk: Uint8Array): void {
    if (this.destroyed || this.readableEnded) {
      this.#controls.credit(chunk.byteLength); // in flight before the release; nobody reads it
      return;
    }
    // Credited in batches while Node's buffer takes more; past its high-water mark, once it asks to _read.
    this.#credits.hold(chunk.byteLength);
    if (this.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) this.#credits.flushIfFull();
    else this.onPressure?.();
  }

  finish(): void {
    if (!this.destroyed && !this.readableEnded) this.push(null);
  }
}

/**
 * A child's stdin as a Node stream, with a pipe socket's `ref()`/`unref()` for code that calls them. Other
 * commands may write into it too (given as their stdout or stderr): the command's stdin ends once this stream
 * and each of them has ended, as a pipe's reader sees its end once every writer has closed it.
 */
export class InputWritable extends Writable {
  readonly #send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void;
  readonly #end: () => void;
  /** This stream and the relays writing into the command's stdin. */
  #writers = 1;

  constructor(send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void, end: () => void) {
    super({ emitClose: false }); // 'close' comes from _destroy, as a socket's from its handle
    this.#send = send;
    this.#end = end;
  }

  override _write(chunk: Buffer, _encoding: string, callback: (error?: Error | null) => void): void {
    this.#send(chunk, callback);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, callback: (error?: Error | null) => void): void {
    this.#send(Buffer.concat(chunks.map((entry) => entry.chunk)), callback);
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

  /** Always false, as on the write-only pipe socket Node gives. */
  get readable(): boolean {
    return false;
  }

  /** Does nothing: stdin never keeps the host alive here. */
  ref(): this {
    return this;
  }

  /** Does nothing: stdin never keeps the host alive here. */
  unref(): this {
    return this;
  }
}

export function epipe(): NodeError & { errno: number; syscall: string } {
  return Object.assign(nodeError(Error, "EPIPE", "write EPIPE"), { errno: errnoOf("EPIPE") ?? -32, syscall: "write" });
}

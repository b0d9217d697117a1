/**
 * Frame output for one channel, coalesced: every frame written during one turn of the event loop leaves
 * in a single vectored write when the turn's microtasks run.
 *
 * @module
 */

import type { ByteChannel } from "./adapter.ts";
import { concatBytes, encodeHeader, type FrameType } from "./frame.ts";

/** Writes frames to a {@linkcode ByteChannel}, one vectored write per event-loop turn. */
export class FrameWriter {
  #channel: ByteChannel;
  #parts: Uint8Array[] = [];
  #scheduled = false;
  #flush = (): void => {
    this.#scheduled = false;
    const parts = this.#parts;
    this.#parts = [];
    this.#channel.write(parts);
  };

  /** Creates a writer for `channel`. */
  constructor(channel: ByteChannel) {
    this.#channel = channel;
  }

  /** Queues a frame; `payload` parts are concatenated on the wire without being copied here. */
  send(type: FrameType, id: number, payload?: Uint8Array | readonly Uint8Array[]): void {
    if (payload === undefined) {
      this.#parts.push(encodeHeader(type, id, 0));
    } else if (payload instanceof Uint8Array) {
      this.#parts.push(encodeHeader(type, id, payload.byteLength), payload);
    } else {
      let length = 0;
      for (const part of payload) length += part.byteLength;
      this.#parts.push(encodeHeader(type, id, length));
      for (const part of payload) if (part.byteLength > 0) this.#parts.push(part);
    }
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(this.#flush);
    }
  }
}

/** Parts at most this long are joined into one write; longer ones are written as they are. */
const SMALL_WRITE_BYTES = 16 * 1024;

/**
 * Groups frame parts into writes, for transports without vectored writes: runs of small parts joined,
 * large parts on their own (not copied).
 */
export function writeBatches(parts: readonly Uint8Array[]): Uint8Array[] {
  const batches: Uint8Array[] = [];
  let run: Uint8Array[] = [];
  for (const part of parts) {
    if (part.byteLength <= SMALL_WRITE_BYTES) {
      run.push(part);
      continue;
    }
    if (run.length > 0) batches.push(concatBytes(run));
    run = [];
    batches.push(part);
  }
  if (run.length > 0) batches.push(concatBytes(run));
  return batches;
}

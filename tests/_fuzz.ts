/**
 * Seeded randomness for the fuzz tests, and feeding a frame decoder in random pieces.
 *
 * @module
 */

import assert from "node:assert/strict";
import { FrameDecoder, ProtocolError } from "../core/frame.ts";

/** A small seeded PRNG (xorshift32), so every fuzz run is reproducible. */
export function random(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 0x1_0000_0000;
  };
}

export function randomBytes(next: () => number, length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = Math.floor(next() * 256);
  return bytes;
}

/** Pushes `bytes` to `decoder` in random pieces of 1 to `maxPiece` bytes. */
export function feed(decoder: FrameDecoder, bytes: Uint8Array, next: () => number, maxPiece: number): void {
  for (let offset = 0; offset < bytes.byteLength;) {
    const size = 1 + Math.floor(next() * maxPiece);
    decoder.push(bytes.subarray(offset, offset + size));
    offset += size;
  }
}

/** Feeds `bytes` to a decoder in random pieces; returns the frames or the ProtocolError it threw. */
export function decode(bytes: Uint8Array, next: () => number): { frames: number; error?: ProtocolError } {
  let frames = 0;
  const decoder = new FrameDecoder(() => void frames++);
  try {
    feed(decoder, bytes, next, 64);
  } catch (error) {
    assert.ok(error instanceof ProtocolError, `only ProtocolError may escape, got ${error}`);
    return { frames, error };
  }
  return { frames };
}

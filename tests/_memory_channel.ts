/**
 * An in-memory channel for feeding a worker loop (or reading what it writes) without a process.
 *
 * @module
 */

import type { ByteChannel, ChannelReceiver } from "../core/adapter.ts";
import { FrameDecoder } from "../core/frame.ts";

/** A frame as a host decoded it. */
export interface Sent {
  type: number;
  id: number;
  payload: Uint8Array;
}

/**
 * An in-memory channel pair end: what the worker loop writes goes through a host's frame decoder (with its
 * size limit) into `sent`; the test pushes bytes in.
 */
export function memoryChannel(): {
  channel: ByteChannel;
  push: (bytes: Uint8Array) => void;
  closed: () => boolean;
  sent: Sent[];
} {
  let receiver: ChannelReceiver | undefined;
  let closed = false;
  const sent: Sent[] = [];
  const decoder = new FrameDecoder((type, id, payload) => void sent.push({ type, id, payload }));
  return {
    channel: {
      start: (r) => void (receiver = r),
      write: (parts) => parts.forEach((part) => decoder.push(part)),
      close: () => void (closed = true),
      ref: () => {},
      unref: () => {},
    },
    push: (bytes) => receiver!.data(bytes),
    closed: () => closed,
    sent,
  };
}

/** Turns to let the worker's frame writer (a microtask) and the test's pushes settle. */

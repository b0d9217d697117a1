/**
 * A {@linkcode ByteChannel} over Bun's own socket API (`Bun.connect`): on an inherited socketpair end, or
 * connected to the host's unix socket. Bun's `node:net` is a stream layer on top of the same sockets; going
 * under it saves the stream machinery on every read and write, on both ends of a Bun host's or Bun worker's
 * channel (on a Deno host, a Bun worker's CPU per 163 KB result went from 933-1,133 µs to 633-867: README,
 * Measured).
 *
 * Bun's `socket.write` writes what the kernel takes and returns the count; the rest waits here, in order,
 * until the socket drains.
 *
 * @module
 */

import type { ByteChannel, ChannelReceiver } from "../core/adapter.ts";
import { writeBatches } from "../core/frame_writer.ts";
import { allocateUnzeroed } from "./_socket_channel.ts";

/** The part of Bun's `Socket` this channel uses: `write` returns how many bytes the kernel took, -1 if none. */
interface BunSocket {
  write(data: Uint8Array): number;
  terminate(): void;
  ref(): void;
  unref(): void;
}

/** The handlers this channel gives `Bun.connect`, its data as `Uint8Array`s. */
interface BunSocketHandler {
  binaryType: "uint8array";
  data(socket: BunSocket, chunk: Uint8Array): void;
  drain(socket: BunSocket): void;
  error(socket: BunSocket, error: Error): void;
  close(socket: BunSocket, error?: Error): void;
  connectError(socket: BunSocket, error: Error): void;
}

/**
 * The part of Bun's global this channel uses: typed here, so that the library type-checks without bun-types (which
 * describe `unix` and `hostname` targets only; Bun also adopts a connected socket's fd).
 */
interface BunConnector {
  connect(options: ({ fd: number } | { unix: string }) & { socket: BunSocketHandler }): Promise<BunSocket>;
}

/** Bun's global; this channel is used only in Bun. */
function bun(): BunConnector {
  return (globalThis as unknown as { Bun: BunConnector }).Bun;
}

/**
 * Wraps the connected socket on `target.fd`, or connects to the unix socket at `target.unix` (abstract when it
 * starts with a NUL); resolves once Bun has adopted or connected it.
 */
export async function bunSocketChannel(target: { fd: number } | { unix: string }): Promise<ByteChannel> {
  let receiver: ChannelReceiver | undefined;
  /** Bytes that arrived before `start`. */
  const early: Uint8Array[] = [];
  let closed = false;
  let failure: Error | undefined;
  /** Bytes the kernel did not take yet, oldest first (a partly written head is kept as its unwritten rest). */
  const queue: Uint8Array[] = [];
  const finish = () => {
    if (closed) return;
    closed = true;
    queue.length = 0;
    receiver?.close(failure);
  };
  const flush = (socket: BunSocket) => {
    while (queue.length > 0) {
      const head = queue[0];
      const written = socket.write(head);
      if (written < 0) return;
      if (written < head.byteLength) {
        queue[0] = head.subarray(written);
        return;
      }
      queue.shift();
    }
  };
  const handler: BunSocketHandler = {
    binaryType: "uint8array",
    data(_socket, chunk) {
      if (closed) return;
      if (receiver) receiver.data(chunk);
      else early.push(chunk);
    },
    drain: flush,
    // Bun reports a socket error here, and also an exception a handler threw (the receiver's): either way the
    // channel is no longer usable.
    error(socket, error) {
      failure ??= error;
      socket.terminate();
      finish();
    },
    close(_socket, error) {
      failure ??= error;
      finish();
    },
    connectError(_socket, error) {
      failure = error;
      finish();
    },
  };
  const socket = await bun().connect({ ...target, socket: handler });
  return {
    allocate: allocateUnzeroed,
    start(r) {
      // Bytes and a close that came before `start` are delivered now, in order; a close the receiver itself
      // causes meanwhile (bad bytes) stops the delivery and is reported by `finish`, once.
      const closedBefore = closed;
      receiver = r;
      for (const chunk of early.splice(0)) {
        if (closed && !closedBefore) return;
        r.data(chunk);
      }
      if (closedBefore) r.close(failure);
    },
    write(chunks) {
      if (closed) return;
      queue.push(...writeBatches(chunks));
      flush(socket);
    },
    close() {
      if (closed) return;
      socket.terminate();
      finish();
    },
    ref() {
      socket.ref();
    },
    unref() {
      socket.unref();
    },
  };
}

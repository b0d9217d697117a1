/**
 * {@linkcode ByteChannel}s over `node:net` sockets: a Node host's end of its worker's fd 3, a Node
 * worker's fd 3, or a unix socket. Used by the Node and Bun adapters, and by Deno workers started by a
 * Node or Bun host.
 *
 * @module
 */

import type { Buffer } from "node:buffer";
import type { OnReadOpts, Socket } from "node:net";
import { type ByteChannel, type ChannelReceiver, LENDING_READ_BYTES } from "../core/adapter.ts";

/**
 * {@linkcode ByteChannel.allocate} for runtimes with Node's `Buffer` (Node, Bun): memory not zeroed first, of its
 * own (`allocUnsafeSlow`, never `allocUnsafe`'s shared pool), as a plain `Uint8Array` like every other payload. The
 * global `Buffer`, not `node:buffer`, which would cost a Deno host that imports the Bun adapter 5 ms for nothing.
 */
export function allocateUnzeroed(length: number): Uint8Array {
  const buffer = (globalThis as unknown as { Buffer: typeof Buffer }).Buffer.allocUnsafeSlow(length);
  return new Uint8Array(buffer.buffer, buffer.byteOffset, length);
}

/** Everything but reading: writes are corked into one vectored write. */
function socketChannelOf(socket: Socket, start: (receiver: ChannelReceiver) => void, lendsChunks: boolean) {
  const channel: ByteChannel = {
    lendsChunks,
    allocate: allocateUnzeroed,
    start,
    write(chunks) {
      if (socket.destroyed) return;
      socket.cork();
      for (const chunk of chunks) socket.write(chunk);
      socket.uncork();
    },
    close() {
      socket.destroy();
    },
    ref() {
      socket.ref();
    },
    unref() {
      socket.unref();
    },
  };
  return channel;
}

/** Reports the socket's close to `receiver`, with the error that caused it, if any. */
function reportClose(socket: Socket, receiver: ChannelReceiver): void {
  let failure: Error | undefined;
  socket.on("error", (error: Error) => (failure = error));
  socket.on("close", () => receiver.close(failure));
}

/** Wraps a connected socket; `initial` holds bytes already read from it. */
export function socketChannel(socket: Socket, initial?: Uint8Array): ByteChannel {
  return socketChannelOf(socket, (receiver) => {
    if (initial !== undefined && initial.byteLength > 0) receiver.data(initial);
    socket.on("data", (chunk: Uint8Array) => receiver.data(chunk));
    reportClose(socket, receiver);
    socket.resume();
  }, false);
}

/**
 * A channel over a socket that reads into one buffer it reuses (`net.connect`'s `onread`), so Node does
 * not allocate, shrink and later collect a buffer per read, or straight into the rest of a large frame's payload
 * ({@linkcode ChannelReceiver.readTarget}). Its chunks are lent
 * ({@linkcode ByteChannel.lendsChunks}). Pass `onread` to `net.connect`, then `attach` the socket.
 */
export function lendingSocketChannel(): { onread: OnReadOpts; attach(socket: Socket): ByteChannel } {
  let receiver: ChannelReceiver | undefined;
  /** Copies of what arrived before `start`: the lent buffer is overwritten by the next read. */
  const early: Uint8Array[] = [];
  const lent = new Uint8Array(LENDING_READ_BYTES);
  return {
    onread: {
      // Asked before each read: the rest of a large frame is read straight into its payload (readTarget).
      buffer: () => receiver?.readTarget?.() ?? lent,
      callback(bytes, buffer) {
        if (receiver !== undefined) receiver.data(buffer.subarray(0, bytes));
        else early.push(buffer.slice(0, bytes));
        return true; // keep reading
      },
    },
    attach(socket) {
      return socketChannelOf(socket, (started) => {
        for (const chunk of early.splice(0)) started.data(chunk);
        receiver = started;
        reportClose(socket, started);
        socket.resume();
      }, true);
    },
  };
}

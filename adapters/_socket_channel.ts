/**
 * A {@linkcode ByteChannel} over a `node:net` socket: the socketpair on fd 3, or a unix socket. Used by
 * the Node and Bun adapters on both sides, and by Deno workers started by a Node or Bun host.
 *
 * @module
 */

import type { Socket } from "node:net";
import type { ByteChannel } from "../core/adapter.ts";

/** Wraps a connected socket; `initial` holds bytes already read from it. */
export function socketChannel(socket: Socket, initial?: Uint8Array): ByteChannel {
  return {
    start(receiver) {
      let failure: Error | undefined;
      if (initial !== undefined && initial.byteLength > 0) receiver.data(initial);
      socket.on("data", (chunk: Uint8Array) => receiver.data(chunk));
      socket.on("error", (error: Error) => (failure = error));
      socket.on("close", () => receiver.close(failure));
      socket.resume();
    },
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
}

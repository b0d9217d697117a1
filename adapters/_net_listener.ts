/**
 * The unix-socket listener of Node and Bun hosts, with `node:net`, and the connected socket pair a Node host hands its
 * workers; the handshake itself is `_unix_handshake.ts`.
 *
 * @module
 */

import { connect, createServer, type OnReadOpts, type Server, type Socket } from "node:net";
import type { ByteChannel } from "../core/adapter.ts";
import { concatBytes } from "../core/frame.ts";
import { socketChannel } from "./_socket_channel.ts";
import { system } from "./_system.ts";
import { newSecret, type PendingWorker, pendingWorker, privateSocketPath, SECRET_BYTES } from "./_unix_handshake.ts";

/**
 * Listens with `node:net` on a fresh private socket for one connection presenting `secret`.
 *
 * @param abstract Use an abstract socket name (Linux); otherwise a socket file in a 0700 directory.
 */
async function listenNet<Out>(
  abstract: boolean,
  secret: Uint8Array,
  accepted: (socket: Socket, rest: Uint8Array) => Out,
): Promise<PendingWorker<Out>> {
  const { path, dir } = privateSocketPath(abstract);
  const server: Server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => {
      server.off("error", reject);
      // An accept that fails (EMFILE under a flood) is reported here, and the server goes on listening; with no
      // listener for it, it would be an uncaught exception of the host.
      server.on("error", () => {});
      resolve();
    });
  });
  const pending = pendingWorker<Socket, Out>(path, secret, {
    listen: (onConnection) => server.on("connection", onConnection),
    readSecret: (socket) =>
      new Promise((resolve, reject) => {
        let head: Uint8Array = new Uint8Array(0);
        socket.on("error", () => {});
        socket.once("close", reject);
        const onData = (chunk: Uint8Array) => {
          head = head.byteLength === 0 ? chunk : concatBytes([head, chunk]);
          if (head.byteLength < SECRET_BYTES) return;
          socket.off("data", onData);
          socket.off("close", reject);
          socket.pause();
          resolve({ head: head.subarray(0, SECRET_BYTES), rest: head.slice(SECRET_BYTES) });
        };
        socket.on("data", onData);
      }),
    accepted,
    drop: (socket) => socket.destroy(),
    close() {
      server.close();
      if (dir !== undefined) system.removeDir(dir);
    },
  });
  return pending;
}

/**
 * Listens on a fresh private socket for one worker, with `node:net` (Node and Bun hosts).
 *
 * @param abstract Use an abstract socket name (Linux); otherwise (the default) a socket file in a 0700 directory,
 * which no other user can reach.
 */
export function listenForWorker(abstract = false): Promise<PendingWorker> {
  return listenNet(abstract, newSecret(), socketChannel);
}

/**
 * A connected pair of unix stream sockets, whose `worker` end a Node host hands a worker as fd 3 (and then
 * closes) while it reads the `host` end through `onread`: every worker of a pool but its first, which gets the
 * socketpair `child_process` makes for a pipe (ready sooner, but it cannot be given `onread`, which only
 * `net.connect` takes). Node has no socketpair call of its own.
 *
 * The pair is made like a worker's handshake: the host connects to a fresh private socket and presents
 * a fresh secret, the listener takes only the connection that presents it, refuses all others and stops
 * listening. The host writes nothing else on `host` until the worker has `worker`.
 *
 * @param abstract Use an abstract socket name (Linux); otherwise (the default) a socket file in a 0700 directory,
 * which no other user can reach.
 */
export async function connectedPair(
  onread: OnReadOpts,
  abstract = false,
): Promise<{ host: Socket; worker: Socket }> {
  const secret = newSecret();
  const pending = await listenNet(abstract, secret, (socket) => socket);
  const host = connect({ path: pending.path, onread });
  const failed = new Promise<void>((resolve) => {
    host.on("error", () => resolve()); // the channel records errors once attached
    host.once("close", () => resolve());
  });
  host.write(secret);
  try {
    return { host, worker: await pending.accept(failed) };
  } catch (error) {
    host.destroy();
    throw error;
  }
}

/** Opens a `node:net` channel to the unix socket at `path`: how a Node worker connects. */
export function openSocketChannel(path: string): Promise<ByteChannel> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path }, () => resolve(socketChannel(socket)));
    socket.once("error", reject);
  });
}

/**
 * The unix-socket channel, for hosts that cannot hand a worker a socketpair (`Deno.Command`) and for
 * workers that would leak an inherited one into their children (Deno's spawn keeps fd 3 open).
 *
 * The host listens on a fresh, unguessable socket name (abstract on Linux, else a socket file in a
 * private 0700 directory that is removed once connected), writes the name and a one-time secret to the
 * worker's stdin (never its environment or arguments, which children could read), accepts only a
 * connection whose first bytes are that secret, refuses every other one, and stops listening.
 *
 * @module
 */

import { closeSync, mkdtempSync, openSync, readSync, rmSync } from "node:fs";
import { connect, createServer, type OnReadOpts, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { ByteChannel } from "../core/adapter.ts";
import { concatBytes } from "../core/frame.ts";
import { socketChannel } from "./_socket_channel.ts";

/** Bytes of the one-time secret. */
export const SECRET_BYTES = 32;

/** How long a host waits for its worker to connect and authenticate. */
const HANDSHAKE_TIMEOUT_MS = 30_000;

/**
 * How long one connection may take to present the secret. A worker writes it as soon as it is connected, so only a
 * stranger's connection (or a worker on a machine stalled for this long) runs out of it.
 */
const SECRET_DEADLINE_MS = 2_000;

/**
 * Connections a listener holds at once before they presented the secret. When one more arrives, the oldest is
 * dropped: a flood of connections that never authenticate costs the host at most this many descriptors, and a
 * worker, which writes its secret as it connects, is dropped only if this many connect after it before its 32
 * bytes are read.
 */
const MAX_UNAUTHENTICATED = 8;

/** How often, and how long apart at first, a worker tries again to connect to a listener whose backlog is full. */
const CONNECT_TRIES = 20;
const CONNECT_RETRY_MS = 5;

/** Hex encoding of bytes. */
function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

function fromHex(text: string): Uint8Array {
  if (!/^(?:[0-9a-f]{2})+$/.test(text)) throw new TypeError("Malformed secret in bootstrap line");
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(i * 2, i * 2 + 2), 16);
  return out;
}

/** Compares two byte arrays in time independent of where they differ. */
function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  let diff = 0;
  for (let i = 0; i < a.byteLength; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

/**
 * `length` random bytes: from /dev/urandom on a Node host, whose first `crypto.getRandomValues` loads all of Node's Web
 * Crypto (tens of ms, a cost every script that starts a worker would pay: `node bench/cold_start.mjs`); from Web
 * Crypto on Deno and Bun (where it costs nothing and reading a file may need a permission) or without /dev/urandom.
 */
function randomBytes(length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  if (!("Deno" in globalThis) && !("Bun" in globalThis)) {
    try {
      const fd = openSync("/dev/urandom", "r");
      try {
        if (readSync(fd, bytes) === length) return bytes;
      } finally {
        closeSync(fd);
      }
    } catch {
      // no /dev/urandom (Windows): Web Crypto
    }
  }
  return crypto.getRandomValues(bytes);
}

/** A fresh one-time secret. */
export function newSecret(): Uint8Array {
  return randomBytes(SECRET_BYTES);
}

/** The line a host writes to its worker's stdin. */
export function bootstrapLine(path: string, secret: Uint8Array): string {
  return `${JSON.stringify({ path, secret: toHex(secret) })}\n`;
}

/**
 * A socket path nobody else can use: an unguessable abstract name, or a file in a new 0700 directory
 * (`dir`, to remove once connected).
 */
export function privateSocketPath(abstract: boolean): { path: string; dir?: string } {
  if (abstract) return { path: `\0spawnpool-${toHex(randomBytes(16))}` };
  const dir = mkdtempSync(join(tmpdir(), "spawnpool-")); // mkdtemp creates it 0700
  return { path: join(dir, "s"), dir };
}

/** A listener waiting for one worker; `Out` is what an authenticated connection becomes. */
export interface PendingWorker<Out = ByteChannel> {
  /** The line to write to the worker's stdin. */
  bootstrapLine: string;
  /** Resolves with the authenticated connection; rejects when `exited` settles or the timeout passes first. */
  accept(exited: Promise<unknown>): Promise<Out>;
  /** Stops listening and removes any socket file. */
  close(): void;
}

/**
 * What a listener's transport does for {@linkcode pendingWorker}: the one waiting, checking and timing
 * logic, whatever the socket API.
 */
export interface HandshakeTransport<Conn, Out = ByteChannel> {
  /** Calls `onConnection` for every accepted connection until {@linkcode HandshakeTransport.close}. */
  listen(onConnection: (conn: Conn) => void): void;
  /**
   * Reads a connection's first {@linkcode SECRET_BYTES} bytes (`head`, shorter if it ended first) and any
   * bytes read past them (`rest`), after which the connection delivers nothing until made a channel.
   */
  readSecret(conn: Conn): Promise<{ head: Uint8Array; rest: Uint8Array }>;
  /** What an authenticated connection becomes (a channel); `rest` holds its first bytes. */
  accepted(conn: Conn, rest: Uint8Array): Out;
  /** Closes a connection that is not (or no longer) wanted. */
  drop(conn: Conn): void;
  /** Stops listening and removes any socket file. */
  close(): void;
}

/**
 * A listener waiting for one worker at `path`. Every connection is read on its own, so one that never
 * sends its secret cannot hold up the worker's; the first to present `secret` becomes the channel, and
 * whatever else is pending when the wait ends is closed, as is the listener. A connection that has not presented
 * the secret within {@linkcode SECRET_DEADLINE_MS} is closed, and at most {@linkcode MAX_UNAUTHENTICATED} wait at
 * once (the oldest goes first).
 */
export function pendingWorker<Conn, Out = ByteChannel>(
  path: string,
  secret: Uint8Array,
  transport: HandshakeTransport<Conn, Out>,
): PendingWorker<Out> {
  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    transport.close();
  };
  return {
    bootstrapLine: bootstrapLine(path, secret),
    close,
    accept(exited) {
      return new Promise<Out>((resolve, reject) => {
        /** Connections that have not presented the secret, oldest first, with their deadlines. */
        const pending = new Map<Conn, ReturnType<typeof setTimeout>>();
        let done = false;
        const forget = (conn: Conn): boolean => {
          const deadline = pending.get(conn);
          if (deadline === undefined) return false;
          clearTimeout(deadline);
          pending.delete(conn);
          return true;
        };
        const refuse = (conn: Conn) => {
          if (forget(conn)) transport.drop(conn);
        };
        const finish = (error: Error | undefined, out?: Out) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          for (const conn of [...pending.keys()]) refuse(conn);
          close();
          if (error) reject(error);
          else resolve(out!);
        };
        const timer = setTimeout(() => finish(new Error("Worker did not connect in time")), HANDSHAKE_TIMEOUT_MS);
        void exited.then(() => finish(new Error("Worker exited before connecting")));
        transport.listen((conn) => {
          if (done) return transport.drop(conn);
          if (pending.size >= MAX_UNAUTHENTICATED) refuse(pending.keys().next().value!);
          pending.set(conn, setTimeout(() => refuse(conn), SECRET_DEADLINE_MS));
          transport.readSecret(conn).then(({ head, rest }) => {
            if (!forget(conn)) return; // dropped meanwhile
            if (!done && sameBytes(head, secret)) finish(undefined, transport.accepted(conn, rest));
            else transport.drop(conn);
          }, () => refuse(conn));
        });
      });
    },
  };
}

/**
 * Listens with `node:net` on a fresh private socket for one connection presenting `secret`.
 *
 * @param abstract Use an abstract socket name (Linux); otherwise a socket file in a 0700 directory.
 */
async function listenNet<Out>(
  abstract: boolean,
  secret: Uint8Array,
  accepted: (socket: Socket, rest: Uint8Array) => Out,
): Promise<PendingWorker<Out> & { path: string }> {
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
      if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
    },
  });
  return { ...pending, path };
}

/**
 * Listens on a fresh private socket for one worker, with `node:net` (Node and Bun hosts).
 *
 * @param abstract Use an abstract socket name (Linux); otherwise a socket file in a 0700 directory.
 */
export function listenForWorker(abstract: boolean = process.platform === "linux"): Promise<PendingWorker> {
  return listenNet(abstract, newSecret(), socketChannel);
}

/**
 * A connected pair of unix stream sockets, whose `worker` end a Node host hands its worker as fd 3 (and
 * then closes) while it reads the `host` end through `onread`. Node has no socketpair call, and the
 * sockets `child_process` makes for a pipe cannot be given `onread`, which only `net.connect` takes.
 *
 * The pair is made like a worker's handshake: the host connects to a fresh private socket and presents
 * a fresh secret, the listener takes only the connection that presents it, refuses all others and stops
 * listening. The host writes nothing else on `host` until the worker has `worker`.
 *
 * @param abstract Use an abstract socket name (Linux); otherwise a socket file in a 0700 directory.
 */
export async function connectedPair(
  onread: OnReadOpts,
  abstract: boolean = process.platform === "linux",
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

/** Worker side: reads the bootstrap line from stdin and lets stdin go. */
function readBootstrapLine(): Promise<string> {
  return new Promise<string>((resolve, reject) => {
    let text = "";
    const decoder = new TextDecoder();
    const onData = (chunk: Uint8Array) => {
      text += decoder.decode(chunk, { stream: true });
      const end = text.indexOf("\n");
      if (end < 0) return;
      process.stdin.off("data", onData);
      process.stdin.pause();
      resolve(text.slice(0, end));
    };
    process.stdin.on("data", onData);
    process.stdin.once("end", () => reject(new Error("Host closed stdin before sending the bootstrap line")));
  });
}

/** Parses a bootstrap line into the socket path and the secret. */
function parseBootstrap(line: string): { path: string; secret: Uint8Array } {
  const parsed = JSON.parse(line) as { path?: unknown; secret?: unknown };
  if (typeof parsed.path !== "string" || typeof parsed.secret !== "string") {
    throw new TypeError("Malformed bootstrap line");
  }
  return { path: parsed.path, secret: fromHex(parsed.secret) };
}

/**
 * Worker side: reads the bootstrap line from stdin, connects with `open` (the worker runtime's own socket API) and
 * presents the secret, ahead of every frame.
 */
export async function connectFromBootstrap(open: (path: string) => Promise<ByteChannel>): Promise<ByteChannel> {
  const { path, secret } = parseBootstrap(await readBootstrapLine());
  const channel = await openRetrying(() => open(path));
  channel.write([secret]);
  return channel;
}

/** Whether a connect failed because the listener's backlog was full (EAGAIN on a unix socket): worth another try. */
function backlogFull(error: unknown): boolean {
  const { code, name, message } = error as { code?: unknown; name?: unknown; message?: unknown };
  return code === "EAGAIN" || name === "WouldBlock" ||
    (typeof message === "string" && /EAGAIN|os error 11\b/.test(message));
}

/** Connects with `open`, trying again (backing off) while the listener's backlog is full, as under a flood. */
async function openRetrying(open: () => Promise<ByteChannel>): Promise<ByteChannel> {
  for (let attempt = 1;; attempt++) {
    try {
      return await open();
    } catch (error) {
      if (attempt >= CONNECT_TRIES || !backlogFull(error)) throw error;
      await new Promise((resolve) => setTimeout(resolve, CONNECT_RETRY_MS * Math.min(attempt, 20)));
    }
  }
}

/** Opens a `node:net` channel to the unix socket at `path`: how a Node worker connects. */
export function openSocketChannel(path: string): Promise<ByteChannel> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path }, () => resolve(socketChannel(socket)));
    socket.once("error", reject);
  });
}

/** A worker process as far as the handshake needs it. */
export interface HandshakeProcess {
  /** Settles when the process exits. */
  exited: Promise<unknown>;
  /** Writes the bootstrap line to the process's stdin and closes it. */
  sendLine(line: string): Promise<void>;
  /** Kills the process. */
  kill(): void;
}

/** Hands `process` the bootstrap line and waits for its authenticated connection; kills it on failure. */
export async function handshake(pending: PendingWorker, worker: HandshakeProcess): Promise<ByteChannel> {
  try {
    await worker.sendLine(pending.bootstrapLine);
    return await pending.accept(worker.exited);
  } catch (error) {
    pending.close();
    try {
      worker.kill();
    } catch {
      // Already gone.
    }
    throw error;
  }
}

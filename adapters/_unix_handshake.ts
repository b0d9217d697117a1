/**
 * The unix-socket channel, for hosts that cannot hand a worker a socketpair (`Deno.Command`) and for
 * workers that would leak an inherited one into their children (Deno's spawn keeps fd 3 open).
 *
 * The host listens on a fresh, unguessable socket name (abstract on Linux, else a socket file in a
 * private 0700 directory that is removed once connected), gives the worker the name and a one-time secret in its
 * environment ({@linkcode BOOTSTRAP_VARIABLE}: never its arguments, which every user can read), accepts only a
 * connection whose first bytes are that secret, refuses every other one, and stops listening. The worker removes the
 * variable before it connects, so none of its commands inherits it; `/proc/<pid>/environ`, where it stays, is
 * readable by the host's user alone, and by then the secret is spent.
 *
 * This module holds what every runtime shares and imports no `node:` module (a Deno host loads it at its first
 * worker); the `node:net` listener of Node and Bun hosts is `_net_listener.ts`, the Deno host's is in `deno.ts`.
 *
 * @module
 */

import type { ByteChannel } from "../core/adapter.ts";
import { setTimer } from "../core/timer.ts";
import { joinPath, system } from "./_system.ts";

/** Bytes of the one-time secret. */
export const SECRET_BYTES = 32;

/** The worker's environment variable that holds the bootstrap: its socket's path and the one-time secret, as JSON. */
export const BOOTSTRAP_VARIABLE = "SPAWNPOOL_BOOTSTRAP";

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
  if (!/^(?:[0-9a-f]{2})+$/.test(text)) throw new TypeError(`Malformed secret in ${BOOTSTRAP_VARIABLE}`);
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

/** A fresh one-time secret. */
export function newSecret(): Uint8Array {
  return system.randomBytes(SECRET_BYTES);
}

/** The value of a worker's {@linkcode BOOTSTRAP_VARIABLE}. */
export function bootstrapValue(path: string, secret: Uint8Array): string {
  return JSON.stringify({ path, secret: toHex(secret) });
}

/**
 * A socket path nobody else can use: a file in a new 0700 directory (`dir`, to remove once connected), which no
 * other user can reach at all, or an unguessable abstract name (Linux), which any process of the machine's network
 * namespace can see and connect to (the secret keeps it out; a flood of such connections can slow a start).
 */
export function privateSocketPath(abstract: boolean): { path: string; dir?: string } {
  if (abstract) return { path: `\0spawnpool-${toHex(system.randomBytes(16))}` };
  const dir = system.makePrivateDir("spawnpool-");
  return { path: joinPath(dir, "s"), dir };
}

/** A listener waiting for one worker; `Out` is what an authenticated connection becomes. */
export interface PendingWorker<Out = ByteChannel> {
  /** The worker's {@linkcode BOOTSTRAP_VARIABLE}. */
  bootstrap: string;
  /** The socket's path: a file's, or an abstract name (starting with NUL). */
  path: string;
  /**
   * Resolves with the worker's authenticated connection, also when it came in before the call; rejects when `exited`
   * settles or the timeout passes first.
   */
  accept(exited: Promise<unknown>): Promise<Out>;
  /** Stops listening, removes any socket file, and closes the worker's connection if `accept()` has not taken it. */
  close(): void;
}

/**
 * What a listener's transport does for {@linkcode pendingWorker}: the one waiting, checking and timing
 * logic, whatever the socket API.
 */
export interface HandshakeTransport<Conn, Out = ByteChannel> {
  /**
   * Calls `onConnection` for every accepted connection until {@linkcode HandshakeTransport.close}; called as the
   * pending worker is made.
   */
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
  /**
   * Calls `callback` after `ms` unless the returned function is called first: the runtime's cheapest timer for the
   * deadlines, where `setTimeout` costs more (a Deno host's first one). Default: `setTimeout`.
   */
  timer?(ms: number, callback: () => void): () => void;
}

/**
 * A listener waiting for one worker at `path`. It reads every connection from the start (the worker has its bootstrap
 * as it starts, and may be in before the host waits for it), each on its own, so one that never sends its secret cannot
 * hold up the worker's; the first to present `secret` is the worker's, whatever else is pending then is closed, and so
 * is the listener. A connection that has not presented the secret within {@linkcode SECRET_DEADLINE_MS} is closed,
 * and at most {@linkcode MAX_UNAUTHENTICATED} wait at once (the oldest goes first).
 */
export function pendingWorker<Conn, Out = ByteChannel>(
  path: string,
  secret: Uint8Array,
  transport: HandshakeTransport<Conn, Out>,
): PendingWorker<Out> {
  const after = transport.timer ?? setTimer;
  /** Connections that have not presented the secret, oldest first, with their deadlines. */
  const pending = new Map<Conn, () => void>();
  let listening = true;
  /** The worker's connection, once it presented the secret, until accept() hands it over (or close() drops it). */
  let worker: { conn: Conn; out: Out } | undefined;
  /** What accept() does with the worker's connection, once it waits for it. */
  let deliver: ((out: Out) => void) | undefined;
  const forget = (conn: Conn): boolean => {
    const cancelDeadline = pending.get(conn);
    if (cancelDeadline === undefined) return false;
    cancelDeadline();
    pending.delete(conn);
    return true;
  };
  const refuse = (conn: Conn) => {
    if (forget(conn)) transport.drop(conn);
  };
  /** Stops listening: every connection still pending is closed, and the listener. */
  const stop = () => {
    if (!listening) return;
    listening = false;
    for (const conn of [...pending.keys()]) refuse(conn);
    transport.close();
  };
  transport.listen((conn) => {
    if (!listening) return transport.drop(conn);
    if (pending.size >= MAX_UNAUTHENTICATED) refuse(pending.keys().next().value!);
    pending.set(conn, after(SECRET_DEADLINE_MS, () => refuse(conn)));
    transport.readSecret(conn).then(({ head, rest }) => {
      if (!forget(conn)) return; // dropped meanwhile
      if (!listening || !sameBytes(head, secret)) return transport.drop(conn);
      worker = { conn, out: transport.accepted(conn, rest) };
      stop();
      deliver?.(worker.out);
    }, () => refuse(conn));
  });
  return {
    bootstrap: bootstrapValue(path, secret),
    path,
    close() {
      stop();
      // The worker got in, but nobody took its connection (the start failed meanwhile).
      if (worker !== undefined && deliver === undefined) transport.drop(worker.conn);
    },
    accept(exited) {
      return new Promise<Out>((resolve, reject) => {
        let done = false;
        let cancelDeadline = () => {};
        const finish = (error: Error | undefined, out?: Out) => {
          if (done) return;
          done = true;
          cancelDeadline();
          stop();
          if (error) reject(error);
          else resolve(out!);
        };
        deliver = (out) => finish(undefined, out);
        if (worker !== undefined) return finish(undefined, worker.out);
        if (!listening) return finish(new Error("The listener was closed before the worker connected"));
        cancelDeadline = after(HANDSHAKE_TIMEOUT_MS, () => finish(new Error("Worker did not connect in time")));
        void exited.then(() => finish(new Error("Worker exited before connecting")));
      });
    },
  };
}

/** Worker side: takes the bootstrap out of the environment, before anything could inherit it. */
function takeBootstrap(): string {
  const value = system.getEnv(BOOTSTRAP_VARIABLE);
  system.deleteEnv(BOOTSTRAP_VARIABLE);
  if (value === undefined) throw new Error(`${BOOTSTRAP_VARIABLE} is not set: start me through a Pool`);
  return value;
}

/** Parses a bootstrap into the socket path and the secret. */
function parseBootstrap(value: string): { path: string; secret: Uint8Array } {
  const parsed = JSON.parse(value) as { path?: unknown; secret?: unknown };
  if (typeof parsed.path !== "string" || typeof parsed.secret !== "string") {
    throw new TypeError(`Malformed ${BOOTSTRAP_VARIABLE}`);
  }
  return { path: parsed.path, secret: fromHex(parsed.secret) };
}

/**
 * Worker side: takes the bootstrap from the environment, connects with `open` (the worker runtime's own socket API)
 * and presents the secret, ahead of every frame.
 */
export async function connectFromBootstrap(open: (path: string) => Promise<ByteChannel>): Promise<ByteChannel> {
  const { path, secret } = parseBootstrap(takeBootstrap());
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

/** A worker process as far as the handshake needs it, started with its {@linkcode BOOTSTRAP_VARIABLE}. */
export interface HandshakeProcess {
  /** Settles when the process exits. */
  exited: Promise<unknown>;
  /** Kills the process. */
  kill(): void;
}

/**
 * Waits for the authenticated connection of `worker`, started with `pending.bootstrap` in its environment; kills it
 * on failure. The listener took connections from before the worker started.
 */
export async function handshake(pending: PendingWorker, worker: HandshakeProcess): Promise<ByteChannel> {
  try {
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

/**
 * A Deno worker's arguments with read and write access to its channel's socket file, the one path it must reach (an
 * abstract name needs none); the entry stays last.
 */
export function withSocketAccess(args: readonly string[], path: string): string[] {
  if (path.startsWith("\0")) return [...args];
  return [...args.slice(0, -1), `--allow-read=${path}`, `--allow-write=${path}`, ...args.slice(-1)];
}

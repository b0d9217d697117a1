/**
 * Errors of the pool itself. Bad arguments throw the built-in `TypeError` or `RangeError` at the call;
 * everything the pool can fail at later is a {@linkcode SpawnPoolError} with a stable `code`.
 *
 * @module
 */

import type { WireSpawnFailure } from "./frame.ts";

/** Stable codes of {@linkcode SpawnPoolError}. */
export type SpawnPoolErrorCode =
  /** The worker running the request died or its channel closed before the request completed. */
  | "ERR_WORKER_DIED"
  /** No worker could be started (missing runtime, bad permissions, failed handshake). */
  | "ERR_WORKER_START"
  /** The pool's queue is full (`maxQueue`). */
  | "ERR_QUEUE_FULL"
  /** The pool was closed before or while the request ran. */
  | "ERR_POOL_CLOSED"
  /** The command ran longer than its `timeout` and was killed. */
  | "ERR_TIMEOUT"
  /** Buffered output exceeded `maxBuffer`; the command was killed if it still ran. */
  | "ERR_MAX_BUFFER"
  /** A worker broke the protocol; its channel was closed. */
  | "ERR_PROTOCOL"
  /** A remote pool: no agent listens on the pool's subject. */
  | "ERR_NO_AGENTS"
  /**
   * A remote pool: the command's messages did not get through: one was lost (a gap in the sequence numbers), no agent
   * answered the request in 1.5 s, or the connection to NATS closed or could not send.
   */
  | "ERR_REMOTE_LOST"
  /**
   * A remote pool: the NATS client is not installed, the servers cannot be reached or reject the credentials, or NATS
   * refused a subject the pool needs (a permissions violation).
   */
  | "ERR_REMOTE_CONNECT";

/** Options for {@linkcode SpawnPoolError}. */
export interface SpawnPoolErrorOptions {
  /** The underlying error. */
  cause?: unknown;
  /** The command that was being run, if any. */
  command?: string;
}

/**
 * A failure of the pool rather than of the command: a worker died, the queue is full, the pool closed,
 * a timeout or output limit was hit.
 *
 * @example Telling pool failures apart
 * ```ts
 * import { SpawnPoolError } from "@spawnpool/spawnpool";
 * const error: unknown = new SpawnPoolError("ERR_QUEUE_FULL", "Queue is full");
 * if (error instanceof SpawnPoolError && error.code === "ERR_QUEUE_FULL") {
 *   // shed load
 * }
 * ```
 */
export class SpawnPoolError extends Error {
  /** Stable machine-readable code. */
  readonly code: SpawnPoolErrorCode;
  /** The command being run when the failure happened, if any. */
  readonly command: string | undefined;

  /** Creates a pool error with a stable `code`. */
  constructor(code: SpawnPoolErrorCode, message: string, options: SpawnPoolErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SpawnPoolError";
    this.code = code;
    this.command = options.command;
  }
}

/**
 * A command that could not start (missing program, not executable, bad cwd). `code` is the errno name
 * (`ENOENT`, `EACCES`, ...), as Node reports it. The Deno-shaped API rethrows it as the matching
 * `Deno.errors` class when running in Deno.
 *
 * @example A missing program, through the Bun shape
 * ```ts
 * import { Pool, SpawnError } from "@spawnpool/spawnpool";
 *
 * await using pool = new Pool({ size: 1 });
 * try {
 *   await pool.spawn(["no-such-program"]).exited;
 * } catch (error) {
 *   if (error instanceof SpawnError) console.log(error.code, error.syscall); // "ENOENT" "spawn no-such-program"
 * }
 * ```
 */
export class SpawnError extends Error {
  /** Errno name such as `ENOENT`. */
  readonly code: string;
  /** Negative errno, where known. */
  readonly errno: number | undefined;
  /** The system call that failed, as Node names it. */
  readonly syscall: string;
  /** The program that failed to start. */
  readonly path: string;
  /** Its arguments. */
  readonly spawnargs: readonly string[];
  /** Why, as the worker's runtime (or the host's check) said it, without the program's name. */
  readonly reason: string;

  /** Creates a spawn error from a worker's report. */
  constructor(details: WireSpawnFailure, path: string, args: readonly string[]) {
    super(`Failed to spawn "${path}": ${details.message}`);
    this.reason = details.message;
    this.name = "SpawnError";
    this.code = details.code;
    this.errno = details.errno;
    this.syscall = `spawn ${path}`;
    this.path = path;
    this.spawnargs = args;
  }
}

/**
 * `ERR_POOL_CLOSED`, for whatever a closed pool refuses or ends (or a pool whose host is exiting refuses); with the
 * command when there is one.
 */
export function poolClosed(command?: string, hostExiting = false): SpawnPoolError {
  return new SpawnPoolError("ERR_POOL_CLOSED", hostExiting ? "Pool is closed: its host is exiting" : "Pool is closed", {
    command,
  });
}

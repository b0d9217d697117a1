/**
 * Validation and defaults for what every API shape accepts; turns a call into a {@linkcode SpawnRequest}.
 * Bad input throws `TypeError` or `RangeError` here, synchronously, before anything reaches a worker.
 *
 * @module
 */

import type { SpawnRequest } from "./frame.ts";
import { checkLimits, type Limits } from "./limits.ts";
import { signalName } from "./signals.ts";

/** Options shared by every API shape. */
export interface CommonOptions {
  /** Working directory of the command. @default {the worker's, which is the host's at pool start} */
  cwd?: string | URL;
  /** Kill the command after this many milliseconds (with `killSignal`, then SIGKILL). @default {no limit} */
  timeout?: number;
  /** Signal sent on `timeout`. @default {"SIGTERM"} */
  killSignal?: string | number;
  /** After `killSignal`, send SIGKILL if the command still runs this many milliseconds later. @default {5000} */
  forceKillAfterDelay?: number;
  /** Kill the command when its buffered output passes this many bytes. @default {no limit} */
  maxBuffer?: number;
  /** Kills the command with SIGTERM when aborted. */
  signal?: AbortSignal;
  /**
   * Keep everything the command starts within reach, and end all of it, not just the command, whenever the pool ends
   * the command: a kill, `timeout`, `maxBuffer`, the pool's close or the host's exit. Its descendants stay its own
   * even when they leave its process group or when their parent exits (the native worker makes the command a child
   * subreaper). Native workers only: on Deno, Bun and Node workers the command fails with a `SpawnError` of code
   * `ENOTSUP`. Not with `detached`.
   *
   * @default {the pool's `killTree`, else false}
   *
   * @example A build whose every process goes with it
   * ```ts ignore
   * const child = pool.command("make", { args: ["-j8"], killTree: true, timeout: 60_000 }).spawn();
   * ```
   */
  killTree?: boolean;
  /**
   * Resource limits (`setrlimit`, soft and hard) set in the command's process before its program starts, inherited
   * by what it starts. Native workers only: on Deno, Bun and Node workers the command fails with a `SpawnError` of
   * code `ENOTSUP`. When the worker can tell which limit ended the command, its status says so (`limit`).
   *
   * @default {the pool's `limits` (an object given here replaces them whole: limits are not merged one by one), else
   * none}
   *
   * @example At most 10 s of CPU and 1 GiB of memory
   * ```ts ignore
   * await pool.command("convert", { args, limits: { cpuSeconds: 10, memoryBytes: 2 ** 30 } }).output();
   * ```
   */
  limits?: Limits;
}

/** What a pool gives its commands unless they say otherwise: its `killTree` and `limits`, checked. */
export interface RequestDefaults {
  /** A command's `killTree` when it gives none (a detached command has none). */
  readonly killTree?: boolean;
  /** A command's `limits` when it gives none. */
  readonly limits?: Limits;
}

/**
 * Checks a pool's `killTree` and `limits`, the defaults of its commands.
 *
 * @returns The defaults, or undefined when the pool gives none.
 * @throws {TypeError} If `killTree` is not a boolean, or `limits` is not an object of known limits.
 * @throws {RangeError} If a limit is out of range.
 */
export function requestDefaults(options: { killTree?: unknown; limits?: unknown }): RequestDefaults | undefined {
  if (options.killTree !== undefined && typeof options.killTree !== "boolean") {
    throw new TypeError(`killTree must be a boolean, got ${typeof options.killTree}`);
  }
  const limits = checkLimits(options.limits);
  if (options.killTree === undefined && limits === undefined) return undefined;
  return { killTree: options.killTree, limits };
}

/**
 * Everything a request is built from: the shape's common options, the request's own fields as the wire carries
 * them, and the program and arguments as a caller may give them (a `file:` URL, a read-only array).
 */
export type RequestInput =
  & CommonOptions
  & Pick<SpawnRequest, "stdin" | "stdout" | "stderr" | "buffered">
  & Partial<Pick<SpawnRequest, "env" | "clearEnv" | "argv0" | "uid" | "gid" | "detached" | "sockets" | "terminal">>
  & { cmd: string | URL; args: readonly string[] };

/** Default flow-control window per stream: bytes a worker sends ahead of the host's reads. */
export const DEFAULT_WINDOW: number = 1024 * 1024;
/** Default delay between `killSignal` and SIGKILL. */
export const DEFAULT_FORCE_KILL_AFTER_DELAY = 5000;

function noNul(value: string, what: string): string {
  if (value.includes("\0")) throw new TypeError(`${what} must not contain NUL bytes`);
  return value;
}

/** A path from a string or a `file:` URL. */
export function toPath(value: string | URL, what: string): string {
  if (value instanceof URL) {
    if (value.protocol !== "file:") throw new TypeError(`${what} must be a file: URL, got "${value.href}"`);
    return noNul(decodeURIComponent(value.pathname), what);
  }
  if (typeof value !== "string") throw new TypeError(`${what} must be a string or a URL, got ${typeof value}`);
  if (value === "") throw new TypeError(`${what} must not be empty`);
  return noNul(value, what);
}

/** The longest delay a timer takes; a longer one would fire at once (every runtime's timers overflow there). */
export const MAX_TIMER_MS: number = 2 ** 31 - 1;

function positiveInteger(value: unknown, what: string, allowZero = false): number {
  if (typeof value !== "number" || !Number.isInteger(value) || value < (allowZero ? 0 : 1)) {
    throw new RangeError(`${what} must be a ${allowZero ? "non-negative" : "positive"} integer, got ${String(value)}`);
  }
  return value;
}

function delay(value: unknown, what: string, allowZero = false): number {
  const ms = positiveInteger(value, what, allowZero);
  if (ms > MAX_TIMER_MS) throw new RangeError(`${what} must be at most ${MAX_TIMER_MS} ms, got ${ms}`);
  return ms;
}

/** Every option {@linkcode buildRequest} reads. */
const OPTION_KEYS = [
  "cmd",
  "args",
  "cwd",
  "env",
  "clearEnv",
  "stdin",
  "stdout",
  "stderr",
  "buffered",
  "timeout",
  "killSignal",
  "forceKillAfterDelay",
  "maxBuffer",
  "signal",
  "argv0",
  "uid",
  "gid",
  "detached",
  "sockets",
  "killTree",
  "limits",
  "terminal",
] as const;

/**
 * The call's own options, in an object without a prototype: a value planted on `Object.prototype` is never read as an
 * option. Built with index loops, as is the rest of the request, so a tampered `Array.prototype[Symbol.iterator]`
 * cannot break it either (Deno's and Node's own tests tamper with both).
 */
function ownOptions(given: RequestInput): RequestInput {
  const own = Object.create(null) as Record<string, unknown>;
  for (let i = 0; i < OPTION_KEYS.length; i++) {
    const key = OPTION_KEYS[i];
    if (Object.hasOwn(given, key)) own[key] = given[key];
  }
  return own as unknown as RequestInput;
}

/**
 * Validates a call and builds its request.
 *
 * @param given The call's options.
 * @param defaults The pool's defaults for what the call leaves out (`killTree`, `limits`).
 * @throws {TypeError} For a value of the wrong type, a string with a NUL byte, or `killTree` with `detached`.
 * @throws {RangeError} For a number out of range or an unknown signal.
 */
export function buildRequest(given: RequestInput, defaults?: RequestDefaults): SpawnRequest {
  const input = ownOptions(given);
  const cmd = toPath(input.cmd, "Command");
  if (!Array.isArray(input.args)) throw new TypeError("Arguments must be an array of strings");
  const args = input.args.map((arg, i) => {
    if (typeof arg !== "string") throw new TypeError(`Argument ${i} must be a string, got ${typeof arg}`);
    return noNul(arg, `Argument ${i}`);
  });
  let env: Record<string, string> | undefined;
  if (input.env !== undefined) {
    if (typeof input.env !== "object" || input.env === null) throw new TypeError("env must be an object");
    // Without a prototype, a "__proto__" key is a variable like any other (on `{}` it would set the prototype).
    env = Object.create(null) as Record<string, string>;
    const names = Object.keys(input.env);
    for (let i = 0; i < names.length; i++) {
      const key = names[i];
      const value: unknown = input.env[key];
      if (value === undefined) continue;
      if (typeof value !== "string") {
        throw new TypeError(`Environment variable "${key}" must be a string, got ${typeof value}`);
      }
      if (key === "" || key.includes("=")) throw new TypeError(`Invalid environment variable name "${key}"`);
      env[noNul(key, "Environment variable name")] = noNul(value, `Environment variable "${key}"`);
    }
  }
  const request: SpawnRequest = {
    cmd,
    args,
    stdin: input.stdin,
    stdout: input.stdout,
    stderr: input.stderr,
    buffered: input.buffered,
    killSignal: signalName(input.killSignal ?? "SIGTERM"),
    forceKillAfterDelay: input.forceKillAfterDelay === undefined
      ? DEFAULT_FORCE_KILL_AFTER_DELAY
      : delay(input.forceKillAfterDelay, "forceKillAfterDelay", true),
    window: DEFAULT_WINDOW,
    // Only a timeout signals a command's group (and execFile's timer, which comes with one); a detached command
    // leads its own session anyway.
    group: input.timeout !== undefined || input.detached === true,
  };
  if (input.cwd !== undefined) request.cwd = toPath(input.cwd, "cwd");
  if (env !== undefined) request.env = env;
  if (input.clearEnv) request.clearEnv = true;
  if (input.timeout !== undefined) request.timeout = delay(input.timeout, "timeout");
  if (input.maxBuffer !== undefined) request.maxBuffer = positiveInteger(input.maxBuffer, "maxBuffer");
  if (input.argv0 !== undefined) {
    if (typeof input.argv0 !== "string") throw new TypeError("argv0 must be a string");
    request.argv0 = noNul(input.argv0, "argv0");
  }
  const ids = ["uid", "gid"] as const;
  for (let i = 0; i < ids.length; i++) {
    const key = ids[i];
    const id = input[key];
    if (id === undefined) continue;
    if (!Number.isInteger(id) || id < -0x8000_0000 || id > 0x7fff_ffff) {
      throw new RangeError(`${key} must be a 32-bit integer, got ${String(id)}`);
    }
    request[key] = id;
  }
  if (input.detached) request.detached = true;
  if (input.sockets) request.sockets = true;
  if (input.killTree !== undefined && typeof input.killTree !== "boolean") {
    throw new TypeError(`killTree must be a boolean, got ${typeof input.killTree}`);
  }
  if (input.killTree === true && input.detached === true) {
    throw new TypeError(
      "killTree cannot be used with detached: a detached command outlives its worker, and killTree ends its whole " +
        "tree with it",
    );
  }
  // The pool's killTree is no default of a detached command's, which is to outlive the worker.
  if (input.killTree ?? (input.detached !== true && defaults?.killTree)) request.killTree = true;
  // An empty object sets none: it is how a command leaves out its pool's limits.
  const limits = input.limits === undefined ? defaults?.limits : checkLimits(input.limits);
  if (limits !== undefined && Object.keys(limits).length > 0) request.limits = limits;
  if (input.terminal !== undefined) {
    // Checked where it was made (core/terminal.ts): a terminal's command leads the terminal's session.
    if (input.detached === true) {
      throw new TypeError("terminal cannot be used with detached: the command leads the session of its terminal");
    }
    request.terminal = input.terminal;
  }
  if (input.signal !== undefined && !(input.signal instanceof AbortSignal)) {
    throw new TypeError("signal must be an AbortSignal");
  }
  return request;
}

/** Checks a stdio option against the values an API shape accepts. */
export function stdioOption<T extends string>(
  value: unknown,
  allowed: readonly T[],
  fallback: T,
  what: string,
): T {
  if (value === undefined) return fallback;
  if (typeof value === "string" && (allowed as readonly string[]).includes(value)) return value as T;
  throw new TypeError(`${what} must be one of ${allowed.map((a) => `"${a}"`).join(", ")}, got ${String(value)}`);
}

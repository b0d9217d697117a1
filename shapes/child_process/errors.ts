/**
 * Errors shaped like Node's, and the validators that throw them.
 *
 * @module
 */

import { constants as osConstants } from "node:os";
import type { SpawnError } from "../../core/errors.ts";
import { MAX_TIMER_MS } from "../../core/options.ts";
import { signalName } from "../../core/signals.ts";

export type NodeError = Error & { code: string };

/**
 * `node:util`, loaded when an error message needs it: importing the module makes Node and Bun build its namespace
 * from every export, which loads worker_threads and more (2.4-2.6 ms of a script's start).
 */
const util = (): typeof import("node:util") =>
  (globalThis as unknown as { process: NodeJS.Process }).process.getBuiltinModule("node:util");

/**
 * An error as Node's internal ones: `name` stays the class's, while its stack and `String(error)` read
 * "RangeError [ERR_OUT_OF_RANGE]: ..." (what `assert.throws(fn, /ERR_OUT_OF_RANGE/)` matches).
 */
export function nodeError<E extends Error>(
  Base: new (message: string) => E,
  code: string,
  message: string,
): E & NodeError {
  const error = new Base(message) as E & NodeError;
  error.code = code;
  const name = error.name;
  if (typeof error.stack === "string" && error.stack.startsWith(`${name}: `)) {
    error.stack = `${name} [${code}]${error.stack.slice(name.length)}`;
  }
  Object.defineProperty(error, "toString", {
    value: () => `${error.name} [${code}]: ${error.message}`,
    enumerable: false,
    writable: true,
    configurable: true,
  });
  return error;
}

function received(value: unknown): string {
  if (value === null || value === undefined) return ` Received ${value}`;
  if (typeof value === "function") return ` Received function ${value.name || "<anonymous>"}`;
  if (typeof value === "object") {
    const name = (value as object).constructor?.name;
    return name ? ` Received an instance of ${name}` : " Received an object";
  }
  const shown = typeof value === "string" ? `'${value.length > 25 ? `${value.slice(0, 25)}...` : value}'` : value;
  return ` Received type ${typeof value} (${String(shown)})`;
}

export function invalidArgType(name: string, expected: string, value: unknown): NodeError {
  const kind = name.includes(".") ? "property" : "argument";
  return nodeError(
    TypeError,
    "ERR_INVALID_ARG_TYPE",
    `The "${name}" ${kind} must be ${expected}.${received(value)}`,
  );
}

export function invalidArgValue(name: string, value: unknown, reason = "is invalid"): NodeError {
  const kind = name.includes(".") ? "property" : "argument";
  let shown = util().inspect(value);
  if (shown.length > 128) shown = `${shown.slice(0, 128)}...`;
  return nodeError(TypeError, "ERR_INVALID_ARG_VALUE", `The ${kind} '${name}' ${reason}. Received ${shown}`);
}

export function outOfRange(name: string, range: string, value: unknown): NodeError {
  return nodeError(
    RangeError,
    "ERR_OUT_OF_RANGE",
    `The value of "${name}" is out of range. It must be ${range}. Received ${String(value)}`,
  );
}

/**
 * The error an aborted `signal` produces, as Node's `AbortError` (`code` `"ABORT_ERR"`).
 *
 * @example Aborting a command
 * ```ts
 * import { execFile } from "@spawnpool/spawnpool/node";
 *
 * const controller = new AbortController();
 * execFile("sleep", ["10"], { signal: controller.signal }, (error) => {
 *   console.log(error?.name, (error as { code?: string } | null)?.code); // "AbortError" "ABORT_ERR"
 * });
 * controller.abort();
 * ```
 */
export class AbortError extends Error {
  /** Always `"ABORT_ERR"`. */
  readonly code = "ABORT_ERR";

  /** Creates an abort error whose cause is the signal's reason. */
  constructor(message = "The operation was aborted", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "AbortError";
  }
}

export function noNulBytes(value: unknown, name: string): void {
  if (typeof value === "string" && value.includes("\0")) {
    throw invalidArgValue(name, value, "must be a string without null bytes");
  }
}

export function errnoOf(code: string): number | undefined {
  const errno = (osConstants.errno as Record<string, number | undefined>)[code];
  return errno === undefined ? undefined : -errno;
}

/**
 * A command that could not start as Node reports it: "spawn <file> <code>" with Node's own fields, enumerable as in
 * Node; the pool's {@linkcode SpawnError} stays reachable as the (hidden) cause.
 */
export function nodeSpawnError(error: SpawnError, file: string, args: string[]): Error & { errno: number | undefined } {
  const errno = error.errno ?? errnoOf(error.code);
  return Object.assign(new Error(`spawn ${file} ${error.code}`, { cause: error }), {
    errno,
    code: error.code,
    syscall: `spawn ${file}`,
    path: file,
    spawnargs: args,
  });
}

/** Node's `convertToValidSignal`: a signal's name from its name (in any case) or number, else ERR_UNKNOWN_SIGNAL. */
export function validSignal(value: unknown): string {
  if (typeof value === "string" || typeof value === "number") {
    try {
      return signalName(typeof value === "string" ? value.toUpperCase() : value);
    } catch {
      // unknown: thrown below, as for a value of another type
    }
  }
  throw nodeError(TypeError, "ERR_UNKNOWN_SIGNAL", util().format("Unknown signal: %s", value));
}

/** Node's `sanitizeKillSignal` for a `killSignal` option: undefined when absent, else a signal's name. */
export function killSignalOf(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" && typeof value !== "number") {
    throw invalidArgType(name, "one of type string or number", value);
  }
  return validSignal(value);
}

export function validateTimeout(timeout: unknown): number {
  if (timeout === undefined || timeout === null) return 0;
  if (!(Number.isInteger(timeout) && (timeout as number) >= 0)) {
    throw outOfRange("timeout", "an unsigned integer", timeout);
  }
  // Node accepts more, and its timer then fires at once: a pool refuses instead of killing the command.
  if ((timeout as number) > MAX_TIMER_MS) throw outOfRange("timeout", `<= ${MAX_TIMER_MS}`, timeout);
  return timeout as number;
}

export function validateAbortSignal(signal: unknown, name: string): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== "object" || !("aborted" in signal)) {
    throw invalidArgType(name, "an instance of AbortSignal", signal);
  }
  return signal as AbortSignal;
}

/**
 * Resource limits of a command (`limits`): the `setrlimit` limits its worker sets in the child before it runs the
 * program, as its soft and its hard limit, so the command cannot raise them again. Native workers only: a JavaScript
 * runtime's spawn has no step between fork and exec to set them in.
 *
 * @module
 */

/**
 * Resource limits for one command, each an `RLIMIT_*` of the kernel's, set in the child before its program starts.
 * A limit left out is inherited from the worker.
 */
export interface Limits {
  /**
   * CPU time in seconds (`RLIMIT_CPU`): past it the command gets SIGXCPU, and SIGKILL a second later (its hard limit
   * is one more, so that a program that handles SIGXCPU gets to stop). At least 1.
   */
  cpuSeconds?: number;
  /** Memory in bytes: the most address space the command may map (`RLIMIT_AS`); an allocation past it fails. */
  memoryBytes?: number;
  /**
   * Processes and threads (`RLIMIT_NPROC`): counted for the command's user over the whole machine, not for the command
   * alone, so set it above what that user already runs. At least 1.
   */
  processes?: number;
  /** Open file descriptors (`RLIMIT_NOFILE`): one more than the highest descriptor the command may open. At least 1. */
  openFiles?: number;
  /** The largest file the command may write, in bytes (`RLIMIT_FSIZE`): a write past it gets SIGXFSZ. */
  fileSizeBytes?: number;
  /** The largest core dump the command may leave, in bytes (`RLIMIT_CORE`): 0 for none. */
  coreBytes?: number;
}

/** Which limit ended a command, when its worker can tell: as it reports it in the exit. */
export type ExceededLimit = "cpu" | "fileSize" | "memory" | "processes";

/** The limits {@linkcode ExceededLimit} names: anything else from a worker is a protocol error. */
export const EXCEEDED_LIMITS: readonly ExceededLimit[] = ["cpu", "fileSize", "memory", "processes"];

/** Each limit and its least value: a count must be at least 1 (0 would leave the command unable to run), bytes 0. */
export const LIMIT_MINIMUMS: Readonly<Record<keyof Limits, 0 | 1>> = {
  cpuSeconds: 1,
  memoryBytes: 0,
  processes: 1,
  openFiles: 1,
  fileSizeBytes: 0,
  coreBytes: 0,
};

/** The names of {@linkcode Limits}, in a fixed order. */
export const LIMIT_KEYS: readonly (keyof Limits)[] = Object.keys(LIMIT_MINIMUMS) as (keyof Limits)[];

/**
 * Checks a `limits` option and copies it: only the limits given, in an object without a prototype (a limit planted on
 * `Object.prototype` is never read, and a `"__proto__"` key is an unknown limit like any other).
 *
 * @param value The option as given.
 * @param what What the option is called in messages.
 * @returns The limits, checked; undefined when `value` is.
 * @throws {TypeError} If `value` is not a plain object, a key is not a limit, or a limit is not a number.
 * @throws {RangeError} If a limit is not a safe integer, or is below its least value.
 */
export function checkLimits(value: unknown, what = "limits"): Limits | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(`${what} must be an object, got ${value === null ? "null" : typeof value}`);
  }
  const limits = Object.create(null) as Record<string, number>;
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    if (!Object.hasOwn(LIMIT_MINIMUMS, key)) {
      throw new TypeError(`Unknown limit "${key}" in ${what}; the limits are ${LIMIT_KEYS.join(", ")}`);
    }
    const limit: unknown = (value as Record<string, unknown>)[key];
    if (limit === undefined) continue;
    if (typeof limit !== "number") throw new TypeError(`${what}.${key} must be a number, got ${typeof limit}`);
    const least = LIMIT_MINIMUMS[key as keyof Limits];
    if (!Number.isSafeInteger(limit) || limit < least) {
      throw new RangeError(
        `${what}.${key} must be a ${least === 0 ? "non-negative" : "positive"} safe integer, got ${String(limit)}`,
      );
    }
    limits[key] = limit;
  }
  return limits as Limits;
}

/**
 * Whether a request's `limits`, as a worker or an agent receives it, is well formed: an object of known limits, each a
 * non-negative safe integer.
 */
export function isWireLimits(value: unknown): value is Limits {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    if (!Object.hasOwn(LIMIT_MINIMUMS, keys[i])) return false;
    const limit: unknown = (value as Record<string, unknown>)[keys[i]];
    if (!Number.isSafeInteger(limit) || (limit as number) < 0) return false;
  }
  return true;
}

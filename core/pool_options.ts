/**
 * A pool's options ({@linkcode PoolOptions}), and their check: what {@linkcode poolConfig} makes of them, once, for the
 * pool's constructor.
 *
 * @module
 */

import type { Platform, WorkerRuntime } from "./adapter.ts";
import type { Limits } from "./limits.ts";
import { type RequestDefaults, requestDefaults } from "./options.ts";

/** Options of a pool of local workers (a remote pool takes `remote` instead: pool.ts). */
export interface PoolOptions {
  /**
   * Number of worker processes.
   *
   * @default {Math.min(4, Math.max(2, cores))}
   */
  size?: number;
  /**
   * Runtime the workers run in, independent of the host's: "deno", "bun", "node", or "native" for the C worker
   * (built by `npm run build:native` in a checkout; from npm, in the optional package
   * `@spawnpool/worker-<platform>-<arch>`). An explicit "native" without a binary fails with `ERR_WORKER_START`.
   *
   * @default {"native" where the binary for this platform is present and its first worker says hello (and no
   * `execPath` is given), else the host's runtime; `stats().runtime` says which}
   */
  runtime?: WorkerRuntime;
  /**
   * Executable of the worker runtime (without `runtime`: of the host's runtime).
   *
   * @default {the host's own executable for the same runtime, else the runtime's name looked up on PATH}
   */
  execPath?: string;
  /**
   * Requests that may wait for a worker (while workers start or are replaced) before new ones reject
   * with `ERR_QUEUE_FULL`.
   *
   * @default {Infinity}
   */
  maxQueue?: number;
  /**
   * Runs commands from the host process itself, with its runtime's own spawn, until a worker is ready: workers start
   * only once two commands run at once, and the host goes on running commands while they start (none waits for a
   * worker to boot), then none. A script that runs one command, or a few one after the other, starts no worker at all.
   * Commands that need a process group of their own (`timeout`, `detached`) always go to workers.
   * {@linkcode PoolCore.ready} starts the workers at once.
   *
   * @default {false; `configureDefaultPool({ startInHost: true })` turns it on for the default pool}
   */
  startInHost?: boolean;
  /**
   * Every command's `killTree` unless it gives its own (`CommonOptions.killTree`): end everything a command started
   * whenever the pool ends it. Not applied to `detached` commands. Native workers only: on other workers a command
   * that gets it fails with `ENOTSUP`.
   *
   * @default {false}
   *
   * @example No command's processes outlive it
   * ```ts ignore
   * await using pool = new Pool({ runtime: "native", killTree: true });
   * ```
   */
  killTree?: boolean;
  /**
   * Every command's resource limits unless it gives its own `limits` (`CommonOptions.limits`). A command's `limits`
   * replaces these whole, not limit by limit: `{ limits: { cpuSeconds: 5 } }` on a command of a pool with
   * `{ memoryBytes, cpuSeconds: 60 }` has no memory limit, and `{ limits: {} }` has none at all. Native workers only:
   * on other workers a command that gets limits fails with `ENOTSUP`.
   *
   * @default {none}
   *
   * @example At most a minute of CPU and 2 GiB of memory for each command
   * ```ts ignore
   * await using pool = new Pool({ runtime: "native", limits: { cpuSeconds: 60, memoryBytes: 2 * 2 ** 30 } });
   * ```
   */
  limits?: Limits;
  /**
   * A cgroup v2 directory (an absolute path, such as `/sys/fs/cgroup/jobs`) this process may write to: the native
   * workers run each command in a cgroup of its own under it (which they make, and remove as they exit), so that its
   * controllers (`memory.max`, `pids.max`, `cpu.max`) bound all the pool's commands together. Native workers only
   * (`runtime: "native"`, the pool's runtime when it is given without one; the pool then never falls back to the
   * host's runtime), and not with `startInHost`: a command run in the host would escape it.
   *
   * @default {none: commands stay in the worker's cgroup}
   *
   * @example Commands in a cgroup of their own
   * ```ts ignore
   * await using pool = new Pool({ runtime: "native", cgroup: "/sys/fs/cgroup/spawnpool-jobs" });
   * ```
   */
  cgroup?: string;
}

/** A pool's options, checked, with their defaults in. */
export interface PoolConfig {
  size: number;
  maxQueue: number;
  /** The cgroup the workers put their commands in (native workers only). */
  cgroup: string | undefined;
  runtime: WorkerRuntime;
  /** "undecided" when the pool, given no runtime, execPath or cgroup, is to look for native workers first. */
  native: "undecided" | "no";
  execPath: string | undefined;
  /** Whether the pool runs commands in the host until a worker is ready (and the platform can). */
  startInHost: boolean;
  /** What the pool gives its commands unless they say otherwise: its `killTree` and `limits`. */
  defaults: RequestDefaults | undefined;
}

/**
 * Checks a pool's options and fills in their defaults.
 *
 * @throws {RangeError} If `size` or `maxQueue` is not a positive integer, or a limit is out of range.
 * @throws {TypeError} If `runtime` is not "deno", "bun", "node" or "native", if `killTree` or `limits` is
 *   malformed, or if `cgroup` is not an absolute path or is given for workers other than native ones.
 */
export function poolConfig(platform: Platform, options: PoolOptions): PoolConfig {
  if (typeof options !== "object" || options === null) throw new TypeError("Pool options must be an object");
  const size = options.size ?? Math.min(4, Math.max(2, platform.cores));
  if (!Number.isInteger(size) || size < 1) {
    throw new RangeError(`Pool size must be a positive integer, got ${String(options.size)}`);
  }
  const maxQueue = checkMaxQueue(options.maxQueue);
  const cgroup = checkCgroup(options.cgroup);
  // A cgroup is the native worker's to use: given without a runtime (or an execPath, the host runtime's), the pool
  // runs native workers, and does not fall back to others, whose commands would run outside it.
  const runtime = options.runtime ??
    (cgroup !== undefined && options.execPath === undefined ? "native" : platform.runtime);
  if (runtime !== "deno" && runtime !== "bun" && runtime !== "node" && runtime !== "native") {
    throw new TypeError(`Worker runtime must be "deno", "bun", "node" or "native", got "${String(runtime)}"`);
  }
  if (cgroup !== undefined && runtime !== "native") {
    throw new TypeError(`cgroup needs native workers (runtime: "native"), got runtime "${runtime}"`);
  }
  if (cgroup !== undefined && options.startInHost === true) {
    throw new TypeError("cgroup cannot be used with startInHost: a command run in the host would run outside it");
  }
  const defaults = requestDefaults(options);
  if (options.execPath !== undefined && typeof options.execPath !== "string") {
    throw new TypeError("execPath must be a string");
  }
  if (options.startInHost !== undefined && typeof options.startInHost !== "boolean") {
    throw new TypeError("startInHost must be a boolean");
  }
  return {
    size,
    maxQueue,
    cgroup,
    runtime,
    native: options.runtime === undefined && options.execPath === undefined && cgroup === undefined
      ? "undecided"
      : "no",
    execPath: options.execPath,
    startInHost: options.startInHost === true && platform.inHost !== undefined,
    defaults,
  };
}

/**
 * A pool's `cgroup`, checked: an absolute path, as a string without NUL bytes.
 *
 * @throws {TypeError} If it is not.
 */
export function checkCgroup(cgroup: unknown): string | undefined {
  if (cgroup === undefined) return undefined;
  if (typeof cgroup !== "string") throw new TypeError(`cgroup must be a string, got ${typeof cgroup}`);
  if (!cgroup.startsWith("/") || cgroup.includes("\0")) {
    throw new TypeError(`cgroup must be the absolute path of a cgroup v2 directory, got "${cgroup}"`);
  }
  return cgroup;
}

/**
 * A pool's `maxQueue`, `Infinity` when not given.
 *
 * @throws {RangeError} If it is not a non-negative integer.
 */
export function checkMaxQueue(maxQueue: number | undefined): number {
  if (maxQueue === undefined || maxQueue === Infinity) return Infinity;
  if (!Number.isInteger(maxQueue) || maxQueue < 0) {
    throw new RangeError(`maxQueue must be a non-negative integer, got ${String(maxQueue)}`);
  }
  return maxQueue;
}

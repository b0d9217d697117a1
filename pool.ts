/**
 * The public pool, bound to the runtime it runs in, and the drop-ins backed by a lazily started
 * default pool.
 *
 * @module
 */

import { currentPlatform, provideInHost } from "./adapters/platform.ts";
import { startInHost } from "./worker/in_host.ts";
import { type CommandOptions, PoolCommand, type PooledChildProcess } from "./shapes/command.ts";
import type { Scheduler } from "./core/scheduler.ts";
import { requestDefaults } from "./core/options.ts";
import { PoolCore } from "./core/pool_core.ts";
import { checkMaxQueue, type PoolOptions as LocalPoolOptions } from "./core/pool_options.ts";
import type { PoolStats } from "./core/pool_stats.ts";
import type { RemoteOptions, RemoteTlsOptions } from "./remote/options.ts";
import { DeferredRemotePool } from "./remote/deferred_pool.ts";
import {
  PooledSubprocess,
  type PooledSubprocess as Subprocess,
  spawnArguments,
  type SpawnOptions,
  type SpawnOptionsWithCmd,
} from "./shapes/subprocess.ts";

provideInHost(startInHost);

/** Options of a pool: local workers (`size`, `runtime`, ...) or, with `remote`, agents on other machines. */
export interface PoolOptions extends LocalPoolOptions {
  /**
   * Run the commands on agents (`spawnpool agent`) reached through NATS, instead of local workers: the servers, the
   * subject the agents listen on, and the credentials. `size`, `runtime`, `execPath`, `startInHost` and `cgroup` are
   * then the agents' to choose (`killTree` and `limits` still hold: they travel with each command). Needs the NATS
   * client, `@nats-io/transport-node`, loaded only for a remote pool.
   */
  remote?: RemoteOptions;
}

/** What runs a pool's commands: local workers or remote agents. */
interface PoolBackend extends Scheduler {
  ready(): Promise<void>;
  stats(): PoolStats;
  close(options?: { drain?: boolean }): Promise<void>;
}

/**
 * The backend `options` ask for.
 *
 * @throws {TypeError} For bad options, or local-worker options given with `remote`.
 */
function backend(options: PoolOptions): PoolBackend {
  if (options?.remote === undefined) return new PoolCore(currentPlatform(), options);
  for (const key of ["size", "runtime", "execPath", "startInHost", "cgroup"] as const) {
    if (options[key] !== undefined) {
      throw new TypeError(
        `Option "${key}" cannot be used with "remote": the agents choose it (spawnpool agent --help)`,
      );
    }
  }
  const host = currentPlatform().host;
  return new DeferredRemotePool(
    options.remote,
    checkMaxQueue(options.maxQueue),
    host.admit?.bind(host),
    requestDefaults(options),
  );
}

/**
 * A pool of long-lived worker processes that run commands for this process. Workers start on first
 * use, never keep the process alive while idle, and are replaced when they die.
 *
 * @example Both API shapes on one pool
 * ```ts
 * import { Pool } from "@spawnpool/spawnpool";
 *
 * await using pool = new Pool({ size: 2 });
 * const out = await pool.command("echo", { args: ["hi"] }).output();
 * console.log(new TextDecoder().decode(out.stdout)); // "hi\n"
 *
 * const proc = pool.spawn(["echo", "hello"]);
 * console.log(await new Response(proc.stdout).text(), await proc.exited); // "hello\n" 0
 * ```
 */
export class Pool {
  readonly #backend: PoolBackend;

  /**
   * Creates a pool; no worker starts (and a remote pool does not connect) until the first command or `ready()`.
   *
   * @param options Size, worker runtime and limits; or, with `remote`, the NATS servers and credentials of agents
   *   that run the commands on other machines (docs/remote.md).
   * @throws {RangeError} If `size` or `maxQueue` is out of range, or one of `limits`.
   * @throws {TypeError} If `runtime` is not "deno", "bun", "node" or "native", if `killTree` or `limits` is
   *   malformed, if `cgroup` is not an absolute path or is given for workers other than native ones, if `remote` is
   *   malformed, or if `size`, `runtime`, `execPath`, `startInHost` or `cgroup` is given with `remote`.
   *
   * @example A remote pool: the commands run on `spawnpool agent`s
   * ```ts ignore
   * import { Pool } from "@spawnpool/spawnpool";
   *
   * await using pool = new Pool({ remote: { servers: "nats://nats.internal:4222", subject: "jobs" } });
   * const { stdout } = await pool.command("uname", { args: ["-n"] }).output(); // an agent's host name
   * ```
   */
  constructor(options: PoolOptions = {}) {
    this.#backend = backend(options);
    backends.set(this, this.#backend);
  }

  /**
   * Starts every worker and resolves when all are ready; a remote pool connects and resolves once an agent answers
   * (rejecting with `ERR_NO_AGENTS` when none does within 2 s).
   */
  ready(): Promise<void> {
    return this.#backend.ready();
  }

  /**
   * A command shaped like `Deno.Command`: call `output()` or `spawn()` on it.
   *
   * @param cmd Program to run (name on PATH, path or file URL).
   * @param options `Deno.CommandOptions` plus the pool's own.
   * @throws {TypeError} For a bad argument.
   */
  command(cmd: string | URL, options?: CommandOptions): PoolCommand {
    return new PoolCommand(this.#backend, cmd, options);
  }

  /**
   * Starts a command shaped like `Bun.spawn`: `spawn([cmd, ...args], options)` or `spawn({ cmd, ... })`.
   *
   * @throws {TypeError} For a bad argument.
   */
  spawn(cmd: string[] | SpawnOptionsWithCmd, options?: SpawnOptions): PooledSubprocess {
    const parsed = spawnArguments(cmd, options);
    return new PooledSubprocess(this.#backend, parsed.cmd, parsed.options);
  }

  /** In-flight and queued requests, and per-worker counts. */
  stats(): PoolStats {
    return this.#backend.stats();
  }

  /**
   * Closes the pool: with `drain` (the default) running and queued commands finish first; without it
   * they fail with `ERR_POOL_CLOSED` and are killed. Resolves when every worker has exited.
   */
  close(options?: { drain?: boolean }): Promise<void> {
    return this.#backend.close(options);
  }

  /** Closes the pool, letting running commands finish. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

const backends = new WeakMap<Pool, PoolBackend>();

/** @internal The scheduler behind a pool, for the other API shapes. */
export function schedulerOf(pool: Pool): Scheduler {
  const scheduler = backends.get(pool);
  if (scheduler === undefined) throw new TypeError("Expected a Pool");
  return scheduler;
}

let shared: PoolBackend | undefined;
let sharedOptions: PoolOptions = {};

/** @internal The default pool, started on first use. */
export function defaultPool(): PoolBackend {
  shared ??= backend(sharedOptions);
  return shared;
}

/**
 * Sets the options of the default pool behind `Command`, `spawn` and the `./node` drop-in, such as
 * `{ runtime: "bun" }` to run a Node app's commands through Bun workers, or `{ remote }` to run them on agents on
 * other machines. Call it before the first command; the default pool starts with these options on first use.
 *
 * @param options Pool options, as for `new Pool()`.
 * @throws {Error} If the default pool has already started.
 * @throws {RangeError} If `size` or `maxQueue` is out of range.
 * @throws {TypeError} For options `new Pool()` would refuse.
 *
 * @example Bun workers for a Node host
 * ```ts ignore
 * import { configureDefaultPool } from "@spawnpool/spawnpool";
 * configureDefaultPool({ runtime: "bun", size: 2 });
 * ```
 */
export function configureDefaultPool(options: PoolOptions): void {
  if (shared !== undefined) throw new Error("The default pool has already started; configure it before first use");
  backend(options); // validates; starts nothing (a remote pool connects on first use)
  sharedOptions = { ...options };
}

/**
 * `Deno.Command` backed by the default pool: replace `new Deno.Command(...)` with `new Command(...)`.
 *
 * @example Swapping Deno.Command
 * ```ts
 * import { Command } from "@spawnpool/spawnpool";
 *
 * const { stdout } = await new Command("echo", { args: ["hi"] }).output();
 * console.log(new TextDecoder().decode(stdout)); // "hi\n"
 * ```
 */
export class Command extends PoolCommand {
  /**
   * Creates a command on the default pool.
   *
   * @throws {TypeError} For a bad argument.
   */
  constructor(cmd: string | URL, options?: CommandOptions) {
    super(defaultPool(), cmd, options);
  }
}

/**
 * `Bun.spawn` backed by the default pool.
 *
 * @example Swapping Bun.spawn
 * ```ts
 * import { spawn } from "@spawnpool/spawnpool";
 *
 * const proc = spawn(["echo", "hi"]);
 * console.log(await new Response(proc.stdout).text()); // "hi\n"
 * ```
 *
 * @throws {TypeError} For a bad argument.
 */
export function spawn(cmd: string[] | SpawnOptionsWithCmd, options?: SpawnOptions): Subprocess {
  const parsed = spawnArguments(cmd, options);
  return new PooledSubprocess(defaultPool(), parsed.cmd, parsed.options);
}

export type {
  CommandOptions,
  LocalPoolOptions,
  PooledChildProcess,
  PoolStats,
  RemoteOptions,
  RemoteTlsOptions,
  SpawnOptions,
  SpawnOptionsWithCmd,
};

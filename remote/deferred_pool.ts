/**
 * A remote pool as `new Pool({ remote })` returns it: its options are checked at once, and the remote pool itself
 * (`remote_pool.ts`, with the relay and the wire protocol, about a sixth of the bundle) is loaded on the pool's first
 * use, not with spawnpool: a script that imports spawnpool and never runs a remote pool does not load it.
 *
 * @module
 */

import { poolClosed, SpawnPoolError } from "../core/errors.ts";
import type { SpawnRequest } from "../core/frame.ts";
import type { Scheduler, Submission } from "../core/scheduler.ts";
import type { RequestDefaults } from "../core/options.ts";
import type { PoolStats } from "../core/pool_stats.ts";
import { checkRemoteOptions, type RemoteOptions } from "./options.ts";
import type { RemotePool } from "./remote_pool.ts";

/** A remote pool that loads its module on first use; until then it holds its commands, in order. */
export class DeferredRemotePool implements Scheduler {
  /** The options as checked when the pool was made (a copy: the caller's object may change after). */
  readonly #options: RemoteOptions;
  readonly #maxQueue: number;
  readonly #admit: ((request: SpawnRequest, resolve?: boolean) => void) | undefined;
  #pool: RemotePool | undefined;
  #loading: Promise<RemotePool> | undefined;
  /** Commands submitted while the module loads, in order. */
  #held: Submission[] = [];
  #closed: Promise<void> | undefined;
  /** @internal What the pool gives its commands unless they say otherwise (its `killTree`, `limits`). */
  readonly defaults: RequestDefaults | undefined;

  /**
   * Checks the options; loads nothing and connects to nothing.
   *
   * @param defaults The pool's `killTree` and `limits`, checked: they travel with each command's request.
   * @throws {TypeError} For bad options.
   */
  constructor(
    options: RemoteOptions,
    maxQueue: number,
    admit?: (request: SpawnRequest, resolve?: boolean) => void,
    defaults?: RequestDefaults,
  ) {
    this.#options = checkRemoteOptions(options);
    this.#maxQueue = maxQueue;
    this.#admit = admit;
    this.defaults = defaults;
  }

  /** @internal The host runtime's rules for starting a command (a Deno host's run permission). */
  admit(request: SpawnRequest): void {
    this.#admit?.(request, false);
  }

  /** Loads the remote pool, connects, and resolves once an agent answered (as `RemotePool.ready`). */
  async ready(): Promise<void> {
    if (this.#closed) throw poolClosed();
    await (await this.#load()).ready();
  }

  /** @internal Hands the command to the remote pool, once its module is in (commands keep their order). */
  submit(submission: Submission): void {
    if (this.#pool !== undefined) return this.#pool.submit(submission);
    if (this.#closed) return submission.reject(poolClosed(submission.request.cmd));
    this.#held.push(submission);
    void this.#load().catch(() => {}); // what failed is told to the held commands and to ready()
  }

  /** The remote pool's counts; before it is loaded, the commands held meanwhile. */
  stats(): PoolStats {
    return this.#pool?.stats() ??
      { runtime: "remote", inFlight: 0, queued: this.#held.length, started: 0, workers: [] };
  }

  /**
   * Closes the remote pool (as `RemotePool.close`), after the commands submitted while it loaded have reached it; a
   * pool never used closes at once, loading nothing.
   */
  close(options: { drain?: boolean } = {}): Promise<void> {
    this.#closed ??= this.#loading === undefined
      ? Promise.resolve()
      : this.#loading.then((pool) => pool.close(options), () => {});
    return this.#closed;
  }

  /** The remote pool, once loaded; the commands held meanwhile go to it first, in order, or fail with the load. */
  #load(): Promise<RemotePool> {
    this.#loading ??= import("./remote_pool.ts").then(
      ({ RemotePool }) => {
        const pool = new RemotePool(this.#options, this.#maxQueue, this.#admit);
        for (const submission of this.#held.splice(0)) pool.submit(submission);
        this.#pool = pool;
        return pool;
      },
      (error) => {
        const failure = (command?: string) =>
          new SpawnPoolError("ERR_REMOTE_CONNECT", `Could not load the remote pool: ${String(error)}`, {
            command,
            cause: error,
          });
        for (const submission of this.#held.splice(0)) submission.reject(failure(submission.request.cmd));
        this.#loading = undefined; // the next use tries again (and fails alike, the import being cached)
        throw failure();
      },
    );
    return this.#loading;
  }
}

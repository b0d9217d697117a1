/**
 * The pool: starts workers, balances requests across them, replaces workers that die and closes them.
 *
 * @module
 */

import type { Platform, RuntimeName, WorkerRuntime } from "./adapter.ts";
import { poolClosed, SpawnPoolError } from "./errors.ts";
import type { Scheduler, Submission } from "./scheduler.ts";
import { Frame, type SpawnRequest, type WireSpawnFailure } from "./frame.ts";
import type { RequestDefaults } from "./options.ts";
import { poolConfig, type PoolOptions } from "./pool_options.ts";
import type { PoolStats } from "./pool_stats.ts";
import { WorkerHandle } from "./worker_handle.ts";

/** How long to wait before replacing a worker that failed to start, doubled on each failure. */
const RESTART_BACKOFF_MS = 100;
const RESTART_BACKOFF_MAX_MS = 5_000;
/**
 * How long a closed worker may take to exit before it is killed. A worker exits at once when its channel
 * closes, having killed its commands; one that does not is stuck (a Node worker can hang inside
 * process.exit(): nodejs/node#54918), and close() must not wait for it forever. Generous, so that a worker
 * slowed by a loaded machine still gets to kill its commands first.
 */
const EXIT_GRACE_MS = 5_000;

/** The runtime-neutral pool; the public `Pool` binds it to the detected platform. */
export class PoolCore implements Scheduler {
  readonly #platform: Platform;
  readonly #size: number;
  #runtime: WorkerRuntime;
  /**
   * The host's runtime while this pool, given no `runtime`, tries native workers and none has said hello yet: the
   * first native start that fails switches the pool to it. Undefined once decided.
   */
  #fallback: RuntimeName | undefined;
  /** Whether the default's native workers are still to be looked for ({@linkcode PoolCore.#decideRuntime}). */
  #native: "undecided" | "no";
  readonly #execPath: string | undefined;
  readonly #maxQueue: number;
  #workers: WorkerHandle[] = [];
  #ready: WorkerHandle[] = [];
  /** Starts before their worker process exists (backoff, launch). */
  #starting = 0;
  /** Starts not yet ready or failed (the hello included). */
  #starts = new Set<Promise<void>>();
  /** Exits of the workers a closing pool let go; it resolves once all have come. */
  #exits: Array<Promise<void>> = [];
  /** Ends the backoff of starts waiting to retry (a closing pool does not wait them out). */
  #backoffs = new Set<() => void>();
  #started = 0;
  #queue: Submission[] = [];
  #closed: Promise<void> | undefined;
  /** A closing pool still takes workers that become ready while it drains its queue. */
  #draining = false;
  #failures = 0;
  /** Why the last start failed, until the waiters have heard it. */
  #startError: SpawnPoolError | undefined;
  #readyWaiters: Array<{ resolve: () => void; reject: (error: unknown) => void }> = [];
  /** Set by the host-exit hook: the pool starts no worker after it. */
  #hostExited = false;
  /** Stops the host-exit hook, while this pool has one (from its first worker until it closes). */
  #unhookExit: (() => void) | undefined;
  /** Whether the next command may run in the host (`startInHost`): until a worker is ready, or `ready()` is called. */
  #inHostOpen: boolean;
  /** The worker loop inside the host, once started. */
  #inHost: WorkerHandle | undefined;
  /** The cgroup the workers put their commands in (native workers only). */
  readonly #cgroup: string | undefined;
  /** @internal What the pool gives its commands unless they say otherwise: its `killTree` and `limits`. */
  readonly defaults: RequestDefaults | undefined;

  /**
   * Creates a pool; no worker starts until the first request or {@linkcode PoolCore.ready}.
   *
   * @throws {RangeError} If `size` or `maxQueue` is not a positive integer, or a limit is out of range.
   * @throws {TypeError} If `runtime` is not "deno", "bun", "node" or "native", if `killTree` or `limits` is
   *   malformed, or if `cgroup` is not an absolute path or is given for workers other than native ones.
   */
  constructor(platform: Platform, options: PoolOptions = {}) {
    const config = poolConfig(platform, options);
    this.defaults = config.defaults;
    this.#cgroup = config.cgroup;
    this.#inHostOpen = config.startInHost;
    this.#platform = platform;
    this.#size = config.size;
    this.#runtime = config.runtime;
    this.#native = config.native;
    // A pool that starts in the host looks for the native worker when it starts its first worker (a script that runs
    // one command never does).
    if (!this.#inHostOpen) this.#decideRuntime();
    this.#execPath = config.execPath;
    this.#maxQueue = config.maxQueue;
  }

  /**
   * Starts the workers if they are not running and resolves when all have said hello; rejects with
   * `ERR_WORKER_START` if one could not start (the pool goes on with the others).
   */
  async ready(): Promise<void> {
    this.#assertOpen();
    this.#inHostOpen = false;
    this.#fill(this.#size);
    if (this.#ready.length >= this.#size) return;
    await new Promise<void>((resolve, reject) => this.#readyWaiters.push({ resolve, reject }));
  }

  /** @internal Applies the host runtime's rules for starting a command (a Deno host's run permission). */
  admit(request: SpawnRequest): void {
    this.#platform.host.admit?.(request);
  }

  /** @internal The failure a spawn of `request` is certain to meet, as far as the host can tell at once. */
  preflight(request: SpawnRequest): WireSpawnFailure | undefined {
    return this.#platform.preflight?.(request);
  }

  /** @internal Schedules an execution: to the least busy ready worker, or the queue. */
  submit(execution: Submission): void {
    if (this.#closed || this.#hostExited) {
      execution.reject(poolClosed(execution.request.cmd, this.#hostExited));
      return;
    }
    const worker = this.#pick();
    if (worker !== undefined) {
      this.#assign(execution, worker);
      if (worker.inFlight > 1) this.#fill(); // every ready worker was busy: one more, up to the size
      return;
    }
    if (this.#runInHost(execution)) return;
    this.#fill(this.#demand + 1); // counting this request, queued or refused
    if (this.#queue.length >= this.#maxQueue) {
      execution.reject(
        new SpawnPoolError("ERR_QUEUE_FULL", `Pool queue is full (maxQueue ${this.#maxQueue})`, {
          command: execution.request.cmd,
        }),
      );
      return;
    }
    this.#queue.push(execution);
  }

  /** Counts of requests and workers. */
  stats(): PoolStats {
    this.#decideRuntime();
    let inFlight = this.#inHost?.inFlight ?? 0;
    for (const worker of this.#workers) inFlight += worker.inFlight;
    return {
      runtime: this.#runtime,
      inFlight,
      queued: this.#queue.length,
      started: this.#started,
      workers: this.#workers.map((worker) => ({
        pid: worker.process.pid,
        ready: this.#ready.includes(worker),
        inFlight: worker.inFlight,
        completed: worker.completed,
      })),
    };
  }

  /**
   * Closes the pool. New requests reject with `ERR_POOL_CLOSED`. With `{ drain: true }` (the default)
   * running and queued requests finish first; otherwise they fail with `ERR_POOL_CLOSED` and their
   * commands are killed. Resolves when every worker has exited.
   */
  close(options: { drain?: boolean } = {}): Promise<void> {
    if (this.#closed) return this.#closed;
    const drain = options.drain ?? true;
    this.#closed = this.#shutdown(drain);
    return this.#closed;
  }

  async #shutdown(drain: boolean): Promise<void> {
    // Nothing runs before close() has marked the pool closed: a callback reached from here (a failed request's)
    // that submits or closes again sees a closed pool.
    await Promise.resolve();
    const closedError = poolClosed();
    for (const waiter of this.#readyWaiters.splice(0)) waiter.reject(closedError);
    if (drain) {
      this.#draining = true;
      while (this.#queue.length > 0 || this.#workers.some((w) => w.inFlight > 0) || this.#inHostBusy) {
        if (this.#workers.length === 0 && this.#starts.size === 0 && !this.#inHostBusy) break; // nothing left to run them
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      this.#draining = false;
    }
    for (const execution of this.#queue.splice(0)) execution.reject(closedError);
    this.#inHostOpen = false;
    if (this.#inHost !== undefined) this.#retire(this.#inHost);
    for (const end of [...this.#backoffs]) end(); // those starts then see the pool closed, and stop
    // Workers still starting are closed as soon as they exist: wait for them too.
    while (this.#workers.length > 0 || this.#starts.size > 0) {
      for (const worker of this.#workers) this.#retire(worker);
      await Promise.allSettled([...this.#starts]);
    }
    await Promise.all(this.#exits);
    this.#unhookExit?.();
    this.#unhookExit = undefined;
  }

  /**
   * The host is exiting: its workers go with it, now rather than once the runtime has torn down and their channel
   * closes, so that none outlives the host's process. A worker running commands (unref'd ones) is asked to stop
   * (SIGTERM: it kills their process groups and exits, as when its channel closes); an idle one is killed. No worker
   * is started or replaced after this, and no request in flight hears of its worker's end.
   */
  #onHostExit(): void {
    this.#hostExited = true;
    this.#inHostOpen = false;
    if (this.#inHost !== undefined) {
      this.#inHost.hostExiting();
      this.#inHost.process.kill(); // stops the loop: its commands are killed, as a worker's are when the host goes
    }
    for (const worker of this.#workers) {
      worker.hostExiting();
      try {
        worker.process.kill(worker.inFlight > 0 ? "SIGTERM" : "SIGKILL");
      } catch {
        // Gone already: nothing thrown from an exit handler may change how the host exits.
      }
    }
  }

  /** Closes a worker the closing pool no longer wants; the host stays up until it is gone. */
  #retire(worker: WorkerHandle): void {
    worker.process.ref();
    worker.close(poolClosed());
    const stuck = setTimeout(() => worker.process.kill("SIGKILL"), EXIT_GRACE_MS);
    this.#exits.push(worker.process.exited.finally(() => clearTimeout(stuck)));
  }

  /** Whether the worker loop inside the host runs a command. */
  get #inHostBusy(): boolean {
    return (this.#inHost?.inFlight ?? 0) > 0;
  }

  /**
   * Runs `execution` inside the host (`startInHost`) while no worker is ready, if the host takes it. The second command
   * that runs there at once starts the workers; the host goes on taking commands until one is ready (none waits for a
   * worker to start), and none after.
   */
  #runInHost(execution: Submission): boolean {
    const inHost = this.#platform.inHost;
    if (!this.#inHostOpen || inHost === undefined || this.#inHost?.closed) return false;
    if (!inHost.takes(execution.request)) return false; // it waits for a worker, which submit() starts
    if (this.#inHost === undefined) {
      // The loop says hello in a microtask, ahead of its answer to the request sent now.
      const handle = new WorkerHandle(inHost.start(), () => {
        this.#inHostOpen = false;
        if (this.#inHost === handle) this.#inHost = undefined;
      });
      this.#inHost = handle;
      this.#unhookExit ??= this.#platform.onExit?.(() => this.#onHostExit());
    }
    this.#assign(execution, this.#inHost);
    if (this.#inHost.inFlight > 1) this.#fill(this.#inHost.inFlight - 1);
    return true;
  }

  #assertOpen(): void {
    if (this.#closed) throw poolClosed();
  }

  #pick(): WorkerHandle | undefined {
    let best: WorkerHandle | undefined;
    for (const worker of this.#ready) {
      if (best === undefined || worker.inFlight < best.inFlight) best = worker;
    }
    return best;
  }

  #assign(execution: Submission, worker: WorkerHandle): void {
    execution.assign(worker);
    worker.send(Frame.Spawn, execution.id, execution.payload);
  }

  /**
   * The workers wanted now: every one while `ready()` waits, else one per request in flight or queued, up to the
   * size. A script that runs one command starts one worker; a burst of requests starts them all.
   */
  get #demand(): number {
    if (this.#readyWaiters.length > 0) return this.#size;
    let requests = this.#queue.length;
    for (const worker of this.#workers) requests += worker.inFlight;
    return requests;
  }

  /**
   * The default (no `runtime`, no `execPath`) prefers native workers, found once per process (no cost per pool or per
   * spawn beyond this call): decided on the pool's creation, or, for a pool that starts in the host, on its first
   * worker.
   */
  #decideRuntime(): void {
    if (this.#native === "no") return;
    this.#native = "no";
    if (this.#platform.nativeAvailable?.() === true) {
      this.#fallback = this.#platform.runtime;
      this.#runtime = "native";
    }
  }

  /** Starts workers until `wanted` (at most the size) are running or starting. */
  #fill(wanted?: number): void {
    // Counted once: a start can fail before its first await (no runtime on PATH) and free its place at once; a
    // loop that counted again would start it again, forever, without ever yielding.
    const room = this.#size - this.#workers.length - this.#starting;
    // A full pool (the steady state, where every busy submit() lands) returns before counting its demand.
    if (this.#closed || this.#hostExited || room <= 0) return;
    this.#decideRuntime();
    const missing = Math.min(room, (wanted ?? this.#demand) - this.#workers.length - this.#starting);
    for (let i = 0; i < missing; i++) {
      const start = this.#startOne();
      this.#starts.add(start);
      void start.finally(() => {
        this.#starts.delete(start);
        this.#settleWaiters();
      });
    }
  }

  /** Whether a worker that comes up now is wanted: not once the host exits, nor once the pool closes but while it drains. */
  get #wanted(): boolean {
    return !this.#hostExited && (this.#closed === undefined || this.#draining);
  }

  async #startOne(): Promise<void> {
    const runtime = this.#runtime;
    let handle: WorkerHandle | undefined;
    try {
      handle = await this.#launch(runtime);
      if (handle === undefined) return;
      await handle.ready;
      if (runtime !== this.#runtime) {
        // A native worker of the default's that answered after another failed: the pool runs the host's now.
        this.#retire(handle);
        this.#fill();
        return;
      }
      this.#fallback = undefined; // the default's native worker answered: the pool keeps native workers
      if (!this.#wanted) return this.#retire(handle);
      this.#failures = 0;
      this.#inHostOpen = false; // a worker is ready: the host runs no more commands
      this.#ready.push(handle);
      while (this.#queue.length > 0) this.#assign(this.#queue.shift()!, this.#pick()!);
    } catch (error) {
      if (this.#closed !== undefined || this.#hostExited) return; // a closing pool stops its starts, as does an exit
      if (this.#fallback !== undefined || runtime !== this.#runtime) {
        // The default's native worker did not start or say hello: the pool runs the host's runtime, starting now
        // (no failure counted, no backoff). Further native starts that fail just make room.
        if (this.#fallback !== undefined) this.#runtime = this.#fallback;
        this.#fallback = undefined;
        this.#workers = this.#workers.filter((worker) => worker !== handle);
        this.#fill();
        return;
      }
      this.#failures++;
      this.#startError = error instanceof SpawnPoolError ? error : new SpawnPoolError(
        "ERR_WORKER_START",
        `Could not start a ${runtime} worker: ${error instanceof Error ? error.message : String(error)}`,
        { cause: error },
      );
    }
  }

  /** Launches a worker process after the backoff; undefined when the pool no longer wants it by then. */
  async #launch(runtime: WorkerRuntime): Promise<WorkerHandle | undefined> {
    this.#starting++;
    try {
      if (this.#failures > 0) {
        const delay = Math.min(RESTART_BACKOFF_MAX_MS, RESTART_BACKOFF_MS * 2 ** (this.#failures - 1));
        await new Promise<void>((resolve) => {
          const end = () => {
            clearTimeout(timer);
            this.#backoffs.delete(end);
            resolve();
          };
          const timer = setTimeout(end, delay);
          this.#backoffs.add(end);
        });
      }
      if (!this.#wanted) return undefined;
      const first = this.#workers.length === 0 && this.#starting === 1; // this start is counted in #starting
      // Awaited only when the executable is fetched first (the JSR build's native worker): no turn taken otherwise.
      const launched = this.#platform.launch(runtime, this.#execPath, this.#cgroup);
      const launch = { ...(launched instanceof Promise ? await launched : launched), first };
      const process = await this.#platform.host.startWorker(launch);
      // The hello's deadline on the host runtime's cheapest timer (setTimeout where it has none).
      const { host } = this.#platform;
      const handle = new WorkerHandle(process, (closed) => this.#onWorkerClosed(closed), {
        timer: host.unrefTimer?.bind(host),
      });
      if (!this.#wanted) {
        this.#retire(handle); // the pool closed while this worker started
        return undefined;
      }
      // One whose channel closed as it started (a hello with an error, read at once) is not a worker of the pool's:
      // its `ready` has rejected, which #startOne reports.
      if (!handle.closed) this.#workers.push(handle);
      this.#started++;
      this.#unhookExit ??= this.#platform.onExit?.(() => this.#onHostExit());
      return handle;
    } finally {
      this.#starting--;
    }
  }

  /**
   * Once no start is under way: resolves `ready()` when every worker is ready; otherwise a failed start
   * rejects it, and with no worker ready at all, the queued requests too (they would wait forever).
   */
  #settleWaiters(): void {
    if (this.#starts.size > 0) return;
    if (this.#ready.length >= this.#size) {
      this.#startError = undefined;
      for (const waiter of this.#readyWaiters.splice(0)) waiter.resolve();
      return;
    }
    const error = this.#startError;
    if (error === undefined) return;
    this.#startError = undefined;
    for (const waiter of this.#readyWaiters.splice(0)) waiter.reject(error);
    if (this.#ready.length === 0) { for (const execution of this.#queue.splice(0)) execution.reject(error); }
  }

  #onWorkerClosed(handle: WorkerHandle): void {
    const wasReady = this.#ready.includes(handle);
    this.#workers = this.#workers.filter((w) => w !== handle);
    this.#ready = this.#ready.filter((w) => w !== handle);
    // A ready worker that died is replaced when someone waits (queued requests, ready()); an idle pool refills on
    // its next request. One that died starting is a failed start: #startOne reports it, and does not retry.
    if (!this.#closed && wasReady && (this.#queue.length > 0 || this.#readyWaiters.length > 0)) this.#fill();
  }
}

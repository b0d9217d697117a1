/**
 * What `pool.stats()` tells of a pool, local or remote.
 *
 * @module
 */

import type { WorkerRuntime } from "./adapter.ts";

/** A snapshot of a pool's state. */
export interface PoolStats {
  /**
   * Worker runtime: the one asked for, or the default's choice ("native", or the host's after a fallback); "remote"
   * for a pool whose commands run on agents.
   */
  runtime: WorkerRuntime | "remote";
  /** Requests running on workers. */
  inFlight: number;
  /** Requests waiting for a worker. */
  queued: number;
  /** One entry per live worker. */
  workers: Array<{
    pid: number;
    ready: boolean;
    inFlight: number;
    completed: number;
    /** A remote pool's entries are its agents: the agent's name (and `pid` its process id, on its machine). */
    agent?: string;
  }>;
  /** Workers started since the pool was created, replacements included. */
  started: number;
}

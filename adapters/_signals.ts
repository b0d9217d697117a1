/**
 * Worker-side process helpers, through node:process (which all three runtimes provide): termination
 * signals, process groups, and the environment a command gets.
 *
 * @module
 */

import process from "node:process";
import type { SpawnRequest } from "../core/frame.ts";

/** Calls `handler` once on SIGINT, SIGTERM or SIGHUP. */
export function onTerminateSignal(handler: () => void): void {
  let called = false;
  const once = () => {
    if (called) return;
    called = true;
    handler();
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, once);
}

/** SIGKILLs each process group in `groups`; a group that no longer exists is skipped. */
export function killGroups(groups: readonly number[]): void {
  for (const group of groups) {
    try {
      process.kill(-group, "SIGKILL");
    } catch {
      // Gone already (ESRCH).
    }
  }
}

/**
 * A worker's `killOrphans`: SIGKILLs the groups of the commands it left behind, and its own group when it
 * was started as a group leader (a Deno worker's commands may share it).
 */
export function orphanKiller(ownGroup: boolean, workerPid: number): (pids: readonly number[]) => void {
  return (pids) => killGroups(ownGroup ? [...pids, workerPid] : pids);
}

/**
 * The environment for a command: the worker's own `process.env`, without a copy per spawn, unless the
 * request sets variables or clears it. (Not `undefined`: Bun would then pass on the environment the
 * worker started with, variables it has deleted included.)
 */
export function commandEnv(request: SpawnRequest): Record<string, string | undefined> {
  if (request.clearEnv) return { ...request.env };
  return request.env === undefined ? process.env : { ...process.env, ...request.env };
}

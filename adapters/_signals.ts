/**
 * Process helpers of workers and hosts: termination signals, process groups, and the environment a command gets.
 *
 * @module
 */

import type { Adapter } from "../core/adapter.ts";
import type { SpawnRequest } from "../core/frame.ts";
import { system } from "./_system.ts";

/** Calls `handler` once on SIGINT, SIGTERM or SIGHUP. */
export function onTerminateSignal(handler: () => void): void {
  let called = false;
  const once = () => {
    if (called) return;
    called = true;
    handler();
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) system.onSignal(signal, once);
}

/**
 * Whether `group` may be signalled as a process group by this process: never 0 or 1 (to kill() they mean "my own
 * group" and "every process"), never this process's own pid or group; and, on Linux, not the pid of a live process
 * that leads no group of that id (its group is gone, and the pid now names something else), as /proc tells. A pid
 * with no live process may still name a group whose leader exited while its members run on: that one is killed.
 */
function mayKillGroup(group: number): boolean {
  if (!Number.isInteger(group) || group <= 1 || group === system.pid) return false;
  if (system.platform !== "linux" || !procReadable()) return true;
  if (group === groupOf("self")) return false;
  try {
    return groupOf(String(group)) === group;
  } catch {
    return true; // no such process
  }
}

/** The process group of a process (`self` or a pid), from /proc/<pid>/stat (Linux); throws if there is none. */
function groupOf(pid: string): number {
  // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so read after its last ")".
  const stat = system.readText(`/proc/${pid}/stat`);
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
}

/** Whether /proc may be read without asking: always outside Deno; in Deno, with read permission for it. */
function procReadable(): boolean {
  const deno = (globalThis as { Deno?: { permissions: { querySync(d: object): { state: string } } } }).Deno;
  return deno === undefined || deno.permissions.querySync({ name: "read", path: "/proc" }).state === "granted";
}

/**
 * SIGKILLs this process's own group (the worker's, when it was started as a group leader): the commands in it, their
 * children, and this process.
 */
export function killOwnGroup(): void {
  try {
    system.kill(-system.pid, "SIGKILL");
  } catch {
    // Not a group leader (started by hand): nothing to kill.
  }
}

/** SIGKILLs each process group in `groups` that {@linkcode mayKillGroup} allows; one that no longer exists is skipped. */
export function killGroups(groups: readonly number[]): void {
  for (const group of groups) {
    if (!mayKillGroup(group)) continue;
    try {
      system.kill(-group, "SIGKILL");
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
 * The environment for a command (Bun and Node workers): the worker's own `process.env`, without a copy per spawn,
 * unless the request sets variables or clears it. (Not `undefined`: Bun would then pass on the environment the
 * worker started with, variables it has deleted included.)
 */
export function commandEnv(request: SpawnRequest): Record<string, string | undefined> {
  if (request.clearEnv) return { ...request.env };
  const own = system.environment();
  return request.env === undefined ? own : { ...own, ...request.env };
}

/** An adapter's members that are this process's own, the same in every runtime. */
export const ownProcess: Pick<Adapter, "onTerminate" | "deleteEnv" | "getEnv" | "pid" | "exit"> = {
  onTerminate: onTerminateSignal,
  deleteEnv: (name) => system.deleteEnv(name),
  getEnv: (name) => system.getEnv(name),
  pid: () => system.pid,
  exit: (code) => system.exit(code),
};

/**
 * Worker-side process helpers, through node:process (which all three runtimes provide): termination
 * signals, process groups, and the environment a command gets.
 *
 * @module
 */

import { readFileSync } from "node:fs";
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

/**
 * Whether `group` may be signalled as a process group by this process: never 0 or 1 (to kill() they mean "my own
 * group" and "every process"), never this process's own pid or group; and, on Linux, not the pid of a live process
 * that leads no group of that id (its group is gone, and the pid now names something else), as /proc tells. A pid
 * with no live process may still name a group whose leader exited while its members run on: that one is killed.
 */
function mayKillGroup(group: number): boolean {
  if (!Number.isInteger(group) || group <= 1 || group === process.pid) return false;
  if (process.platform !== "linux" || !procReadable()) return true;
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
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
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
    process.kill(-process.pid, "SIGKILL");
  } catch {
    // Not a group leader (started by hand): nothing to kill.
  }
}

/** SIGKILLs each process group in `groups` that {@linkcode mayKillGroup} allows; one that no longer exists is skipped. */
export function killGroups(groups: readonly number[]): void {
  for (const group of groups) {
    if (!mayKillGroup(group)) continue;
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

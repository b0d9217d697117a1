/**
 * Process helpers of workers and hosts: termination signals, process groups, and the environment a command gets.
 *
 * @module
 */

import type { Adapter, ChildProof } from "../core/adapter.ts";
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
 * group" and "every process"), never this process's own pid or group, never a number kill() would read otherwise (past
 * 2^31 - 1, a runtime may pass it on cut to 32 bits, and -group would name another process). With `start` (a command
 * vouched for, {@linkcode vouchFor}): the process of that pid, if it is alive, must still be the one that started
 * then and lead its group; with none alive, the group's id cannot have been taken by another while any of its
 * members run, so what is left of it is killed. Without `start` (the worker itself, the host's own child): on Linux,
 * not the pid of a live process that leads no group of that id.
 */
function mayKillGroup(group: number, start?: string): boolean {
  if (!Number.isInteger(group) || group <= 1 || group > 0x7fff_ffff || group === system.pid) return false;
  if (system.platform !== "linux" || !procReadable()) return start === undefined;
  if (group === groupOf("self")) return false;
  let stat: string[];
  try {
    stat = statFields(String(group));
  } catch {
    return true; // no such process
  }
  if (stat[0] === "X") return true; // reaped, on its way out: as good as none
  return Number(stat[2]) === group && (start === undefined || stat[19] === start);
}

/** The fields of /proc/<pid>/stat after the command's name (state, ppid, pgrp, ...); throws if there is no such process. */
function statFields(pid: string): string[] {
  // pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so read after its last ")".
  const stat = system.readText(`/proc/${pid}/stat`);
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}

/** The process group of a process (`self` or a pid), from /proc/<pid>/stat (Linux); throws if there is none. */
function groupOf(pid: string): number {
  return Number(statFields(pid)[2]);
}

/**
 * Whether the process group of a command this worker's runtime has reaped is certainly gone, its id taken: a live
 * process now has its pid (Linux /proc). A group's id is not given to a new process while any member of the group
 * lives, so a group whose leader is gone and whose pid is free may still hold the command's children (a background job
 * holding its output), and signalling it reaches them only; once a new process has the pid, -pid would signal a
 * stranger's group. False where that cannot be told (not Linux, no permission for /proc).
 */
export function groupIdTaken(pid: number): boolean {
  if (system.platform !== "linux" || !procReadable()) return false;
  try {
    return statFields(String(pid))[0] !== "X";
  } catch {
    return false;
  }
}

/** A live process's start time, as /proc gives it (Linux), for a later {@linkcode killGroups}; undefined otherwise. */
export function startTimeOf(pid: number): string | undefined {
  if (system.platform !== "linux" || !procReadable()) return undefined;
  try {
    const stat = statFields(String(pid));
    return stat[0] === "X" ? undefined : stat[19];
  } catch {
    return undefined;
  }
}

/**
 * A worker's `vouch`: whether a pid it reported is its child, as /proc tells (its parent is the worker, zombies
 * included): that process's start time, `false` for a live process whose parent is another, undefined where it
 * cannot be told (not Linux, no permission for /proc, no such process any more).
 */
export function vouchFor(workerPid: number): (pid: number) => string | false | undefined {
  return (pid) => {
    if (system.platform !== "linux" || !procReadable()) return undefined;
    let stat: string[];
    try {
      stat = statFields(String(pid));
    } catch {
      return undefined; // reaped already: nothing of it to signal
    }
    // Reaped a moment ago: /proc shows it dead ("X"), with no parent (0), until it is gone.
    if (stat[0] === "X" || stat[1] === "0") return undefined;
    return Number(stat[1]) === workerPid ? stat[19] : false;
  };
}

/** Whether `pid` is the live process that started at `start` (/proc's starttime). */
function isProcess(pid: number, start: string): boolean {
  try {
    const stat = statFields(String(pid));
    return stat[0] !== "X" && stat[0] !== "Z" && stat[19] === start;
  } catch {
    return false;
  }
}

/** The children of every thread of `pid`, from /proc (none once it is gone). */
function childrenOf(pid: number): number[] {
  const found: number[] = [];
  let tasks: string[];
  try {
    tasks = system.readDir(`/proc/${pid}/task`);
  } catch {
    return found;
  }
  for (const task of tasks) {
    try {
      for (const child of system.readText(`/proc/${pid}/task/${task}/children`).split(" ")) {
        if (child !== "" && child !== "\n") found.push(Number(child));
      }
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** Whether `pid` is stopped, a zombie or gone: its list of children is final. */
function settled(pid: number): boolean {
  try {
    return "TtZX".includes(statFields(String(pid))[0]);
  } catch {
    return true;
  }
}

/** Sends `signal` to `pid`, if it still exists. */
function signalPid(pid: number, signal: string): void {
  try {
    system.kill(pid, signal);
  } catch {
    // gone (ESRCH)
  }
}

/**
 * SIGKILLs `root` (a live process vouched for) and everything below it, as the native worker's tree.c does when the
 * worker is gone: each process found is stopped, and its children read only once it is stopped (a stopped parent
 * reaps nothing, so no pid read from its list can be reused before it is signalled), until a pass finds nothing new.
 * A killTree command is a subreaper of its own tree, so while it runs its daemons are below it.
 */
function killTreeOf(root: number, start: string): void {
  signalPid(root, "SIGSTOP");
  // Stopped now, or gone: checked again, so that a root reaped (by init) before the stop is not walked from.
  if (!isStopped(root, start)) return;
  const tree = [root];
  const seen = new Set(tree);
  /** Members whose children were read once they had stopped: their lists are final. */
  const done = new Set<number>();
  // One deadline for the whole walk: a process that never stops (uninterruptible sleep) does not hold the host.
  const deadline = performance.now() + 50;
  while (done.size < tree.length) {
    const late = performance.now() >= deadline;
    for (let i = 0; i < tree.length; i++) {
      if (done.has(tree[i])) continue;
      // Its children are read once it has stopped (it can then neither fork nor reap), or past the deadline.
      if (!late && !settled(tree[i])) continue;
      done.add(tree[i]);
      for (const child of childrenOf(tree[i])) {
        if (seen.has(child)) continue;
        seen.add(child);
        tree.push(child);
        signalPid(child, "SIGSTOP");
      }
    }
  }
  for (const pid of tree) signalPid(pid, "SIGKILL");
}

/** Whether `pid` is the process that started at `start`, stopped or on its way to stop. */
function isStopped(pid: number, start: string): boolean {
  try {
    const stat = statFields(String(pid));
    return stat[19] === start && stat[0] !== "X" && stat[0] !== "Z";
  } catch {
    return false;
  }
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

/**
 * SIGKILLs each command's process group that {@linkcode mayKillGroup} allows (one that no longer exists is skipped),
 * and a killTree command's whole tree first (Linux).
 */
export function killGroups(children: readonly ChildProof[], own?: number): void {
  const groups: Array<[number, string | undefined]> = children.map((child) => [child.pid, child.start]);
  if (own !== undefined) groups.push([own, undefined]);
  for (const child of children) {
    if (child.tree && system.platform === "linux" && procReadable() && isProcess(child.pid, child.start)) {
      killTreeOf(child.pid, child.start);
    }
  }
  for (const [group, start] of groups) {
    if (!mayKillGroup(group, start)) continue;
    try {
      system.kill(-group, "SIGKILL");
    } catch {
      // Gone already (ESRCH).
    }
  }
}

/**
 * A worker's `killOrphans`: SIGKILLs the groups of the commands it left behind (those vouched for), and its own group
 * when it was started as a group leader (a Deno worker's commands may share it).
 */
export function orphanKiller(
  ownGroup: boolean,
  workerPid: number,
  cgroup?: string,
): (children: readonly ChildProof[]) => void {
  return (children) => {
    killGroups(children, ownGroup ? workerPid : undefined);
    if (cgroup !== undefined) killLeaves(cgroup, workerPid);
  };
}

/**
 * A dead native worker's cgroup leaves (`<cgroup>/spawnpool-<worker pid>-<n>`, native/cgroup.c): everything in each is
 * SIGKILLed (`cgroup.kill`), and each is removed once empty (retried for a second: killed processes take a moment to
 * go).
 */
function killLeaves(cgroup: string, workerPid: number): void {
  let names: string[];
  try {
    names = system.readDir(cgroup).filter((name) => name.startsWith(`spawnpool-${workerPid}-`));
  } catch {
    return; // gone, or not readable: nothing of ours to clean
  }
  for (const name of names) {
    try {
      system.writeText(`${cgroup}/${name}/cgroup.kill`, "1");
    } catch {
      // no cgroup.kill (Linux before 5.14): the groups' kill above is what ends them
    }
  }
  let tries = 0;
  const remove = () => {
    names = names.filter((name) => {
      try {
        system.removeEmptyDir(`${cgroup}/${name}`);
        return false;
      } catch (error) {
        return (error as { code?: string }).code === "EBUSY" || (error as Error).name === "Busy";
      }
    });
    if (names.length > 0 && ++tries < 20) setTimeout(remove, 50).unref?.();
  };
  remove();
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

/**
 * What tests and benchmarks read about processes from /proc, with no import from spawnpool's sources: a benchmark
 * that measures the npm build (bench/_spawners.ts) imports this without loading the TypeScript sources.
 *
 * @module
 */

import { readdirSync, readFileSync, readlinkSync } from "node:fs";

/** This process's open fds and what each refers to ("?" for one closed while listing). */
export function openFds(): Array<[fd: string, target: string]> {
  return readdirSync("/proc/self/fd").map((fd) => {
    try {
      return [fd, readlinkSync(`/proc/self/fd/${fd}`)];
    } catch {
      return [fd, "?"];
    }
  });
}

/** A process's resident memory in bytes, from /proc. */
export function rssBytes(pid: number): number {
  return statusBytes(pid, "VmRSS");
}

/** A process's resident anonymous memory (its heaps: what a fork copies the page tables of), from /proc. */
export function rssAnonBytes(pid: number): number {
  return statusBytes(pid, "RssAnon");
}

function statusBytes(pid: number, field: string): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(`${field}:`));
  return Number(line!.split(/\s+/)[1]) * 1024;
}

/** Whether a process exists and is not a zombie (this machine's init may not reap orphans at once). */
export function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** A process's direct children, from /proc (empty once it is gone). */
export function childPids(pid: number): number[] {
  const found: number[] = [];
  let tasks: string[] = [];
  try {
    tasks = readdirSync(`/proc/${pid}/task`);
  } catch {
    return found;
  }
  for (const task of tasks) {
    try {
      const listed = readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      if (listed) found.push(...listed.split(" ").map(Number));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

/** A process's descendants, from /proc. */
export function descendants(pid: number): number[] {
  return childPids(pid).flatMap((child) => [child, ...descendants(child)]);
}

/** CPU time a live process has used so far (user + system), in milliseconds, from /proc/<pid>/stat. */
export function cpuMillis(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces and parentheses): utime and stime are the 12th and 13th.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // USER_HZ is 100 on Linux
}

/** The live processes (zombies left out) whose command line holds `marker`, from /proc. */
export function markedProcesses(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      if (cmdline.includes(marker) && alive(Number(entry))) found.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return found;
}

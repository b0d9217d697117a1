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

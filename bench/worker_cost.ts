/**
 * What one worker costs per spawn: its own CPU time (user + sys from /proc/<pid>/stat, its commands excluded) over
 * BENCH_SPAWNS (5,000) `echo hi` at 30 in flight on a pool of one worker, and its resident memory after them (VmRSS,
 * and the peak, VmHWM). For each worker runtime in BENCH_WORKERS (default "native"), under whichever host runs it:
 * `node bench/worker_cost.ts`, `deno run -A bench/worker_cost.ts`, `bun bench/worker_cost.ts`. Prints one JSON line
 * per runtime. Linux only (/proc).
 *
 * @module
 */

import process from "node:process";
import type { WorkerRuntime } from "../mod.ts";
import { countOf } from "../support/fixture.mjs";
import { HOST, loadSpawnpool, processCpu, statusKb } from "./_spawners.ts";

const { Pool } = await loadSpawnpool();
const SPAWNS = countOf("BENCH_SPAWNS", 5000);
const IN_FLIGHT = 30;
const WORKERS = (process.env.BENCH_WORKERS ?? "native").split(",") as WorkerRuntime[];

for (const runtime of WORKERS) {
  await using pool = new Pool({ size: 1, runtime });
  const run = async (count: number) => {
    let next = 0;
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (next++ < count) await pool.command("echo", { args: ["hi"] }).output();
    }));
  };
  await run(500); // warm-up
  const pid = pool.stats().workers[0].pid;
  const before = processCpu(pid)!;
  const started = performance.now();
  await run(SPAWNS);
  const seconds = (performance.now() - started) / 1000;
  const after = processCpu(pid)!;
  console.log(JSON.stringify({
    host: HOST,
    workers: runtime,
    spawns: SPAWNS,
    spawnsPerSec: Math.round(SPAWNS / seconds),
    workerCpuUsPerSpawn: Math.round((after.self - before.self) / SPAWNS),
    workerRssKb: statusKb(pid, "VmRSS"),
    workerPeakRssKb: statusKb(pid, "VmHWM"),
  }));
}

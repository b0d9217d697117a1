/**
 * Native spawning against the pool, under whichever runtime runs this file: `echo hi` and `cat` of a
 * deterministic 163 KB file, at 1 and 30 in flight. Every output is checked byte for byte. For each case
 * it measures spawns/s, latency p50/p99, host CPU time per spawn (user+sys of this process, all threads)
 * and event-loop lag p99 (how late a 1 ms timer fires while the run goes on). On Linux it also splits the
 * CPU per spawn between this process, the workers and the commands, with how busy the machine was. Native and pool runs are
 * interleaved (the order alternates each round) and repeated; medians are reported, with the pool/native
 * ratio of the same run. Prints one JSON line.
 *
 * Run under any runtime: `deno run -A bench/compare.ts`, `bun bench/compare.ts`,
 * `node bench/compare.ts`. Options (env): BENCH_SPAWNS (spawns per measurement at 30 in flight,
 * default 300; a third of it at 1 in flight), BENCH_ROUNDS (3), BENCH_WORKERS (worker runtime, default
 * the host's), BENCH_API (`node`: the pool is called through the `./node` drop-in's `execFile`).
 */

import { Buffer } from "node:buffer";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { RuntimeName } from "../mod.ts";
import { catFixtureBytes, median, writeCatFixture } from "./_fixture.mjs";
import { HOST, loadSpawnpool, loadSpawnpoolNode, nativeOutput, processCpu } from "./_spawners.ts";

const { Pool } = await loadSpawnpool();
const SPAWNS = Number(process.env.BENCH_SPAWNS ?? 300);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WORKERS = (process.env.BENCH_WORKERS ?? HOST) as RuntimeName;
/** How the pool is called: `output()` of its `Deno.Command` shape, or `execFile` of the `./node` drop-in. */
const API = process.env.BENCH_API === "node" ? "node" : "command";

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-bench-"));
const catFile = writeCatFixture(scratch);
const catBytes = Buffer.from(catFixtureBytes());

interface Workload {
  name: string;
  cmd: string;
  args: string[];
  expected: Buffer;
}
const WORKLOADS: Workload[] = [
  { name: "echo", cmd: "echo", args: ["hi"], expected: Buffer.from("hi\n") },
  { name: "cat 163 KB", cmd: "cat", args: [catFile], expected: catBytes },
];
const CONCURRENCY = [1, 30];

type Spawner = (w: Workload) => Promise<Uint8Array>;

const native: Spawner = (w) => nativeOutput(w.cmd, w.args);

const pool = new Pool({ runtime: WORKERS });
const pooled: Spawner = API === "node"
  ? await (async () => {
    const cp = (await loadSpawnpoolNode()).childProcessFor(pool);
    // As a program that switched its import runs it: Buffers, no limit on the output.
    return (w: Workload) =>
      new Promise<Uint8Array>((resolve, reject) => {
        cp.execFile(w.cmd, w.args, { encoding: "buffer", maxBuffer: Infinity }, (error, stdout) => {
          if (error) reject(error);
          else resolve(stdout as Uint8Array);
        });
      });
  })()
  : (w) => pool.command(w.cmd, { args: w.args, stderr: "null" }).output().then((o) => o.stdout);

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];

/** Samples how late a 1 ms timer fires until stopped. */
function lagSampler(): () => number[] {
  const lateness: number[] = [];
  let stopped = false;
  let due = performance.now() + 1;
  const tick = () => {
    if (stopped) return;
    const now = performance.now();
    lateness.push(Math.max(0, now - due));
    due = now + 1;
    setTimeout(tick, 1);
  };
  setTimeout(tick, 1);
  return () => {
    stopped = true;
    return lateness;
  };
}

/** Busy and total CPU time of the whole machine in µs, from /proc/stat (Linux). */
function machineCpu(): { busy: number; total: number } | null {
  try {
    const ticks = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
    const total = ticks.reduce((sum, t) => sum + t, 0);
    return { busy: (total - ticks[3] - ticks[4]) * 1e4, total: total * 1e4 };
  } catch {
    return null;
  }
}

/**
 * Where the CPU went, per spawn: this process, the pool's workers, and the commands themselves (the reaped
 * children of whichever process spawned them), plus how busy the machine was. Linux only.
 */
interface CpuSplit {
  hostUs: number;
  workersUs: number;
  commandsUs: number;
  machineBusyPct: number;
}

function cpuSnapshot(pids: number[]) {
  return { host: processCpu("self"), workers: pids.map(processCpu), machine: machineCpu() };
}

function cpuSplit(before: ReturnType<typeof cpuSnapshot>, after: ReturnType<typeof cpuSnapshot>, spawns: number) {
  const { host: h0, machine: m0 } = before;
  const { host: h1, machine: m1 } = after;
  if (!h0 || !h1 || !m0 || !m1 || [...before.workers, ...after.workers].includes(null)) return null;
  let workersUs = 0;
  let commandsUs = h1.children - h0.children;
  after.workers.forEach((w, i) => {
    workersUs += w!.self - before.workers[i]!.self;
    commandsUs += w!.children - before.workers[i]!.children;
  });
  return {
    hostUs: Math.round((h1.self - h0.self) / spawns),
    workersUs: Math.round(workersUs / spawns),
    commandsUs: Math.round(commandsUs / spawns),
    machineBusyPct: Math.round((m1.busy - m0.busy) / (m1.total - m0.total) * 100),
  };
}

interface Measurement {
  perSec: number;
  p50: number;
  p99: number;
  cpuUsPerSpawn: number;
  lagP99: number;
  cpu: CpuSplit | null;
}

async function measure(spawner: Spawner, w: Workload, inFlight: number): Promise<Measurement> {
  const workerPids = spawner === pooled ? pool.stats().workers.map((worker) => worker.pid) : [];
  const total = inFlight === 1 ? Math.max(10, Math.round(SPAWNS / 3)) : SPAWNS;
  const latencies: number[] = [];
  let next = 0;
  const lane = async () => {
    while (next++ < total) {
      const began = performance.now();
      const out = await spawner(w);
      latencies.push(performance.now() - began);
      if (!w.expected.equals(Buffer.from(out.buffer, out.byteOffset, out.byteLength))) {
        throw new Error(`${w.name}: output differs (${out.byteLength} bytes, expected ${w.expected.length})`);
      }
    }
  };
  const stopLag = lagSampler();
  const split = cpuSnapshot(workerPids);
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: inFlight }, lane));
  const elapsed = performance.now() - start;
  const used = process.cpuUsage(cpu);
  const splitAfter = cpuSnapshot(workerPids);
  const lag = stopLag().sort((a, b) => a - b);
  latencies.sort((a, b) => a - b);
  return {
    perSec: total / (elapsed / 1000),
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    cpuUsPerSpawn: (used.user + used.system) / total,
    lagP99: lag.length ? percentile(lag, 0.99) : 0,
    cpu: cpuSplit(split, splitAfter, total),
  };
}

function summarize(runs: Measurement[]): Measurement {
  const pick = (key: "p50" | "p99" | "lagP99") => Number(median(runs.map((r) => r[key])).toFixed(2));
  return {
    perSec: Math.round(median(runs.map((r) => r.perSec))),
    p50: pick("p50"),
    p99: pick("p99"),
    cpuUsPerSpawn: Math.round(median(runs.map((r) => r.cpuUsPerSpawn))),
    lagP99: pick("lagP99"),
    cpu: runs.every((r) => r.cpu !== null)
      ? {
        hostUs: median(runs.map((r) => r.cpu!.hostUs)),
        workersUs: median(runs.map((r) => r.cpu!.workersUs)),
        commandsUs: median(runs.map((r) => r.cpu!.commandsUs)),
        machineBusyPct: median(runs.map((r) => r.cpu!.machineBusyPct)),
      }
      : null,
  };
}

await pool.ready();
for (const w of WORKLOADS) {
  // Warm-up: both paths once per workload, results discarded.
  await measure(pooled, w, 30);
  await measure(native, w, 30);
}
const cases = [];
for (const w of WORKLOADS) {
  for (const inFlight of CONCURRENCY) {
    const runs = { native: [] as Measurement[], pool: [] as Measurement[] };
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? (["native", "pool"] as const) : (["pool", "native"] as const);
      for (const which of order) runs[which].push(await measure(which === "native" ? native : pooled, w, inFlight));
      process.stderr.write(".");
    }
    const n = summarize(runs.native);
    const p = summarize(runs.pool);
    cases.push({
      workload: w.name,
      inFlight,
      native: n,
      pool: p,
      ratio: Number((p.perSec / n.perSec).toFixed(2)),
      rounds: {
        native: runs.native.map((r) => Math.round(r.perSec)),
        pool: runs.pool.map((r) => Math.round(r.perSec)),
      },
    });
  }
}
process.stderr.write("\n");
await pool.close();
rmSync(scratch, { recursive: true, force: true });
console.log(JSON.stringify({
  host: HOST,
  workers: WORKERS,
  api: API,
  version: HOST === "deno" ? Deno.version.deno : HOST === "bun" ? Bun.version : process.versions.node,
  spawns: SPAWNS,
  rounds: ROUNDS,
  // Node's native spawn forks, so its cost grows with the host's memory (`node bench/node_spawn_rss.mjs` shows
  // how much); the host's RSS is part of the result.
  hostRssMB: Math.round(process.memoryUsage().rss / 2 ** 20),
  cases,
}));

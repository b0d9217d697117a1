/**
 * Native spawning against the pool, under whichever runtime runs this file: `echo hi` and `cat` of a
 * deterministic 163 KB file, at 1 and 30 in flight. Every output is checked byte for byte. For each case
 * it measures spawns/s, latency p50/p99, host CPU time per spawn (user+sys of this process, all threads)
 * and event-loop lag p99 (how late a 1 ms timer fires while the run goes on), beside the lag p99 of an idle
 * process in the same minutes (bench/_lag_probe.mjs: the lag the machine itself adds). On Linux it also splits
 * the CPU per spawn between this process, the workers and the commands, with how busy the machine was. Native
 * and pooled runs are interleaved (the order rotates each round) and repeated; medians are reported, with the
 * pool/native ratio of the same run. One run can compare several ways of pooling with the same native
 * measurements (BENCH_POOLS). Prints one JSON line.
 *
 * Run under any runtime: `deno run -A bench/compare.ts`, `bun bench/compare.ts`, `node bench/compare.ts`.
 * Options (env): BENCH_SPAWNS (spawns per measurement at 30 in flight, default 300; a third of it at 1 in flight
 * and in each path's warm-up), BENCH_ROUNDS (3), BENCH_WORKERS (the workers' runtime, default the host's), BENCH_POOLS
 * (the pooled paths, comma-separated, default BENCH_WORKERS: each is a worker runtime, "native" included, called through the
 * `Deno.Command` shape's `output()`, or a runtime and `:spawn`, through the `Bun.spawn` shape, or a runtime and
 * `:execFile`, through the `./node` drop-in's `execFile`; paths with the same runtime share one pool), BENCH_SIZE (worker processes per pool, default the
 * pool's).
 */

import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { WorkerRuntime } from "../mod.ts";
import {
  catFixtureBytes,
  countOf,
  epochNow,
  median,
  percentile,
  sampleLag,
  untilReady,
  writeCatFixture,
} from "../support/fixture.mjs";
import { HOST, loadSpawnpool, loadSpawnpoolNode, nativeOutput, processCpu, statusKb } from "./_spawners.ts";

const { Pool } = await loadSpawnpool();
const SPAWNS = countOf("BENCH_SPAWNS", 300);
const ROUNDS = countOf("BENCH_ROUNDS", 3);
/** Worker processes per pool; the pool's default when unset. */
const SIZE = process.env.BENCH_SIZE === undefined ? undefined : countOf("BENCH_SIZE", 0);
const RUNTIMES: readonly string[] = ["deno", "bun", "node", "native"];
/** How a pooled path calls the pool: see pooledSpawner. */
type Api = "output" | "spawn" | "execFile";
const APIS: readonly string[] = ["output", "spawn", "execFile"];
/** The pooled paths: a worker runtime each, and how the pool is called. */
const PATHS = (process.env.BENCH_POOLS ?? process.env.BENCH_WORKERS ?? HOST).split(",").map((item) => {
  const [workers, api = "output", ...rest] = item.trim().split(":");
  if (!RUNTIMES.includes(workers) || !APIS.includes(api) || rest.length > 0) {
    throw new Error(
      `BENCH_POOLS: "${item}" is not a runtime (deno, bun, node, native), optionally followed by ":spawn" or ":execFile"`,
    );
  }
  return { workers: workers as WorkerRuntime, api: api as Api };
});

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

type SpawnPool = InstanceType<typeof Pool>;
const pools = new Map<WorkerRuntime, SpawnPool>();
for (const { workers } of PATHS) {
  if (!pools.has(workers)) pools.set(workers, new Pool({ runtime: workers, size: SIZE }));
}

/**
 * Runs a workload through `pool`: `output()` of its `Deno.Command` shape, its `Bun.spawn` shape read as a Bun host
 * reads its own (bench/_spawners.ts), or `execFile` of the `./node` drop-in.
 */
async function pooledSpawner(pool: SpawnPool, api: Api): Promise<Spawner> {
  if (api === "output") {
    return (w) => pool.command(w.cmd, { args: w.args, stderr: "null" }).output().then((o) => o.stdout);
  }
  if (api === "spawn") {
    return (w) => {
      const proc = pool.spawn([w.cmd, ...w.args], { stdout: "pipe", stderr: "ignore" });
      return new Response(proc.stdout).bytes().then(async (bytes) => (await proc.exited, bytes));
    };
  }
  const cp = (await loadSpawnpoolNode()).childProcessFor(pool);
  // As a program that switched its import runs it: Buffers, no limit on the output.
  return (w) =>
    new Promise<Uint8Array>((resolve, reject) => {
      cp.execFile(w.cmd, w.args, { encoding: "buffer", maxBuffer: Infinity }, (error, stdout) => {
        if (error) reject(error);
        else resolve(stdout as Uint8Array);
      });
    });
}

/** What each round measures: native spawning, then each pooled path (rounds start at the next one in turn). */
const contenders: Array<{ spawner: Spawner; pool?: SpawnPool }> = [{ spawner: native }];
for (const { workers, api } of PATHS) {
  const pool = pools.get(workers)!;
  contenders.push({ spawner: await pooledSpawner(pool, api), pool });
}

/** Samples how late a 1 ms timer fires until stopped. */
function lagSampler(): () => number[] {
  const lateness: number[] = [];
  const stop = sampleLag((_, late) => lateness.push(late));
  return () => {
    stop();
    return lateness;
  };
}

/**
 * Starts bench/_lag_probe.mjs under this runtime; resolves once its timer runs. `p99s` hands it the time
 * windows and resolves with the idle process's lag p99 in each.
 */
async function startLagProbe(): Promise<{ p99s(windows: Array<[number, number]>): Promise<Array<number | null>> }> {
  const script = fileURLToPath(new URL("./_lag_probe.mjs", import.meta.url).href);
  const args = HOST === "deno" ? ["run", "--quiet", "--no-config", script] : [script];
  const probe = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] });
  const { exited, stdout } = await untilReady(probe, "the lag probe");
  return {
    async p99s(windows) {
      probe.stdin!.on("error", () => {}); // a probe that died is reported by `exited`
      probe.stdin!.end(`${JSON.stringify(windows)}\n`);
      await exited;
      return JSON.parse(stdout().slice("ready\n".length));
    },
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
  /** The largest peak resident memory (VmHWM) of the pool's workers by the end, KB; null without workers. */
  workerPeakRssKb: number | null;
}

/** The largest peak resident memory (VmHWM, KB) of `pids`, from /proc/<pid>/status; null for none or unreadable. */
function peakRssKb(pids: number[]): number | null {
  let peak: number | null = null;
  for (const pid of pids) {
    try {
      peak = Math.max(peak ?? 0, statusKb(pid, "VmHWM"));
    } catch {
      // gone or not Linux
    }
  }
  return peak;
}

function cpuSnapshot(pids: number[]) {
  return {
    host: processCpu("self"),
    workers: pids.map(processCpu),
    machine: machineCpu(),
    workerPeakRssKb: peakRssKb(pids),
  };
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
    workerPeakRssKb: after.workerPeakRssKb,
  };
}

interface Measurement {
  perSec: number;
  p50: number;
  p99: number;
  cpuUsPerSpawn: number;
  lagP99: number;
  /** The idle process's lag p99 while this ran; filled in once every measurement has run. */
  idleLagP99: number | null;
  cpu: CpuSplit | null;
  /** When it ran, in ms since the epoch. */
  window: [number, number];
}

async function measure(
  { spawner, pool }: { spawner: Spawner; pool?: SpawnPool },
  w: Workload,
  inFlight: number,
  total: number,
): Promise<Measurement> {
  const workerPids = pool?.stats().workers.map((worker) => worker.pid) ?? [];
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
  const from = epochNow();
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
    idleLagP99: null,
    cpu: cpuSplit(split, splitAfter, total),
    window: [from, epochNow()],
  };
}

function summarize(runs: Measurement[]): Omit<Measurement, "window"> {
  const pick = (key: "p50" | "p99" | "lagP99") => Number(median(runs.map((r) => r[key])).toFixed(2));
  const idle = runs.flatMap((r) => r.idleLagP99 ?? []);
  return {
    perSec: Math.round(median(runs.map((r) => r.perSec))),
    p50: pick("p50"),
    p99: pick("p99"),
    cpuUsPerSpawn: Math.round(median(runs.map((r) => r.cpuUsPerSpawn))),
    lagP99: pick("lagP99"),
    idleLagP99: idle.length > 0 ? median(idle) : null,
    cpu: runs.every((r) => r.cpu !== null)
      ? {
        hostUs: median(runs.map((r) => r.cpu!.hostUs)),
        workersUs: median(runs.map((r) => r.cpu!.workersUs)),
        commandsUs: median(runs.map((r) => r.cpu!.commandsUs)),
        machineBusyPct: median(runs.map((r) => r.cpu!.machineBusyPct)),
        // A peak: the largest of the runs.
        workerPeakRssKb: runs.reduce<number | null>((peak, r) => {
          const kb = r.cpu!.workerPeakRssKb;
          return kb === null ? peak : Math.max(peak ?? 0, kb);
        }, null),
      }
      : null,
  };
}

/** Spawns per measurement at 1 in flight, and per warm-up. */
const FEW = Math.max(10, Math.round(SPAWNS / 3));
const probe = await startLagProbe();
await Promise.all([...pools.values()].map((pool) => pool.ready()));
const measured: Array<{ workload: string; inFlight: number; runs: Measurement[][] }> = [];
for (const w of WORKLOADS) {
  // Warm-up: every path once, results discarded. Just before the workload's own measurements, so that the workers'
  // peak memory after echo is echo's (the cat's outputs in flight take more).
  for (const contender of contenders) await measure(contender, w, 30, FEW);
  for (const inFlight of CONCURRENCY) {
    const runs = contenders.map(() => [] as Measurement[]);
    const total = inFlight === 1 ? FEW : SPAWNS;
    for (let round = 0; round < ROUNDS; round++) {
      // Each round starts with the next in turn. With native and one pooled path they alternate; with more paths than
      // rounds, the last paths never go first.
      for (let i = 0; i < contenders.length; i++) {
        const c = (round + i) % contenders.length;
        runs[c].push(await measure(contenders[c], w, inFlight, total));
      }
      process.stderr.write(".");
    }
    measured.push({ workload: w.name, inFlight, runs });
  }
}
process.stderr.write("\n");
const all = measured.flatMap(({ runs }) => runs.flat());
(await probe.p99s(all.map((m) => m.window))).forEach((p99, i) => (all[i].idleLagP99 = p99));
const natives = measured.map(({ runs }) => summarize(runs[0]));
const paths = PATHS.map(({ workers, api }, p) => ({
  workers,
  api,
  cases: measured.map(({ workload, inFlight, runs }, c) => {
    const n = natives[c];
    const pooled = summarize(runs[p + 1]);
    return {
      workload,
      inFlight,
      native: n,
      pool: pooled,
      ratio: Number((pooled.perSec / n.perSec).toFixed(2)),
      rounds: {
        native: runs[0].map((r) => Math.round(r.perSec)),
        pool: runs[p + 1].map((r) => Math.round(r.perSec)),
      },
    };
  }),
}));
for (const pool of pools.values()) await pool.close();
rmSync(scratch, { recursive: true, force: true });
console.log(JSON.stringify({
  host: HOST,
  version: HOST === "deno" ? Deno.version.deno : HOST === "bun" ? Bun.version : process.versions.node,
  spawns: SPAWNS,
  rounds: ROUNDS,
  // Node's native spawn forks, so its cost grows with the host's memory (`node bench/node_spawn_rss.mjs` shows
  // how much); the host's RSS is part of the result.
  hostRssMB: Math.round(process.memoryUsage().rss / 2 ** 20),
  paths,
}));

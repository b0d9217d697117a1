/**
 * Native spawning against the pool, under whichever runtime runs this file: `echo hi` and `cat` of a
 * deterministic 163 KB file, at 1 and 30 in flight. Every output is checked byte for byte. For each case
 * it measures spawns/s, latency p50/p99, host CPU time per spawn (user+sys of this process, all threads)
 * and event-loop lag p99 (how late a 1 ms timer fires while the run goes on), beside the lag p99 of an idle
 * process in the same minutes (bench/_lag_probe.mjs: the lag the machine itself adds). On Linux it also splits
 * the CPU per spawn between this process, the workers and the commands, with how busy the machine was. Native
 * and pool runs are interleaved (the order alternates each round) and repeated; medians are reported, with the
 * pool/native ratio of the same run. Prints one JSON line.
 *
 * Run under any runtime: `deno run -A bench/compare.ts`, `bun bench/compare.ts`,
 * `node bench/compare.ts`. Options (env): BENCH_SPAWNS (spawns per measurement at 30 in flight,
 * default 300 on Deno and Bun and 150 on Node, and as many in each warm-up; a third of it at 1 in flight), BENCH_ROUNDS (3), BENCH_WORKERS (worker runtime, default
 * the host's), BENCH_SIZE (worker processes, default the pool's), BENCH_API (`node`: the pool is called
 * through the `./node` drop-in's `execFile`).
 */

import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { RuntimeName } from "../mod.ts";
import { catFixtureBytes, median, percentile, writeCatFixture } from "./_fixture.mjs";
import { HOST, loadSpawnpool, loadSpawnpoolNode, nativeOutput, processCpu } from "./_spawners.ts";

const { Pool } = await loadSpawnpool();
/**
 * Node spawns natively at 100 to 300 a second here, against 700 to 1,000 for Deno and Bun: 150 spawns still make
 * its native measurements the longest (0.5 to 1.5 s), and keep `npm start` to about a minute.
 */
const SPAWNS = Number(process.env.BENCH_SPAWNS ?? (HOST === "node" ? 150 : 300));
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WORKERS = (process.env.BENCH_WORKERS ?? HOST) as RuntimeName;
/** Worker processes; the pool's default when unset. */
const SIZE = process.env.BENCH_SIZE === undefined ? undefined : Number(process.env.BENCH_SIZE);
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

const pool = new Pool({ runtime: WORKERS, size: SIZE });
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

/**
 * Starts bench/_lag_probe.mjs under this runtime; resolves once its timer runs. `p99s` hands it the time
 * windows and resolves with the idle process's lag p99 in each.
 */
async function startLagProbe(): Promise<{ p99s(windows: Array<[number, number]>): Promise<Array<number | null>> }> {
  const script = new URL("./_lag_probe.mjs", import.meta.url).pathname;
  const args = HOST === "deno" ? ["run", "--quiet", "--no-config", script] : [script];
  const probe = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] });
  let output = "";
  probe.stdout!.setEncoding("utf8");
  const exited = new Promise<void>((resolve, reject) => {
    probe.on("error", reject);
    probe.on("close", (code) => code === 0 ? resolve() : reject(new Error(`the lag probe exited with ${code}`)));
  });
  await new Promise<void>((resolve, reject) => {
    probe.stdout!.on("data", (text: string) => {
      output += text;
      if (output.startsWith("ready\n")) resolve();
    });
    exited.then(() => reject(new Error("the lag probe exited before it was ready")), reject);
  });
  return {
    async p99s(windows) {
      probe.stdin!.end(`${JSON.stringify(windows)}\n`);
      await exited;
      return JSON.parse(output.slice("ready\n".length));
    },
  };
}

/** Now, in ms since the epoch (the lag probe's clock). */
const epochNow = () => performance.timeOrigin + performance.now();

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
  /** The idle process's lag p99 while this ran; filled in once every measurement has run. */
  idleLagP99: number | null;
  cpu: CpuSplit | null;
  /** When it ran, in ms since the epoch. */
  window: [number, number];
}

async function measure(spawner: Spawner, w: Workload, inFlight: number, total: number): Promise<Measurement> {
  const workerPids = spawner === pooled ? pool.stats().workers.map((worker) => worker.pid) : [];
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
      }
      : null,
  };
}

/** Spawns per measurement at 1 in flight. */
const FEW = Math.max(10, Math.round(SPAWNS / 3));
const probe = await startLagProbe();
await pool.ready();
for (const w of WORKLOADS) {
  // Warm-up: both paths once per workload, results discarded.
  await measure(pooled, w, 30, SPAWNS);
  await measure(native, w, 30, SPAWNS);
}
const measured = [];
for (const w of WORKLOADS) {
  for (const inFlight of CONCURRENCY) {
    const runs = { native: [] as Measurement[], pool: [] as Measurement[] };
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? (["native", "pool"] as const) : (["pool", "native"] as const);
      const total = inFlight === 1 ? FEW : SPAWNS;
      for (const which of order) {
        runs[which].push(await measure(which === "native" ? native : pooled, w, inFlight, total));
      }
      process.stderr.write(".");
    }
    measured.push({ workload: w.name, inFlight, runs });
  }
}
process.stderr.write("\n");
const all = measured.flatMap(({ runs }) => [...runs.native, ...runs.pool]);
(await probe.p99s(all.map((m) => m.window))).forEach((p99, i) => (all[i].idleLagP99 = p99));
const cases = measured.map(({ workload, inFlight, runs }) => {
  const n = summarize(runs.native);
  const p = summarize(runs.pool);
  return {
    workload,
    inFlight,
    native: n,
    pool: p,
    ratio: Number((p.perSec / n.perSec).toFixed(2)),
    rounds: {
      native: runs.native.map((r) => Math.round(r.perSec)),
      pool: runs.pool.map((r) => Math.round(r.perSec)),
    },
  };
});
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

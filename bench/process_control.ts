/**
 * What process control costs per spawn on native workers: `echo hi` with nothing on, with `killTree`, with six
 * `limits`, and in a pool `cgroup` (one leaf per command, started in it with clone3), each on a pool of its own.
 * Prints, per case, commands per second at 30 in flight and the worker's CPU per command (user+sys from
 * /proc/<worker>/stat; the commands' own CPU is not in it), as medians of interleaved rounds (each round runs every
 * case, starting with the next one in turn), and each case's ratio to "off" in the same round.
 *
 * The cgroup case needs a writable cgroup v2 directory: BENCH_CGROUP, else a fresh one under /sys/fs/cgroup/unified
 * or /sys/fs/cgroup when this process may create it (it is removed at the end); without one the case is left out and
 * the table says so.
 *
 * `node bench/process_control.ts` (or under deno/bun); BENCH_SPAWNS per round and case (default 2000), BENCH_ROUNDS
 * (default 5).
 *
 * @module
 */

import { mkdirSync, rmdirSync, statfsSync } from "node:fs";
import process from "node:process";
import { Pool, type PoolOptions } from "../mod.ts";
import { countOf, median } from "../support/fixture.mjs";
import { cpuMillis } from "../support/proc.ts";

const SPAWNS = countOf("BENCH_SPAWNS", 2000);
const ROUNDS = countOf("BENCH_ROUNDS", 5);
const IN_FLIGHT = 30;
const CGROUP2_MAGIC = 0x63677270;

/** A writable cgroup v2 directory of this run's own, or undefined (and why) when there is none. */
function cgroupDir(): { path?: string; made: boolean; why?: string } {
  if (process.env.BENCH_CGROUP) return { path: process.env.BENCH_CGROUP, made: false };
  for (const mount of ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]) {
    try {
      if (statfsSync(mount).type !== CGROUP2_MAGIC) continue;
      const path = `${mount}/spawnpool-bench-${process.pid}`;
      mkdirSync(path);
      return { path, made: true };
    } catch {
      // not there, or not ours to write
    }
  }
  return { made: false, why: "no writable cgroup v2 directory (set BENCH_CGROUP)" };
}

interface Case {
  name: string;
  pool: Pool;
  options: { killTree?: boolean; limits?: Record<string, number> };
  samples: Array<{ rate: number; cpu: number }>;
}

async function round(c: Case): Promise<{ rate: number; cpu: number }> {
  const worker = c.pool.stats().workers[0].pid;
  const cpu0 = cpuMillis(worker);
  const t0 = performance.now();
  let started = 0;
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (started < SPAWNS) {
      started++;
      const out = await c.pool.command("echo", { args: ["hi"], ...c.options }).output();
      if (out.code !== 0 || out.stdout.byteLength !== 3) throw new Error(`${c.name}: echo failed: ${out.code}`);
    }
  }));
  const seconds = (performance.now() - t0) / 1000;
  return { rate: SPAWNS / seconds, cpu: ((cpuMillis(worker) - cpu0) * 1000) / SPAWNS };
}

const cgroup = cgroupDir();
const base: PoolOptions = { size: 1, runtime: "native" };
const cases: Case[] = [
  { name: "off", pool: new Pool(base), options: {}, samples: [] },
  { name: "killTree", pool: new Pool(base), options: { killTree: true }, samples: [] },
  {
    name: "limits (6)",
    pool: new Pool(base),
    options: {
      limits: {
        cpuSeconds: 60,
        memoryBytes: 2 ** 32,
        processes: 4096,
        openFiles: 1024,
        fileSizeBytes: 2 ** 32,
        coreBytes: 0,
      },
    },
    samples: [],
  },
];
if (cgroup.path !== undefined) {
  cases.push({ name: "cgroup", pool: new Pool({ ...base, cgroup: cgroup.path }), options: {}, samples: [] });
}
try {
  for (const c of cases) await c.pool.ready();
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < cases.length; i++) {
      const c = cases[(r + i) % cases.length];
      c.samples.push(await round(c));
    }
  }
  const off = cases[0];
  console.log(
    `native workers, echo hi at ${IN_FLIGHT} in flight, ${SPAWNS} per case and round, medians of ${ROUNDS} rounds`,
  );
  console.log("| case | commands/s | vs off | worker CPU per command | vs off |");
  console.log("| --- | ---: | ---: | ---: | ---: |");
  for (const c of cases) {
    const rate = median(c.samples.map((s) => s.rate));
    const cpu = median(c.samples.map((s) => s.cpu));
    const rateRatio = median(c.samples.map((s, i) => s.rate / off.samples[i].rate));
    const cpuRatio = median(c.samples.map((s, i) => s.cpu / off.samples[i].cpu));
    console.log(
      `| ${c.name} | ${rate.toFixed(0)} | ${rateRatio.toFixed(2)}x | ${cpu.toFixed(1)} µs | ${cpuRatio.toFixed(2)}x |`,
    );
  }
  if (cgroup.path === undefined) console.log(`| cgroup | left out: ${cgroup.why} | | | |`);
} finally {
  for (const c of cases) await c.pool.close();
  if (cgroup.made) {
    try {
      rmdirSync(cgroup.path!);
    } catch (error) {
      console.error(`could not remove ${cgroup.path}: ${error}`);
    }
  }
}

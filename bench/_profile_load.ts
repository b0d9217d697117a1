/**
 * The load bench/profile.mjs profiles: one workload, spawned natively or through the pool, 30 in flight, for
 * a fixed time, under whichever runtime runs this file. Output is checked byte for byte, as in compare.ts.
 * Prints "ready" once its pool is warm and the timed load starts (bench/profile.mjs starts recording then), and at
 * the end one JSON line: this process's pid, the workers' pids, how many spawns ran in how many seconds, and this process's CPU time
 * (user+sys, all its threads) per spawn in µs.
 *
 * Env: PROFILE_MODE (native | pool), PROFILE_WORKLOAD (echo | cat), PROFILE_WORKERS (the pool's worker runtime,
 * default this one's), PROFILE_SECONDS (default 5).
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { RuntimeName } from "../mod.ts";
import { catFixtureBytes, countOf, writeCatFixture } from "../support/fixture.mjs";
import { loadSpawnpool, nativeOutput } from "./_spawners.ts";

const MODE = process.env.PROFILE_MODE;
const WORKLOAD = process.env.PROFILE_WORKLOAD;
if ((MODE !== "native" && MODE !== "pool") || (WORKLOAD !== "echo" && WORKLOAD !== "cat")) {
  throw new Error("PROFILE_MODE must be native or pool, PROFILE_WORKLOAD echo or cat");
}
const SECONDS = countOf("PROFILE_SECONDS", 5);
const IN_FLIGHT = 30;

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-profile-"));
const [cmd, args, expected] = WORKLOAD === "echo"
  ? ["echo", ["hi"], Buffer.from("hi\n")]
  : ["cat", [writeCatFixture(scratch)], Buffer.from(catFixtureBytes())];

const { Pool } = await loadSpawnpool();
const workers = process.env.PROFILE_WORKERS as RuntimeName | undefined;
const pool = MODE === "pool" ? new Pool({ runtime: workers }) : undefined;
const run = pool === undefined
  ? () => nativeOutput(cmd, args)
  : () => pool.command(cmd, { args, stderr: "null" }).output().then((o) => o.stdout);

/** Runs `run` with IN_FLIGHT at a time until `until` (ms since the epoch) or `count` spawns; returns how many ran. */
async function load(until: number, count = Infinity): Promise<number> {
  let started = 0;
  async function lane(): Promise<void> {
    while (started < count && Date.now() < until) {
      started++;
      const out = await run();
      if (!expected.equals(out)) throw new Error(`${cmd} printed ${out.byteLength} bytes, not the expected ones`);
    }
  }
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
  return started;
}

try {
  await load(Infinity, 300); // warm-up: workers started, code compiled
  console.log("ready");
  const cpu = process.cpuUsage();
  const started = performance.now();
  const spawns = await load(Date.now() + SECONDS * 1000);
  // Measured, not SECONDS: the spawns in flight at the deadline finish after it.
  const seconds = (performance.now() - started) / 1000;
  const { user, system } = process.cpuUsage(cpu);
  const hostCpuPerSpawn = Math.round((user + system) / spawns);
  const pids = pool?.stats().workers.map((worker) => worker.pid) ?? [];
  console.log(JSON.stringify({ host: process.pid, workers: pids, spawns, seconds, hostCpuPerSpawn }));
} finally {
  await pool?.close();
  rmSync(scratch, { recursive: true, force: true });
}

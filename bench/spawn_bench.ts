/**
 * Throughput of `echo hi` at 30 in flight: this runtime's native spawn API against the pool, interleaved
 * and repeated; prints one JSON line with the medians and the pool/native ratio of the same run.
 *
 * Run under any runtime: `deno run -A bench/spawn_bench.ts`, `bun bench/spawn_bench.ts`,
 * `node bench/spawn_bench.ts`. Options (env): BENCH_SPAWNS (per round, default 600), BENCH_ROUNDS (3),
 * BENCH_WORKERS (worker runtime, default the host's).
 */

import { spawn as nodeSpawn } from "node:child_process";
import process from "node:process";
import { Pool, type RuntimeName } from "../mod.ts";

const HOST: RuntimeName = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";
const SPAWNS = Number(process.env.BENCH_SPAWNS ?? 600);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONCURRENCY = 30;
const WORKERS = (process.env.BENCH_WORKERS ?? HOST) as RuntimeName;
const EXPECTED = "hi\n";

/** This runtime's own fastest spawn of `echo hi`, returning stdout. */
function nativeEcho(): Promise<string> {
  if (HOST === "deno") {
    return new Deno.Command("echo", { args: ["hi"], stdout: "piped", stderr: "null" }).output()
      .then((out) => new TextDecoder().decode(out.stdout));
  }
  if (HOST === "bun") {
    const proc = Bun.spawn(["echo", "hi"], { stdout: "pipe", stderr: "ignore" });
    return new Response(proc.stdout).text().then(async (text) => (await proc.exited, text));
  }
  return new Promise((resolve, reject) => {
    const child = nodeSpawn("echo", ["hi"], { stdio: ["ignore", "pipe", "ignore"] });
    let text = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => (text += s));
    child.on("error", reject).on("close", () => resolve(text));
  });
}

async function run(one: () => Promise<string>): Promise<number> {
  let next = 0;
  const start = performance.now();
  const lane = async () => {
    while (next++ < SPAWNS) {
      const out = await one();
      if (out !== EXPECTED) throw new Error(`Unexpected output ${JSON.stringify(out)}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, lane));
  return SPAWNS / ((performance.now() - start) / 1000);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const pool = new Pool({ runtime: WORKERS });
await pool.ready();
const decoder = new TextDecoder();
const pooledEcho = () =>
  pool.command("echo", { args: ["hi"], stderr: "null" }).output().then((o) => decoder.decode(o.stdout));
await run(pooledEcho); // warm-up
await run(nativeEcho);
const native: number[] = [];
const pooled: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  native.push(await run(nativeEcho));
  pooled.push(await run(pooledEcho));
}
await pool.close();
const result = {
  host: HOST,
  workers: WORKERS,
  version: HOST === "deno" ? Deno.version.deno : HOST === "bun" ? Bun.version : process.versions.node,
  workload: "echo hi, 30 in flight",
  spawnsPerRound: SPAWNS,
  rounds: ROUNDS,
  nativePerSec: Math.round(median(native)),
  poolPerSec: Math.round(median(pooled)),
  ratio: Number((median(pooled) / median(native)).toFixed(2)),
  native: native.map(Math.round),
  pooled: pooled.map(Math.round),
};
console.log(JSON.stringify(result));

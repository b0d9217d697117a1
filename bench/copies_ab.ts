/**
 * Issue 41's "output with fewer copies" as an A/B of two checkouts in one process: `cat` of the 163 KB fixture at 30
 * in flight through the default pool (native workers) of this checkout and of another one (BENCH_BASE: its directory,
 * with its native worker built), against bench/reference/spawn_loop.c --collect (the C loop that spawns and reads each
 * output to its end) and the same loop with output to /dev/null, in interleaved rounds (BENCH_ROUNDS, default 5, of
 * BENCH_SPAWNS, default 300, per case; the order rotates each round). Prints each case's median spawns/s, the rounds'
 * values, the pools' share of the C loop, and the load average before and after.
 *
 * `BENCH_BASE=/path/to/base-checkout node bench/copies_ab.ts` (deno run -A, bun: the same). Needs `cc`.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { Pool } from "../mod.ts";
import { catFixtureBytes, countOf, median, writeCatFixture } from "../support/fixture.mjs";
import { HOST } from "./_spawners.ts";

const SPAWNS = countOf("BENCH_SPAWNS", 300);
const ROUNDS = countOf("BENCH_ROUNDS", 5);
const IN_FLIGHT = 30;
const base = process.env.BENCH_BASE;
if (base === undefined) throw new Error("BENCH_BASE: the directory of the checkout to compare with");
const Base: typeof Pool = (await import(`${base}/mod.ts`)).Pool;

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-copies-"));
const catFile = writeCatFixture(scratch);
const expected = Buffer.from(catFixtureBytes());
const loop = join(scratch, "spawn_loop");
execFileSync("cc", ["-O2", "-o", loop, fileURLToPath(new URL("reference/spawn_loop.c", import.meta.url))]);

const pools = { base: new Base(), this: new Pool() };
await Promise.all(Object.values(pools).map((pool) => pool.ready()));

/** Spawns/s of `n` cats through `pool`, IN_FLIGHT at a time, every output checked. */
async function pooled(pool: Pool, n: number): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
    while (next++ < n) {
      const out = await pool.command("cat", { args: [catFile], stderr: "null" }).output();
      if (!expected.equals(out.stdout)) throw new Error("cat's output differs");
    }
  }));
  return Math.round(n / ((performance.now() - t0) / 1000));
}

function cLoop(flags: string[]): number {
  const line = execFileSync(loop, [...flags, String(SPAWNS), String(IN_FLIGHT), "cat", catFile], { encoding: "utf8" });
  return JSON.parse(line).perSec;
}

const cases: Array<[string, () => Promise<number> | number, number[]]> = [
  ["C loop, output read (--collect)", () => cLoop(["--collect"]), []],
  ["C loop, output to /dev/null", () => cLoop([]), []],
  ["pool, base", () => pooled(pools.base, SPAWNS), []],
  ["pool, this checkout", () => pooled(pools.this, SPAWNS), []],
];

const loadBefore = loadavg()[0];
await pooled(pools.base, 60);
await pooled(pools.this, 60);
for (let r = 0; r < ROUNDS; r++) {
  for (let c = 0; c < cases.length; c++) {
    const [, run, values] = cases[(r + c) % cases.length];
    values.push(await run());
  }
}
const loadAfter = loadavg()[0];
await Promise.all(Object.values(pools).map((pool) => pool.close()));
rmSync(scratch, { recursive: true, force: true });

console.log(
  `${HOST} host, cat 163 KB at ${IN_FLIGHT} in flight, ${ROUNDS} rounds of ${SPAWNS}, base ${base}; ` +
    `load ${loadBefore.toFixed(2)} before, ${loadAfter.toFixed(2)} after`,
);
console.log("| case | median spawns/s | rounds |");
console.log("| --- | ---: | --- |");
for (const [name, , values] of cases) console.log(`| ${name} | ${median(values)} | ${values.join(" ")} |`);
const [collect, , before, after] = cases.map(([, , values]) => median(values));
console.log(
  `of the C loop that reads the output: base ${(before / collect * 100).toFixed(0)} %, ` +
    `this checkout ${(after / collect * 100).toFixed(0)} %`,
);

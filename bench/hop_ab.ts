/**
 * bench/hop.ts's one command at one in flight, as an A/B of two checkouts in one process: the runtime's own spawn of
 * `echo hi`, the default pool of this checkout, and the default pool of another one (BENCH_BASE: its directory, with its
 * native worker built), in interleaved rounds (BENCH_ROUNDS, default 7, of BENCH_SPAWNS, default 300, per case). Each
 * pool runs its own checkout's host code and native worker, so a change on either side is measured against the same
 * machine's moment, which on a shared 2-core machine moves more between runs than the change does.
 *
 * `BENCH_BASE=/path/to/main-checkout node bench/hop_ab.ts` (deno run -A, bun: the same).
 *
 * @module
 */

import process from "node:process";
import { Pool } from "../mod.ts";
import { countOf, median } from "../support/fixture.mjs";
import { HOST, nativeOutput } from "./_spawners.ts";

const SPAWNS = countOf("BENCH_SPAWNS", 300);
const ROUNDS = countOf("BENCH_ROUNDS", 7);
const base = process.env.BENCH_BASE;
if (base === undefined) throw new Error("BENCH_BASE: the directory of the checkout to compare with");
const Base: typeof Pool = (await import(`${base}/mod.ts`)).Pool;

const pools = { base: new Base({ size: 1 }), this: new Pool({ size: 1 }) };

async function native(): Promise<void> {
  const out = await nativeOutput("echo", ["hi"]);
  if (out.byteLength !== 3) throw new Error("echo failed");
}

const pooled = (pool: Pool) => async (): Promise<void> => {
  const out = await pool.command("echo", { args: ["hi"], stderr: "null" }).output();
  if (out.stdout.byteLength !== 3) throw new Error("echo failed");
};

const cases: Array<[string, () => Promise<void>, number[]]> = [
  [`${HOST}'s own spawn`, native, []],
  ["pool (echo), base", pooled(pools.base), []],
  ["pool (echo), this checkout", pooled(pools.this), []],
];

await Promise.all(Object.values(pools).map((pool) => pool.ready()));
for (const [, run] of cases) for (let i = 0; i < 20; i++) await run(); // warm up
const roundMedians: number[][] = cases.map(() => []);
for (let r = 0; r < ROUNDS; r++) {
  for (let c = 0; c < cases.length; c++) {
    const k = (r + c) % cases.length;
    const [, run, times] = cases[k];
    const round: number[] = [];
    for (let i = 0; i < SPAWNS; i++) {
      const t0 = performance.now();
      await run();
      round.push(performance.now() - t0);
    }
    times.push(...round);
    roundMedians[k].push(median(round));
  }
}
await Promise.all(Object.values(pools).map((pool) => pool.close()));

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * p)];
console.log(`${HOST} host, one in flight, ${ROUNDS} rounds of ${SPAWNS}, base ${base}`);
console.log("| case | p50 ms | p90 ms | rounds' p50s |");
console.log("| --- | ---: | ---: | --- |");
cases.forEach(([name, , times], k) => {
  const rounds = roundMedians[k].map((m) => m.toFixed(3)).join(" ");
  console.log(`| ${name} | ${pct(times, 0.5).toFixed(3)} | ${pct(times, 0.9).toFixed(3)} | ${rounds} |`);
});
const [own, before, after] = cases.map(([, , times]) => median(times));
console.log(
  `pool over own (p50): base ${(own / before).toFixed(2)}x, this checkout ${(own / after).toFixed(2)}x; ` +
    `this checkout - base: ${((after - before) * 1000).toFixed(0)} us`,
);
process.exitCode = 0;

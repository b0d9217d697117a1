/**
 * Commands a server walks away from: 1,000 `yes` ended with their output never read (the Bun shape's timeout, the Deno
 * shape's kill, the drop-in's kill, the Bun shape's maxBuffer), 32 in flight, on a pool of each worker runtime. Prints,
 * per worker runtime, the wall time of the run, how long after the last command's exit the pool had nothing in flight,
 * and how long `close()` took. Under whichever runtime runs it: `deno run -A bench/walk_away.ts`, `bun
 * bench/walk_away.ts`, `node bench/walk_away.ts`; BENCH_WORKERS (default native,deno,bun,node), WALK_AWAY_COMMANDS.
 */

import process from "node:process";
import { detectRuntime } from "../adapters/platform.ts";
import { Pool, type WorkerRuntime } from "../mod.ts";
import { abandonedYes } from "../support/abandoned.ts";

const runtimes = (process.env.BENCH_WORKERS ?? "native,deno,bun,node").split(",") as WorkerRuntime[];
const commands = Number(process.env.WALK_AWAY_COMMANDS ?? 1000);

const rows: string[] = [];
for (const runtime of runtimes) {
  const pool = new Pool({ runtime, size: 2 });
  await pool.ready();
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 32 }, async () => {
    for (let i = next++; i < commands; i = next++) await abandonedYes(pool, i);
  }));
  const lastExit = performance.now();
  while (pool.stats().inFlight > 0 && performance.now() - lastExit < 30_000) {
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  const drained = performance.now() - lastExit;
  const closing = performance.now();
  await pool.close();
  const closed = performance.now() - closing;
  rows.push(
    `| ${detectRuntime()} | ${runtime} | ${commands} | ${((lastExit - start) / 1000).toFixed(2)} s | ` +
      `${drained.toFixed(0)} ms | ${closed.toFixed(0)} ms |`,
  );
}
console.log("| host | workers | commands | run | in flight 0 after the last exit | close() |");
console.log("| ---- | ------- | -------- | --- | ------------------------------- | -------- |");
for (const row of rows) console.log(row);

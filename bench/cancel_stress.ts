/**
 * Fast writers whose readers leave: `CANCEL_LOOPS` loops (default 6) each start a streamed `yes`, read one
 * chunk, cancel the reader and wait for the exit, for `CANCEL_SECONDS` (default 40), through one pool of
 * two workers. Prints the requests run and every failure by error code; exits 1 on any failure, or if it ran
 * none.
 *
 * This is the load under which a Bun worker read 69-205 MB from `yes` in one chunk (seen with instrumentation
 * not kept in the repo) and the host dropped it for a frame over its 64 MB limit: before the fix, 3 of 12,103
 * requests failed with `ERR_PROTOCOL` under `bun` (bench/results/2026-11-21-cancel-stress.md).
 * `bun bench/cancel_stress.ts`, `deno run -A bench/cancel_stress.ts`, `node bench/cancel_stress.ts`;
 * `BENCH_WORKERS` picks the workers' runtime.
 */

import process from "node:process";
import { detectRuntime } from "../adapters/platform.ts";
import { Pool, type RuntimeName } from "../mod.ts";
import { cancelledYes } from "../support/soak.ts";
import { countOf } from "../support/fixture.mjs";

const runtime = process.env.BENCH_WORKERS as RuntimeName | undefined;
const loops = countOf("CANCEL_LOOPS", 6);
const seconds = countOf("CANCEL_SECONDS", 40);
const pool = new Pool({ size: 2, ...(runtime ? { runtime } : {}) });
const failures = new Map<string, number>();
let requests = 0;
const deadline = performance.now() + seconds * 1000;

await Promise.all(Array.from({ length: loops }, async () => {
  while (performance.now() < deadline) {
    requests++;
    try {
      const wrong = await cancelledYes(pool);
      if (wrong !== undefined) throw new Error(wrong);
    } catch (error) {
      const key = (error as { code?: string }).code ?? String(error);
      failures.set(key, (failures.get(key) ?? 0) + 1);
    }
  }
}));
await pool.close();
console.log(JSON.stringify({
  host: detectRuntime(),
  workers: runtime ?? detectRuntime(),
  loops,
  seconds,
  requests,
  failures: Object.fromEntries(failures),
}));
process.exit(failures.size === 0 && requests > 0 ? 0 : 1);

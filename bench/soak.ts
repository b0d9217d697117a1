/**
 * The long soak: 100,000 mixed spawns at 64 in flight through one pool (support/soak.ts, the run tests/soak_test.ts
 * makes with fewer), under whichever runtime runs it; prints a JSON report (fds, child processes, worker memory before
 * and after, and what was wrong) and exits 1 if anything was.
 * `deno run -A bench/soak.ts`, `bun bench/soak.ts`, `node bench/soak.ts`; SOAK_SPAWNS, BENCH_WORKERS.
 */

import process from "node:process";
import { detectRuntime } from "../adapters/platform.ts";
import type { WorkerRuntime } from "../mod.ts";
import { runSoak } from "../support/soak.ts";

const runtime = process.env.BENCH_WORKERS as WorkerRuntime | undefined;
const { report, problems } = await runSoak(runtime, Number(process.env.SOAK_SPAWNS ?? 100_000));
console.log(JSON.stringify({ host: detectRuntime(), ...report, problems }));
process.exit(problems.length === 0 ? 0 : 1);

/**
 * The long soak: 100,000 mixed spawns at 64 in flight through one pool (see support/soak.ts), under
 * whichever runtime runs it; prints a JSON report (fds, child processes, worker memory before and after).
 * `deno run -A bench/soak.ts`, `bun bench/soak.ts`, `node bench/soak.ts`; SOAK_SPAWNS, BENCH_WORKERS.
 */

import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { detectRuntime } from "../adapters/platform.ts";
import { Pool, type RuntimeName } from "../mod.ts";
import { soak } from "../support/soak.ts";

const runtime = process.env.BENCH_WORKERS as RuntimeName | undefined;
const pool = new Pool(runtime ? { runtime } : {});
const report = await soak(pool, Number(process.env.SOAK_SPAWNS ?? 100_000), 64, mkdtempSync(join(tmpdir(), "soak-")));
await pool.close();
console.log(JSON.stringify({ host: detectRuntime(), ...report }));
process.exit(report.wrong.length === 0 && report.fds.after === report.fds.before ? 0 : 1);

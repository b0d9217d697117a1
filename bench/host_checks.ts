/**
 * The cost, per spawn, of the checks a host makes before a request leaves it: the Deno and Bun shapes' preflight
 * (a PATH lookup cached per program, a `stat` of an absolute cwd) and, in Deno, the run permission
 * (adapters/_deno_permissions.ts). Microseconds per call, median of BENCH_ROUNDS rounds of 20,000 calls. Prints
 * one JSON line.
 *
 * Run under any runtime: `deno run -A bench/host_checks.ts`, `bun bench/host_checks.ts`, `node bench/host_checks.ts`
 * (Deno also with a scoped permission: `deno run --allow-read --allow-env --allow-run=echo bench/host_checks.ts`).
 */

import { tmpdir } from "node:os";
import { preflight } from "../adapters/_preflight.ts";
import { detectRuntime } from "../adapters/platform.ts";
import type { SpawnRequest } from "../core/frame.ts";
import { countOf, median } from "../support/fixture.mjs";

const ROUNDS = countOf("BENCH_ROUNDS", 5);
const CALLS = 20_000;
const request = (extra: Partial<SpawnRequest> = {}): SpawnRequest => ({
  cmd: "echo",
  args: ["hi"],
  stdin: "null",
  stdout: "piped",
  stderr: "piped",
  buffered: true,
  killSignal: "SIGTERM",
  forceKillAfterDelay: 5000,
  window: 65536,
  group: false,
  ...extra,
});

function perCall(check: (request: SpawnRequest) => unknown, input: SpawnRequest): number {
  const rounds: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const start = performance.now();
    for (let i = 0; i < CALLS; i++) {
      if (check(input) !== undefined) throw new Error(`the check refused ${input.cmd}`);
    }
    rounds.push(((performance.now() - start) * 1000) / CALLS);
  }
  return Number(median(rounds).toFixed(2));
}

const result: Record<string, number | string> = {
  runtime: detectRuntime(),
  preflightUs: perCall(preflight, request()),
  preflightWithCwdUs: perCall(preflight, request({ cwd: tmpdir() })),
};
if (detectRuntime() === "deno") {
  const { admitRun } = await import("../adapters/_deno_permissions.ts");
  result.denoRunPermissionUs = perCall(admitRun, request());
}
console.log(JSON.stringify(result));

/**
 * Where one command's latency goes at one in flight, on the host running it: the runtime's own spawn of `echo hi`, the
 * pool's (default pool: native workers), and the pool's round trip without an exec (a relative cwd that does not exist:
 * host → worker → a vfork child whose chdir fails → SpawnError → host). The pooled echo minus the round trip is what the
 * exec and the command's run cost through the worker; the runtime's own spawn is the bar. With a C compiler (`cc`), each
 * round also runs bench/reference/spawn_loop.c at one in flight (`posix_spawnp`, a pipe read to its end, `waitpid`):
 * the least a command takes on this machine from a caller that waits for it, in the same minute.
 *
 * Prints p50 and p90 in ms of each, over interleaved rounds (each round runs every case in turn, BENCH_SPAWNS each,
 * default 300; BENCH_ROUNDS, default 5), and the pool's p50 over the runtime's.
 *
 * `node bench/hop.ts`, `deno run -A bench/hop.ts`, `bun bench/hop.ts`.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { Pool } from "../mod.ts";
import { buildSpawnLoop, countOf, median } from "../support/fixture.mjs";
import { HOST, nativeOutput } from "./_spawners.ts";

const SPAWNS = countOf("BENCH_SPAWNS", 300);
const ROUNDS = countOf("BENCH_ROUNDS", 5);

/** The runtime's own spawn of `echo hi`, collected, as a user of the runtime writes it. */
async function native(): Promise<void> {
  const out = await nativeOutput("echo", ["hi"]);
  if (out.byteLength !== 3) throw new Error("echo failed");
}

const pool = new Pool({ size: 1 });

async function pooled(): Promise<void> {
  const out = await pool.command("echo", { args: ["hi"], stderr: "null" }).output();
  if (out.stdout.byteLength !== 3) throw new Error("echo failed");
}

async function roundTrip(): Promise<void> {
  try {
    // A relative cwd is the worker's to check: its vfork child's chdir fails, and nothing is executed.
    await pool.command("true", { cwd: "spawnpool-no-such-directory" }).output();
  } catch {
    return; // NotFound: the answer came back
  }
  throw new Error("a command ran in a directory that does not exist");
}

const cases: Array<[string, () => Promise<void>, number[]]> = [
  [`${HOST}'s own spawn`, native, []],
  ["pool (echo)", pooled, []],
  ["pool round trip: vfork, no exec", roundTrip, []],
];

/** bench/reference/spawn_loop.c, built into a scratch directory removed at exit; undefined without a C compiler. */
const floorDir = mkdtempSync(join(tmpdir(), "spawnpool-hop-"));
process.on("exit", () => rmSync(floorDir, { recursive: true, force: true }));
const floorExe = buildSpawnLoop(floorDir);
/** The C loop's p50 and p90 per round, in ms. */
const floor: Array<{ p50Ms: number; p90Ms: number }> = [];
/** One round of the C loop: SPAWNS echos, one in flight, each output read to its end. */
function floorRound(): void {
  if (floorExe === undefined) return;
  const out = execFileSync(floorExe, ["--collect", String(SPAWNS), "1", "echo", "hi"], { encoding: "utf8" });
  floor.push(JSON.parse(out));
}

await pool.ready();
for (const [, run] of cases) for (let i = 0; i < 20; i++) await run(); // warm up
for (let r = 0; r < ROUNDS; r++) {
  if (r % 2 === 0) floorRound(); // before the round's cases, or after them: neither is always next to the same case
  for (let c = 0; c < cases.length; c++) {
    const [, run, times] = cases[(r + c) % cases.length];
    for (let i = 0; i < SPAWNS; i++) {
      const t0 = performance.now();
      await run();
      times.push(performance.now() - t0);
    }
  }
  if (r % 2 === 1) floorRound();
}
await pool.close();

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * p)];
console.log(`${HOST} host, one in flight, ${ROUNDS} rounds of ${SPAWNS}, pool runtime ${pool.stats().runtime}`);
console.log("| case | p50 ms | p90 ms |");
console.log("| --- | ---: | ---: |");
for (const [name, , times] of cases) {
  console.log(`| ${name} | ${pct(times, 0.5).toFixed(3)} | ${pct(times, 0.9).toFixed(3)} |`);
}
const floorP50 = floor.length > 0 ? median(floor.map((f) => f.p50Ms)) : undefined;
if (floorP50 !== undefined) {
  const p90 = median(floor.map((f) => f.p90Ms));
  console.log(`| C: posix_spawnp, pipe, waitpid (median of rounds) | ${floorP50.toFixed(3)} | ${p90.toFixed(3)} |`);
}
const [own, echo, trip] = cases.map(([, , times]) => median(times));
console.log(
  `pool's speed over the runtime's own (p50): ${
    (own / echo).toFixed(2)
  }x; the exec through the worker (echo - round trip): ${(echo - trip).toFixed(3)} ms`,
);
if (floorP50 !== undefined) {
  console.log(
    `over the C loop's p50: ${HOST}'s own spawn +${(own - floorP50).toFixed(3)} ms, the pool +${
      (echo - floorP50).toFixed(3)
    } ms; the most a pool could be over the runtime's own here: ${(own / floorP50).toFixed(2)}x`,
  );
}
process.exitCode = 0;

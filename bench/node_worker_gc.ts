// Why a Node worker collects its garbage every few MB of output (NODE_WORKER_GC_BYTES in adapters/node.ts).
// Two pools of Node workers `cat` a 163 KB file, 300 times at 30 in flight per round, rounds alternating
// between them: the workers as shipped, and the same workers started without `--expose-gc` (so they never
// collect on their own account). Each round prints spawns/s, the workers' CPU per spawn and their RssAnon;
// the last lines give the medians over the rounds after the first two (a warm-up). Measures the npm build
// (`npm run build`). `npm run build && node bench/node_worker_gc.ts` (BENCH_ROUNDS: an integer, at least 3 so that
// a round is left past the warm-up; default 9, so 7 rounds, an odd count, give each median; for an even count the
// median is the upper of the middle two)
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import type { Pool as PoolType } from "../mod.ts";
import { CAT_BYTES, countOf, median, writeCatFixture } from "../support/fixture.mjs";
import { loadSpawnpool, processCpu } from "./_spawners.ts";
import { rssAnonBytes } from "../support/proc.ts";

const ROUNDS = countOf("BENCH_ROUNDS", 9, 3); // rounds 1 and 2 are a warm-up
const { Pool } = await loadSpawnpool();
const SPAWNS = 300;

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-gc-"));
const catFile = writeCatFixture(scratch);
// The worker executable without --expose-gc: a shell that drops the flag and runs this Node.
const noGc = join(scratch, "node-without-gc");
writeFileSync(
  noGc,
  `#!/bin/sh\nfor a; do shift; [ "$a" = --expose-gc ] || set -- "$@" "$a"; done\nexec "${process.execPath}" "$@"\n`,
);
chmodSync(noGc, 0o755);

/** CPU time of a worker in µs. */
const cpuUs = (pid: number) => processCpu(pid)!.self;
const rssAnonMB = (pid: number) => rssAnonBytes(pid) / 2 ** 20;

interface Round {
  perSec: number;
  cpu: number;
  rss: number;
}
interface Variant {
  name: string;
  pool: PoolType;
  rounds: Round[];
}
const variants: Variant[] = [
  { name: "as shipped", pool: new Pool({ runtime: "node" }), rounds: [] },
  { name: "without the collections", pool: new Pool({ runtime: "node", execPath: noGc }), rounds: [] },
];
await Promise.all(variants.map((v) => v.pool.ready()));

async function round(variant: Variant): Promise<void> {
  const pids = variant.pool.stats().workers.map((w) => w.pid);
  const before = pids.map(cpuUs);
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 30 }, async () => {
    while (next++ < SPAWNS) {
      const out = await variant.pool.command("cat", { args: [catFile], stderr: "null" }).output();
      if (out.stdout.byteLength !== CAT_BYTES) throw new Error(`cat gave ${out.stdout.byteLength} bytes`);
    }
  }));
  const perSec = SPAWNS / ((performance.now() - start) / 1000);
  const cpu = pids.reduce((sum, pid, i) => sum + cpuUs(pid) - before[i], 0) / SPAWNS;
  const rss = Math.max(...pids.map(rssAnonMB));
  variant.rounds.push({ perSec, cpu, rss });
  console.log(
    `${variant.name.padEnd(24)} ${Math.round(perSec)} cats/s, workers ${Math.round(cpu)} µs CPU per cat, ` +
      `largest worker RssAnon ${rss.toFixed(0)} MB`,
  );
}

for (let i = 0; i < ROUNDS; i++) {
  for (const variant of i % 2 === 0 ? variants : [...variants].reverse()) await round(variant);
}
for (const { name, rounds } of variants) {
  const late = rounds.slice(2);
  console.log(
    `median of rounds 3-${ROUNDS}, ${name}: ${Math.round(median(late.map((r) => r.perSec)))} cats/s, ` +
      `${Math.round(median(late.map((r) => r.cpu)))} µs worker CPU per cat, ` +
      `RssAnon ${median(late.map((r) => r.rss)).toFixed(0)} MB`,
  );
}
await Promise.all(variants.map((v) => v.pool.close()));
rmSync(scratch, { recursive: true, force: true });

// Worker start: how long a pool of one worker takes to be ready (`await new Pool({ runtime, size: 1 }).ready()`), per
// host runtime and worker runtime, each in a fresh process after spawnpool is imported; runs interleaved, medians in ms.
// A pool's first command waits for this when no worker is ready, and so does every worker a pool adds or replaces.
//
// Run: `node bench/worker_start.mjs` (it builds dist/). Options (env): BENCH_ROUNDS (default 15), BENCH_HOSTS (default
// "node,deno,bun"), BENCH_WORKERS (default "native,deno,bun,node"), BENCH_OTHER (another checkout, its dist/ built:
// its rows beside this one's, "(other)", for a before/after). Writes the table to stdout.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { countOf, median, scriptArgs } from "../support/fixture.mjs";
import { buildDist, root, runtimes } from "../support/setup.mjs";

const ROUNDS = countOf("BENCH_ROUNDS", 15);
const list = (name, fallback) => (process.env[name] ?? fallback).split(",").map((item) => item.trim());
const HOSTS = list("BENCH_HOSTS", "node,deno,bun");
const WORKERS = list("BENCH_WORKERS", "native,deno,bun,node");
const OTHER = process.env.BENCH_OTHER;
buildDist();

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-worker-start-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

const cases = [];
for (const host of HOSTS) {
  if (!(host in runtimes)) throw new Error(`BENCH_HOSTS: unknown host "${host}"`);
  for (const runtime of WORKERS) {
    for (const [label, from] of [["", root], [" (other)", OTHER]]) {
      if (from === undefined) continue;
      const file = join(scratch, `${host}-${runtime}${label ? "-other" : ""}.mjs`);
      writeFileSync(
        file,
        `const m = await import(${JSON.stringify(pathToFileURL(join(from, "dist", "mod.js")).href)});\n` +
          `const t0 = performance.now();\nconst pool = new m.Pool({ runtime: ${
            JSON.stringify(runtime)
          }, size: 1 });\n` +
          `await pool.ready();\nconst ms = performance.now() - t0;\nawait pool.close();\n` +
          `console.log(JSON.stringify({ ms }));\n`,
      );
      cases.push({ host, name: `${runtime} worker${label}`, file, ms: [] });
    }
  }
}
for (let round = 0; round <= ROUNDS; round++) {
  for (let i = 0; i < cases.length; i++) {
    const item = cases[(i + round) % cases.length]; // the order rotates each round; round 0 warms up, uncounted
    const run = spawnSync(runtimes[item.host], scriptArgs(item.host, item.file), { encoding: "utf8", cwd: scratch });
    if (run.status !== 0) throw new Error(`${item.host} ${item.name}: exit ${run.status}\n${run.stderr}`);
    if (round > 0) item.ms.push(JSON.parse(run.stdout.trim().split("\n").at(-1)).ms);
  }
}

console.log(`# Worker start (${new Date().toISOString().slice(0, 10)})\n`);
console.log(`\`node bench/worker_start.mjs\`: ${ROUNDS} interleaved runs of each, each in a fresh process; medians.\n`);
console.log("| host | pool of one | ready() ms |\n| ---- | ----------- | ---------- |");
for (const item of cases) console.log(`| ${item.host} | ${item.name} | ${median(item.ms).toFixed(1)} |`);

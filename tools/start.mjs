// `npm start`: the main job. Runs bench/spawn_bench.ts on every runtime (and a Node host with Bun
// workers), prints one table of native vs pooled spawns/s, and writes bench/results/latest.{json,md}.
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { bin, ensureInstalled, root } from "./setup.mjs";

ensureInstalled();
const script = "bench/spawn_bench.ts";
const runs = [
  { label: "deno", cmd: "deno", args: ["run", "-A", "--quiet", script] },
  { label: "bun", cmd: "bun", args: [script] },
  { label: "node", cmd: "node", args: [script] },
  { label: "node host, bun workers", cmd: "node", args: [script], env: { BENCH_WORKERS: "bun" } },
];
const results = [];
for (const run of runs) {
  process.stdout.write(`running ${run.label}... `);
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, ...run.env };
  const out = spawnSync(join(bin, run.cmd), run.args, { cwd: root, env, encoding: "utf8" });
  const line = out.stdout.trim().split("\n").pop() ?? "";
  if (out.status !== 0 || !line.startsWith("{")) {
    console.log("failed");
    process.stderr.write(out.stderr);
    process.exit(1);
  }
  const result = { label: run.label, ...JSON.parse(line) };
  results.push(result);
  console.log(`native ${result.nativePerSec}/s, pool ${result.poolPerSec}/s`);
}
const header = "| host (workers) | version | native spawns/s | pool spawns/s | pool / native |";
const rows = results.map((r) =>
  `| ${r.label} | ${r.version} | ${r.nativePerSec} | ${r.poolPerSec} | ${r.ratio.toFixed(2)}x |`
);
const machine = `${cpus().length} cores, ${cpus()[0]?.model ?? "unknown cpu"}, ${process.platform}`;
const table = [
  `\`echo hi\`, 30 in flight; median of ${results[0].rounds} interleaved rounds of ${
    results[0].spawnsPerRound
  } spawns; ${machine}`,
  "",
  header,
  "|---|---|---|---|---|",
  ...rows,
].join("\n");
console.log(`\n${table}\n`);
mkdirSync(join(root, "bench", "results"), { recursive: true });
writeFileSync(join(root, "bench", "results", "latest.json"), JSON.stringify({ machine, results }, null, 2));
writeFileSync(join(root, "bench", "results", "latest.md"), `${table}\n`);
console.log("Wrote bench/results/latest.json and bench/results/latest.md");

// `npm start`: the main job. Runs bench/compare.ts on every runtime; the Deno and Node runs also pool on Bun
// workers, and the Node run through the `./node` drop-in's execFile too, against the same native measurements;
// every run also pools on the native worker (native/, built by setup).
// Prints one table of native vs pooled spawning, and writes bench/results/latest.{json,md,svg}.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { writeChart } from "./chart.mjs";
import { targetLines } from "./targets.mjs";
import { buildSpawnLoop, median, scriptArgs, writeCatFixture } from "../support/fixture.mjs";
import { bin, buildDist, root } from "../support/setup.mjs";

buildDist(); // Bun and Node measure the npm build, as their users run it (bench/_spawners.ts)
const script = "bench/compare.ts";
// Node's native spawns are the slowest by far, so one Node run measures them once for three pooled paths: Node
// workers, Bun workers, and a Node program that changed its import line (`execFile` of `./node`, Node workers).
const nodePools = "node,bun,node:execFile,native";
// Bun workers spend less CPU per spawn than Deno's own (bench/results/2026-11-25-native-worker-summary.md), so the Deno run measures both.
const denoPools = "deno,bun,native";
const bunPools = "bun,native";
const runs = [
  {
    label: `deno (pools: ${denoPools})`,
    cmd: "deno",
    args: scriptArgs("deno", script),
    env: { BENCH_POOLS: denoPools },
  },
  { label: `bun (pools: ${bunPools})`, cmd: "bun", args: scriptArgs("bun", script), env: { BENCH_POOLS: bunPools } },
  {
    label: `node (pools: ${nodePools})`,
    cmd: "node",
    args: scriptArgs("node", script),
    env: { BENCH_POOLS: nodePools },
  },
];

/** A row group's name: the host, and how it pooled when that is not its own runtime's `output()`. */
function pathLabel(host, { workers, api }) {
  const others = workers === host ? "" : `${api === "execFile" ? ", " : " host, "}${workers} workers`;
  return api === "execFile" ? `${host}, ./node execFile${others}` : `${host}${others}`;
}

/** Runs one benchmark process, showing its progress dots, and resolves with its JSON result. */
function runOne(run) {
  return new Promise((resolve, reject) => {
    const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, ...run.env };
    const child = spawn(join(bin, run.cmd), run.args, { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.setEncoding("utf8").on("data", (s) => (stdout += s));
    child.stderr.setEncoding("utf8").on("data", (s) => {
      stderr += s;
      process.stdout.write(s.replace(/[^.]/g, ""));
    });
    child.on("error", reject);
    child.on("close", (code) => {
      const line = stdout.trim().split("\n").pop() ?? "";
      if (code !== 0 || !line.startsWith("{")) reject(new Error(`${run.label} failed (${code}):\n${stderr}`));
      else resolve(JSON.parse(line));
    });
  });
}

const started = performance.now();
const seconds = (since) => Math.round((performance.now() - since) / 1000);
const results = [];
for (const run of runs) {
  process.stdout.write(`${run.label} `);
  const runStarted = performance.now();
  try {
    results.push(await runOne(run));
  } catch (error) {
    console.log(`\n${error.message}`);
    process.exit(1);
  }
  console.log(` done (${seconds(runStarted)} s)`);
}

/**
 * The machine's spawn ceiling, when a C compiler is installed: bench/reference/spawn_loop.c runs the same two
 * commands with posix_spawnp from one thread, 30 in flight, their output to /dev/null (`output: "/dev/null"`) and
 * read through a pipe to its end (`output: "collected"`: the least a spawner that returns the output does). Medians
 * of 3 runs of 1,000, the two ways interleaved.
 */
function spawnCeiling() {
  const scratch = mkdtempSync(join(tmpdir(), "spawnpool-ceiling-"));
  try {
    const exe = buildSpawnLoop(scratch);
    if (exe === undefined) return undefined; // no C compiler: the table goes without this reference
    const catFile = writeCatFixture(scratch);
    const outputs = [["/dev/null", []], ["collected", ["--collect"]]];
    return [["echo", ["echo", "hi"]], ["cat 163 KB", ["cat", catFile]]].flatMap(([workload, command]) => {
      const runs = outputs.map(() => []);
      for (let round = 0; round < 3; round++) {
        outputs.forEach(([, flags], i) =>
          runs[i].push(JSON.parse(execFileSync(exe, [...flags, "1000", "30", ...command], { encoding: "utf8" })))
        );
      }
      return outputs.map(([output], i) => {
        const selfUs = median(runs[i].map((r) => r.selfUs));
        const commandsUs = median(runs[i].map((r) => r.commandsUs));
        return {
          workload,
          output,
          perSec: median(runs[i].map((r) => r.perSec)),
          selfUs,
          commandsUs,
          allCoresPerSec: Math.round(cpus().length * 1e6 / (selfUs + commandsUs)),
        };
      });
    });
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}
process.stdout.write("spawn ceiling (C) ");
const ceiling = spawnCeiling();
console.log(ceiling ? " done" : " skipped: no C compiler (cc)");

const pair = (n, p, digits = 0) => `${n.toFixed(digits)} / ${p.toFixed(digits)}`;
/** The idle process's lag p99 in the native and pooled windows; "n/a" where no timer of it fired in one. */
const idlePair = (n, p) => [n, p].map((ms) => ms === null ? "n/a" : ms.toFixed(1)).join(" / ");
const header = [
  "| host (workers) | workload | in flight | native/s | pool/s | pool / native | p50 ms native / pool | " +
  "p99 ms native / pool | host CPU µs/spawn native / pool | loop lag p99 ms native / pool | " +
  "idle process's lag p99 ms native / pool |",
  "|---|---|---|---|---|---|---|---|---|---|---|",
];
/** One group of rows per pooled path of each run. */
const labels = results.map((r) => r.paths.map((path) => pathLabel(r.host, path)));
const groups = results.flatMap((r, i) => r.paths.map((path, p) => ({ label: labels[i][p], cases: path.cases })));
const rows = groups.flatMap((r) =>
  r.cases.map((c) =>
    `| ${r.label} | ${c.workload} | ${c.inFlight} | ${c.native.perSec} | ${c.pool.perSec} | ${c.ratio.toFixed(2)}x | ` +
    `${pair(c.native.p50, c.pool.p50, 1)} | ${pair(c.native.p99, c.pool.p99, 1)} | ` +
    `${pair(c.native.cpuUsPerSpawn, c.pool.cpuUsPerSpawn)} | ${pair(c.native.lagP99, c.pool.lagP99, 1)} | ` +
    `${idlePair(c.native.idleLagP99, c.pool.idleLagP99)} |`
  )
);
// Where the CPU goes at 30 in flight (Linux): with every core busy, the pool can only win what native
// spawning leaves idle, less what its own workers spend.
const split = (cpu, workers) =>
  cpu
    ? `${cpu.hostUs}${workers ? ` / ${cpu.workersUs}` : ""} / ${cpu.commandsUs} | ${cpu.machineBusyPct}%`
    : "n/a | n/a";
const peakMB = (cpu) => cpu?.workerPeakRssKb == null ? "n/a" : (cpu.workerPeakRssKb / 1024).toFixed(1);
const cpuRows = groups.flatMap((r) =>
  r.cases.filter((c) => c.inFlight === 30).map((c) =>
    `| ${r.label} | ${c.workload} | ${split(c.native.cpu, false)} | ${split(c.pool.cpu, true)} | ${
      peakMB(c.pool.cpu)
    } |`
  )
);
const cpuTable = cpuRows.length === 0 ? [] : [
  "",
  "CPU per spawn at 30 in flight, µs (user+sys; commands = the spawned processes, counted when reaped), and the " +
  "largest peak resident memory of a worker by then (VmHWM):",
  "",
  "| host (workers) | workload | native: host / commands | machine busy | pool: host / workers / commands | machine busy " +
  "| worker peak RSS, MB |",
  "|---|---|---|---|---|---|---|",
  ...cpuRows,
];
const ceilingTable = ceiling === undefined ? [] : [
  "",
  "The machine's spawn ceiling: `bench/reference/spawn_loop.c`, posix_spawnp from one thread, 30 in flight, output to " +
  '/dev/null, and ("read through a pipe") each command\'s output read to its end as a pool must (medians of 3 runs of ' +
  "1,000):",
  "",
  "| workload | spawns/s, one thread | CPU µs/spawn: spawner / command | spawns/s if every core were busy |",
  "|---|---|---|---|",
  ...ceiling.map((c) =>
    `| ${c.workload}${
      c.output === "collected" ? ", read through a pipe" : ""
    } | ${c.perSec} | ${c.selfUs} / ${c.commandsUs} | ${c.allCoresPerSec} |`
  ),
];
const hosts = [
  "| host | version | rows | host RSS at the end, MB |",
  "|---|---|---|---|",
  ...results.map((r, i) => `| ${r.host} | ${r.version} | ${labels[i].join("; ")} | ${r.hostRssMB} |`),
];
const machine = `${cpus().length} cores, ${cpus()[0]?.model ?? "unknown cpu"}, ${process.platform}`;
const versions = [...new Set(results.map((r) => `${r.host} ${r.version}`))].join(", ");
const table = [
  `Medians of ${results[0].rounds} interleaved rounds (${results[0].spawns} spawns per measurement at 30 in flight, ` +
  `a third of that at 1 and in each warm-up); ${machine}; ${versions}. Pool = same-runtime workers unless stated; ` +
  "each host's rows share its native measurements. The idle process's lag is that of a process that only runs a 1 ms " +
  "timer, in the same minutes (during the native and during the pooled measurements): what the machine adds.",
  "",
  ...header,
  ...rows,
  ...cpuTable,
  ...ceilingTable,
  "",
  "The native worker's targets, in this run (bench/targets.mjs):",
  "",
  ...targetLines(results, groups, ceiling),
  "",
  ...hosts,
].join("\n");
console.log(`\n${table}\n`);
mkdirSync(join(root, "bench", "results"), { recursive: true });
writeFileSync(join(root, "bench", "results", "latest.json"), JSON.stringify({ machine, results, ceiling }, null, 2));
writeFileSync(join(root, "bench", "results", "latest.md"), `${table}\n`);
writeChart(
  join(root, "bench", "results", "latest.svg"),
  groups,
  ceiling,
  `npm start, ${new Date().toISOString().slice(0, 10)}: ${machine}; ${versions}`,
);
console.log(
  `Wrote bench/results/latest.json, latest.md and latest.svg (${seconds(started)} s)`,
);

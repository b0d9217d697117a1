// Where the machine's CPU goes while a host spawns `echo hi` or a 163 KB `cat` at 30 in flight, natively and
// through the pool: a system-wide `perf record` (every process, user and kernel) during bench/_profile_load.ts,
// split by role (the host process, its workers, the commands, the commands before their exec, everything else)
// into kernel and user time, with each role's busiest symbols. Each runtime hosts native spawning and a pool of
// its own workers; Deno and Node hosts also a pool of Bun workers, as in `npm start`. Cases are interleaved: each
// round runs every case once, starting with the next case in turn; shares are medians over rounds.
//
// `node bench/profile.mjs` (it builds dist/ first). Needs Linux, `perf`, and root or perf_event_paranoid <= -1.
// Env: PROFILE_RUNTIMES (default deno,bun,node), PROFILE_WORKLOADS (echo,cat), PROFILE_ROUNDS (3),
// PROFILE_SECONDS (4, recorded per case and round). Writes bench/results/profile.md and prints it.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { countOf, median, scriptArgs, untilReady } from "../support/fixture.mjs";
import { bin, buildDist, root } from "../support/setup.mjs";

const listOf = (name, fallback, allowed) =>
  (process.env[name] ?? fallback).split(",").map((item) => {
    if (!allowed.includes(item)) throw new Error(`${name}: "${item}" is not one of ${allowed.join(", ")}`);
    return item;
  });
const RUNTIMES = listOf("PROFILE_RUNTIMES", "deno,bun,node", ["deno", "bun", "node"]);
const WORKLOADS = listOf("PROFILE_WORKLOADS", "echo,cat", ["echo", "cat"]);
const ROUNDS = countOf("PROFILE_ROUNDS", 3);
const SECONDS = countOf("PROFILE_SECONDS", 4);
/** Samples per second per CPU. */
const FREQUENCY = 999;
const CORES = cpus().length;
/** The roles a sample is counted under, in table order. */
const ROLES = ["host", "workers", "commands", "commands before exec", "other", "idle"];

try {
  execFileSync("perf", ["--version"], { stdio: "ignore" });
} catch {
  console.error("bench/profile.mjs needs `perf` (linux-tools / linux-perf) on the PATH.");
  process.exit(2);
}
buildDist(); // Bun and Node hosts load dist/, as their users do (bench/_spawners.ts)

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-profile-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

/** Runs one case once: the load under `runtime`, recorded for SECONDS once it is warm. Returns its samples. */
async function recordCase({ runtime, mode, workers, workload }, n) {
  const data = join(scratch, `perf-${n}.data`);
  const script = "bench/_profile_load.ts";
  const env = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH}`,
    PROFILE_MODE: mode,
    PROFILE_WORKERS: workers ?? runtime,
    PROFILE_WORKLOAD: workload,
    PROFILE_SECONDS: String(SECONDS + 2),
  };
  const load = spawn(join(bin, runtime), scriptArgs(runtime, script), {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  // The load prints "ready" once warm.
  const { exited, stdout } = await untilReady(load, `the ${runtime} load`);
  // perf's messages (no permission, no such event) are in the error it throws.
  execFileSync("perf", ["record", "-a", "-F", String(FREQUENCY), "-o", data, "--", "sleep", String(SECONDS)], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  await exited;
  const result = JSON.parse(stdout().trim().split("\n").pop());
  const text = execFileSync("perf", ["script", "-i", data, "-F", "comm,pid,tid,ip,sym,dso"], {
    encoding: "utf8",
    maxBuffer: 1 << 30,
    stdio: ["ignore", "pipe", "ignore"],
  });
  rmSync(data, { force: true });
  return {
    host: result.host,
    workers: new Set(result.workers),
    spawnsPerSecond: result.spawns / result.seconds,
    samples: parseSamples(text),
  };
}

/**
 * `perf script -F comm,pid,tid,ip,sym,dso` lines, e.g. `Bun Pool 0 28228/28230 5569fc46cfc4 [unknown] (/path/bun)`:
 * a thread's name may hold spaces and numbers, the `pid/tid` after it may not.
 */
function parseSamples(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    const match = /^\s*(.*?)\s+(\d+)\/\d+\s+([0-9a-f]+)\s+(.*?)\s+\((.*)\)$/.exec(line);
    if (match === null) continue;
    const [, comm, pid, ip, sym, dso] = match;
    samples.push({ comm, pid: Number(pid), kernel: ip.length === 16 && ip.startsWith("ffff"), sym, dso });
  }
  return samples;
}

/**
 * What a sample is counted as: its role, and the symbol (or, for code without symbols, the file) it was in.
 * `spawners` holds the thread names of the host and its workers: a child keeps its parent thread's name until
 * it execs the command.
 */
function classify(sample, run, spawners, workload) {
  let role;
  if (sample.pid === 0) role = "idle";
  else if (sample.pid === run.host) role = "host";
  else if (run.workers.has(sample.pid)) role = "workers";
  else if (sample.comm === workload) role = "commands";
  else if (spawners.has(sample.comm)) role = "commands before exec";
  else role = "other";
  let where = sample.sym;
  if (where === "[unknown]") {
    where = sample.dso.startsWith("/tmp/perf-") ? "JIT-compiled code" : `${sample.dso.split("/").pop()} (no symbols)`;
  }
  if (where.length > 60) where = `${where.slice(0, 57)}...`; // C++ template names run to hundreds
  return { role, where: `${sample.kernel ? "[k]" : "[u]"} ${where}` };
}

/** Per role: share of the machine's CPU capacity, kernel part, and symbol counts. */
function summarize(run, workload) {
  const total = SECONDS * FREQUENCY * CORES;
  const roles = Object.fromEntries(ROLES.map((role) => [role, { all: 0, kernel: 0, where: new Map() }]));
  /** Commands' samples in the dynamic loader, which starts every dynamically linked program. */
  let loader = 0;
  const spawners = new Set(
    run.samples.filter((sample) => sample.pid === run.host || run.workers.has(sample.pid)).map((sample) => sample.comm),
  );
  for (const sample of run.samples) {
    const { role, where } = classify(sample, run, spawners, workload);
    const entry = roles[role];
    entry.all++;
    if (sample.kernel) entry.kernel++;
    entry.where.set(where, (entry.where.get(where) ?? 0) + 1);
    if (role === "commands" && sample.dso.includes("/ld-linux")) loader++;
  }
  // Samples the record missed (idle CPUs are sampled as pid 0) count as idle.
  roles.idle.all += Math.max(0, total - run.samples.length);
  return { total, roles, loader, spawnsPerSecond: run.spawnsPerSecond };
}

/** A case's mode as the tables show it. */
const modeName = ({ runtime, mode, workers }) =>
  mode === "pool" && workers !== undefined && workers !== runtime ? `pool, ${workers} workers` : mode;
const caseName = (entry) => `${entry.runtime} ${modeName(entry)} ${entry.workload}`;

const cases = [];
for (const runtime of RUNTIMES) {
  for (const workload of WORKLOADS) {
    cases.push({ runtime, workload, mode: "native", runs: [] }, { runtime, workload, mode: "pool", runs: [] });
    if (runtime !== "bun" && RUNTIMES.includes("bun")) {
      cases.push({ runtime, workload, mode: "pool", workers: "bun", runs: [] });
    }
  }
}
let n = 0;
for (let round = 0; round < ROUNDS; round++) {
  for (let i = 0; i < cases.length; i++) {
    const entry = cases[(i + round) % cases.length];
    process.stderr.write(`round ${round + 1}/${ROUNDS}: ${caseName(entry)}\n`);
    entry.runs.push(summarize(await recordCase(entry, n++), entry.workload));
  }
}

const pct = (part, whole) => (part / whole * 100).toFixed(1);
/** µs of CPU per spawn that `share` (a fraction of the machine) stands for at `rate` spawns/s. */
const perSpawn = (share, rate) => share * CORES * 1e6 / rate;

const versions = Object.fromEntries(
  RUNTIMES.map((name) => {
    const version = execFileSync(join(bin, name), ["--version"], { encoding: "utf8" }).split("\n")[0];
    return [name, version.startsWith(name) ? version : `${name} ${version}`];
  }),
);
const COUNTED = ROLES.filter((role) => role !== "idle");
const lines = [
  `# bench/profile.mjs: where the CPU goes, ${new Date().toISOString().slice(0, 10)}`,
  "",
  `${CORES} cores, ${cpus()[0].model.trim()}; ${Object.values(versions).join("; ")}. ` +
  `\`perf record -a -F ${FREQUENCY}\` for ${SECONDS} s per case and round, ${ROUNDS} rounds interleaved, ` +
  "30 in flight, after a warm-up of 300 spawns; medians over rounds. CPU µs per spawn, all (kernel): in each " +
  "round, a role's share of the machine × cores ÷ spawns/s. Commands before exec: children of the host or a worker not yet the " +
  "command (fork or vfork, up to execve). Commands in ld.so: the part of the commands' user CPU spent in the " +
  "dynamic loader, before `main`.",
  "",
  `| host | workload | mode | spawns/s | machine busy | ${COUNTED.join(" | ")} | commands in ld.so |`,
  "|" + " --- |".repeat(6 + COUNTED.length),
];
for (const entry of cases) {
  const { runtime, workload, runs } = entry;
  const rate = median(runs.map((run) => run.spawnsPerSecond));
  const busy = median(runs.map((run) => 1 - run.roles.idle.all / run.total));
  /** The median over rounds of each round's µs per spawn for `count(run)` samples. */
  const perSpawnOf = (count) => median(runs.map((run) => perSpawn(count(run) / run.total, run.spawnsPerSecond)));
  const cells = COUNTED.map((role) => {
    const all = perSpawnOf((run) => run.roles[role].all);
    const kernel = perSpawnOf((run) => run.roles[role].kernel);
    return all === 0 ? "" : `${Math.round(all)} (${Math.round(kernel)})`;
  });
  const loader = Math.round(perSpawnOf((run) => run.loader));
  lines.push(
    `| ${runtime} | ${workload} | ${modeName(entry)} | ${Math.round(rate)} | ${pct(busy, 1)}% | ${
      cells.join(" | ")
    } | ${loader} |`,
  );
}
lines.push("", "Busiest symbols per role (all rounds together; % of the machine; [k] kernel, [u] user):", "");
for (const entry of cases) {
  const { runs } = entry;
  lines.push(`### ${caseName(entry)}`, "");
  const total = runs.reduce((sum, run) => sum + run.total, 0);
  for (const role of ROLES.slice(0, 4)) {
    const where = new Map();
    for (const run of runs) {
      for (const [name, count] of run.roles[role].where) where.set(name, (where.get(name) ?? 0) + count);
    }
    const top = [...where].sort((a, b) => b[1] - a[1]).slice(0, 8);
    if (top.length > 0) {
      lines.push(`- ${role}: ${top.map(([name, count]) => `${name} ${pct(count, total)}`).join(", ")}`);
    }
  }
  lines.push("");
}
const markdown = lines.join("\n");
writeFileSync(join(root, "bench/results/profile.md"), markdown);
console.log(markdown);

// The write-up's HTTP experiment: servers that run a process per request, for `echo hi` and a 163 KB `cat`, each
// driven by wrk, oha or bombardier (whichever is installed; the table names it) at 30 connections after a warm-up.
// The rows, all measured in the same run (SERVERS below):
// - the references a user would pick instead: Rust with tokio + hyper (bench/reference/rust_server/, built with
//   `cargo build --release --locked` into .cache/ when `cargo` is on PATH) and Go with os/exec
//   (bench/reference/go_server.go, when `go` is);
// - each runtime's own server spawning natively (bench/http_server.ts), and Node's two remedies: `node:cluster`
//   (one server process per core, each spawning) and `worker_threads` (one server thread, a spawning thread per
//   core);
// - each runtime's server spawning through the pool: on native workers (the pool's default), on workers of its own
//   runtime, and for Node on Bun workers.
// For every load it also reads, from /proc, the CPU time of the server's process tree, the commands, the load
// generator and everything else on the machine, per request: where the time goes.
// Prints the tables, the targets (the best pooled row against Rust; every pooled Node row against Node's cluster)
// and writes bench/results/http.{json,md}. `node bench/http.mjs`; BENCH_HTTP_SECONDS (default 8) per load,
// BENCH_HTTP_ROUNDS (default 1) rounds over all rows, the median of them reported; BENCH_HTTP_ONLY=<text> keeps
// the rows whose label contains it (and the rows the targets compare with).
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { bin, buildDist, root } from "../support/setup.mjs";
import { countOf, median, scriptArgs, writeCatFixture } from "../support/fixture.mjs";

const SECONDS = countOf("BENCH_HTTP_SECONDS", 8);
const ROUNDS = countOf("BENCH_HTTP_ROUNDS", 1);
const CONNECTIONS = 30;
const CORES = availableParallelism();
const WORKLOADS = [{ path: "/echo", name: "echo" }, { path: "/cat", name: "cat 163 KB" }];

function which(name) {
  try {
    return execFileSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The load generators, by preference: how to run one for `seconds` against `url`, and how to read req/s from it. */
const GENERATORS = [
  {
    name: "wrk",
    args: (url, seconds) => ["-t2", `-c${CONNECTIONS}`, `-d${seconds}s`, url],
    rate: (out) => Number(/Requests\/sec:\s*([\d.]+)/.exec(out)?.[1]),
    // Failed responses and socket errors (connect, read, write, timeout) alike.
    errors: (out) =>
      Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0) +
      (/Socket errors: (.*)/.exec(out)?.[1].match(/\d+/g) ?? []).reduce((n, count) => n + Number(count), 0),
    version: (path) => /wrk ([^ ]+)/.exec(spawnSync(path, ["-v"], { encoding: "utf8" }).stdout)?.[1],
  },
  {
    name: "oha",
    args: (url, seconds) => ["--no-tui", "-c", `${CONNECTIONS}`, "-z", `${seconds}s`, "--json", url],
    rate: (out) => JSON.parse(out).summary.requestsPerSec,
    errors: (out) => {
      const summary = JSON.parse(out);
      const failed = Object.entries(summary.statusCodeDistribution ?? {}).filter(([code]) => code !== "200");
      return [...failed, ...Object.entries(summary.errorDistribution ?? {})].reduce((n, [, count]) => n + count, 0);
    },
    version: (path) => execFileSync(path, ["--version"], { encoding: "utf8" }).trim().split(" ")[1],
  },
  {
    name: "bombardier",
    args: (url, seconds) => ["-c", `${CONNECTIONS}`, "-d", `${seconds}s`, "-p", "r", "-o", "json", url],
    rate: (out) => JSON.parse(out).result.rps.mean,
    errors: (out) => {
      const r = JSON.parse(out).result;
      return r.req1xx + r.req3xx + r.req4xx + r.req5xx + r.others;
    },
    version: (path) => /v[\d.]+/.exec(execFileSync(path, ["--version"], { encoding: "utf8" }))?.[0],
  },
];

/** The first installed load generator, with its `path` and version looked up once here (not for each load). */
function loadGenerator() {
  for (const candidate of GENERATORS) {
    const path = which(candidate.name);
    if (path === undefined) continue;
    let version;
    try {
      version = candidate.version(path);
    } catch {
      version = undefined; // only for the table's heading
    }
    return { ...candidate, path, label: version ? `${candidate.name} ${version}` : candidate.name };
  }
  return undefined;
}

const generator = loadGenerator();
if (generator === undefined) {
  console.error(
    "No HTTP load generator is installed: this experiment needs wrk, oha or bombardier on PATH\n" +
      "(e.g. `apt-get install wrk`, `cargo install oha`, `go install github.com/codesenberg/bombardier@latest`).",
  );
  process.exit(2);
}
console.log(`Load generator: ${generator.label} (${generator.path})`);
buildDist(); // Bun and Node servers run the npm build, as their users do (bench/_spawners.ts); it builds native/ too

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-http-"));
const catFile = writeCatFixture(scratch);

/** The Rust reference, built into .cache/ (kept between runs: cargo rebuilds only what changed); undefined without cargo. */
function rustReference() {
  const cargo = which("cargo");
  if (cargo === undefined) {
    console.log("(cargo is not on PATH, so the Rust reference is left out)");
    return undefined;
  }
  const manifest = join(root, "bench", "reference", "rust_server", "Cargo.toml");
  const target = join(root, ".cache", "rust_server");
  console.log("Building the Rust reference: cargo build --release --locked (the first time, fetches its crates)");
  try {
    execFileSync(cargo, ["build", "--release", "--locked", "--manifest-path", manifest, "--target-dir", target], {
      stdio: ["ignore", "ignore", "pipe"],
    });
  } catch (error) {
    console.log(`(the Rust reference did not build, so it is left out: ${String(error.stderr ?? error).trim()})`);
    return undefined;
  }
  const pins = readFileSync(manifest, "utf8");
  const pin = (crate) => new RegExp(`^${crate} = .*"=([^"]+)"`, "m").exec(pins)?.[1];
  const rustc = execFileSync("rustc", ["--version"], { encoding: "utf8" }).split(" ")[1];
  return {
    label: `Rust ${rustc}, tokio ${pin("tokio")} + hyper ${pin("hyper")}`,
    spawning: "tokio::process",
    kind: "reference",
    exe: join(target, "release", "rust_server"),
    args: [],
  };
}

/** The Go reference, built into the scratch directory; undefined without a Go toolchain. */
function goReference() {
  const go = which("go");
  if (go === undefined) {
    console.log("(go is not on PATH, so the Go reference is left out)");
    return undefined;
  }
  const exe = join(scratch, "go_server");
  try {
    execFileSync(go, ["build", "-o", exe, join(root, "bench", "reference", "go_server.go")], {
      stdio: ["ignore", "ignore", "pipe"],
    });
  } catch (error) {
    console.log(`(the Go reference did not build, so it is left out: ${String(error.stderr ?? error).trim()})`);
    return undefined;
  }
  const version = execFileSync(go, ["version"], { encoding: "utf8" }).trim().split(" ")[2];
  return { label: `Go ${version.replace(/^go/, "")} net/http`, spawning: "os/exec", kind: "reference", exe, args: [] };
}

const SERVER = "bench/http_server.ts";
const OWN_SPAWN = { deno: "Deno.Command", bun: "Bun.spawn", node: "child_process" };

/**
 * A row run by bench/http_server.ts on `host` in `mode`. `kind` is "native" (the runtime's own spawn), "spread"
 * (Node's cluster or worker_threads) or "pool"; `workers` is the pool's worker runtime, undefined for its default.
 * `expect` is how the server must describe its spawning once it listens (a pool that fell back from native workers
 * would otherwise be measured under the wrong name).
 */
function jsServer(host, kind, mode, spawning, expect, workers) {
  return {
    label: kind === "spread" ? `${host} ${mode === "cluster" ? "cluster" : "worker_threads"}` : host,
    host,
    spawning,
    kind,
    mode,
    expect,
    cmd: host,
    args: [...scriptArgs(host, SERVER), mode],
    env: workers === undefined ? {} : { BENCH_WORKERS: workers },
  };
}

const poolSize = Math.min(4, Math.max(2, CORES)); // the pool's default size (core/pool.ts)
const pooled = (host, workers) =>
  jsServer(
    host,
    "pool",
    "pool",
    workers === undefined ? "pool, native workers (default)" : `pool, ${workers} workers`,
    `pool of ${poolSize} ${workers ?? "native"}`,
    workers,
  );

const SERVERS = [
  rustReference(),
  goReference(),
  ...["deno", "bun", "node"].flatMap((host) => [
    jsServer(host, "native", "native", OWN_SPAWN[host], "own spawn"),
    pooled(host),
    pooled(host, host),
  ]),
  jsServer("node", "spread", "cluster", `child_process in ${CORES} processes`, `cluster of ${CORES}`),
  jsServer("node", "spread", "threads", `child_process in ${CORES} worker_threads`, `${CORES} worker_threads`),
  pooled("node", "bun"),
].filter((server) => server !== undefined).map((server) => ({
  ...server,
  name: server.kind === "reference" ? server.label : `${server.label}: ${server.spawning}`,
}));

/** The rows the targets compare with, which BENCH_HTTP_ONLY keeps. */
const isTargetBase = (s) => (s.kind === "reference" && s.label.startsWith("Rust")) || s.mode === "cluster";
const only = process.env.BENCH_HTTP_ONLY;
const servers = only === undefined ? SERVERS : SERVERS.filter((s) => s.name.includes(only) || isTargetBase(s));

function startServer(server) {
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, BENCH_CAT_FILE: catFile, ...server.env };
  const child = spawn(server.exe ?? join(bin, server.cmd), server.args, {
    cwd: root,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  // The next server starts only once this one (and its pool) is gone.
  const exited = new Promise((done) => child.once("exit", done));
  return new Promise((resolve, reject) => {
    let seen = "";
    child.stdout.setEncoding("utf8").on("data", (s) => {
      seen += s;
      const match = /listening (\d+) ?(.*)\n/.exec(seen);
      if (!match) return;
      const stop = () => (child.kill("SIGTERM"), exited);
      if (server.expect !== undefined && match[2] !== server.expect) {
        stop().then(() => reject(new Error(`${server.name}: the server spawns with "${match[2]}"`)));
      } else {
        resolve({ pid: child.pid, port: Number(match[1]), stop });
      }
    });
    child.on("error", (error) => reject(new Error(`${server.name} server did not start: ${error.message}`)));
    child.on("exit", (code) => reject(new Error(`${server.name} server exited (${code})`)));
  });
}

function load(url, seconds) {
  const out = execFileSync(generator.path, generator.args(url, seconds), { encoding: "utf8" });
  return { rate: generator.rate(out), errors: generator.errors(out) };
}

/** USER_HZ ticks in µs (100 on Linux). */
const TICK_US = 1e4;

/** The CPU time, in µs, of every process in /proc: its own, and that of its reaped children; and its parent. */
function processTable() {
  const table = new Map();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
      table.set(Number(name), { ppid: f[1], self: (f[11] + f[12]) * TICK_US, children: (f[13] + f[14]) * TICK_US });
    } catch {
      // The process exited while the table was read.
    }
  }
  return table;
}

/**
 * The machine's CPU time in µs, all cores (/proc/stat): `busy` (user, nice, system, irq, softirq) and `stolen` (by
 * the hypervisor for other machines: a sign of a loaded host).
 */
function machineCpu() {
  const [, ...f] = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).map(Number);
  return { busy: (f[0] + f[1] + f[2] + f[5] + f[6]) * TICK_US, stolen: f[7] * TICK_US };
}

/** One sample of where CPU time went: the server's process tree (`pid` and its descendants), us, the machine. */
function cpuSample(pid) {
  const table = processTable();
  const tree = new Map([[pid, table.get(pid)]]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [child, entry] of table) {
      if (!tree.has(child) && tree.has(entry.ppid)) tree.set(child, entry), grew = true;
    }
  }
  return { tree, own: table.get(process.pid), machine: machineCpu() };
}

/**
 * CPU µs per request between two samples: the server's main process (`host`); its other processes alive at both
 * (pool workers, cluster workers: `children`); the commands (reaped by any of those); the load generator (reaped by
 * this script); the rest of the machine (`others`: other jobs, this script, the kernel's softirq work); the sum of
 * the first four (`experiment`) and the req/s it allows on all cores (`ceiling`).
 */
function cpuPerRequest(before, after, pid, requests) {
  const delta = (key, id) => (after.tree.get(id)?.[key] ?? 0) - (before.tree.get(id)?.[key] ?? 0);
  const alive = [...after.tree.keys()].filter((id) => before.tree.has(id));
  const host = delta("self", pid);
  const children = alive.filter((id) => id !== pid).reduce((sum, id) => sum + delta("self", id), 0);
  const commands = alive.reduce((sum, id) => sum + delta("children", id), 0);
  const loader = after.own.children - before.own.children;
  const busy = after.machine.busy - before.machine.busy;
  const others = busy - host - children - commands - loader;
  const per = (us) => Math.round(us / requests);
  const experiment = per(host + children + commands + loader);
  return {
    host: per(host),
    children: per(children),
    commands: per(commands),
    generator: per(loader),
    others: per(others),
    busy: per(busy),
    stolen: per(after.machine.stolen - before.machine.stolen),
    experiment,
    // The req/s this CPU per request allows on idle cores: a comparison a loaded machine disturbs less.
    ceiling: Math.round(CORES * 1e6 / experiment),
  };
}

/** Loads one server on one path for SECONDS after a 2 s warm-up; returns req/s and the CPU per request. */
async function measure(server, workload) {
  process.stdout.write(`${server.name}, ${workload.name}... `);
  const running = await startServer(server);
  try {
    const url = `http://127.0.0.1:${running.port}${workload.path}`;
    load(url, 2); // warm-up
    const before = cpuSample(running.pid);
    const start = performance.now();
    const { rate, errors } = load(url, SECONDS);
    const after = cpuSample(running.pid);
    if (errors > 0) throw new Error(`${errors} failed responses`);
    const requests = rate * (performance.now() - start) / 1000;
    console.log(`${Math.round(rate)} req/s`);
    return { rate: Math.round(rate), cpu: cpuPerRequest(before, after, running.pid, requests) };
  } finally {
    await running.stop();
  }
}

const load1 = loadavg()[0];
const rounds = [];
try {
  for (let round = 0; round < ROUNDS; round++) {
    if (ROUNDS > 1) console.log(`Round ${round + 1} of ${ROUNDS}`);
    const results = {};
    for (const server of servers) {
      for (const workload of WORKLOADS) results[`${server.name}|${workload.name}`] = await measure(server, workload);
    }
    rounds.push(results);
  }
} finally {
  rmSync(scratch, { recursive: true, force: true }); // the fixture and the Go server's binary
}

/** Per row and workload: the median req/s over the rounds, and the CPU split of the round that gave it. */
const results = servers.map((server) => {
  const row = { name: server.name, kind: server.kind, mode: server.mode, host: server.host, spawning: server.spawning };
  for (const workload of WORKLOADS) {
    const runs = rounds.map((round) => round[`${server.name}|${workload.name}`]);
    const mid = median(runs.map((run) => run.rate));
    row[workload.name] = { rate: mid, rounds: runs.map((run) => run.rate), cpu: runs.find((r) => r.rate === mid).cpu };
  }
  return row;
});

const ratio = (a, b) => `${(a / b).toFixed(2)}x`;
const native = (row) => results.find((r) => r.kind === "native" && r.host === row.host);

/** The targets: the best pooled row against Rust; every pooled Node row against Node's cluster; per workload. */
function targets() {
  const lines = [];
  for (const workload of WORKLOADS.map((w) => w.name)) {
    const rate = (row) => row[workload].rate;
    const rust = results.find((r) => r.kind === "reference" && r.name.startsWith("Rust"));
    const pools = results.filter((r) => r.kind === "pool");
    const best = pools.reduce((a, b) => (rate(b) > rate(a) ? b : a), pools[0]);
    const cluster = results.find((r) => r.mode === "cluster");
    const pairs = [
      ...(best && rust ? [["best pooled >= Rust", best, rust]] : []),
      ...(cluster ? pools.filter((r) => r.host === "node").map((r) => ["pooled Node > Node cluster", r, cluster]) : []),
    ];
    for (const [target, row, base] of pairs) {
      const met = target.includes(">=") ? rate(row) >= rate(base) : rate(row) > rate(base);
      const short = Math.round((1 - rate(row) / rate(base)) * 100);
      const verdict = met ? "met" : `missed by ${rate(base) - rate(row)} req/s (${short}%)`;
      const ceilings = ratio(row[workload].cpu.ceiling, base[workload].cpu.ceiling);
      lines.push(
        `| ${workload} | ${target} | ${row.name} | ${rate(row)} | ${base.name} | ${rate(base)} | ${
          ratio(rate(row), rate(base))
        } | ${verdict} | ${ceilings} |`,
      );
    }
  }
  return lines;
}

const machine = `${CORES} cores, ${cpus()[0]?.model ?? "unknown cpu"}, ${process.platform}`;
const loads = `load average ${load1.toFixed(2)} at the start, ${loadavg()[0].toFixed(2)} at the end`;
const roundsText = ROUNDS > 1 ? `, median of ${ROUNDS} rounds` : "";
const cell = (row, workload) => {
  const { rate } = row[workload];
  const base = row.kind === "pool" || row.kind === "spread" ? native(row) : undefined;
  return base === undefined ? `${rate}` : `${rate} (${ratio(rate, base[workload].rate)})`;
};
const cpuRow = (row, workload) => {
  const c = row[workload].cpu;
  return `| ${row.name} | ${workload} | ${
    row[workload].rate
  } | ${c.host} | ${c.children} | ${c.commands} | ${c.generator} | ${c.others} | ${c.busy} | ${c.stolen} | ${c.experiment} | ${c.ceiling} |`;
};
const table = [
  `HTTP server spawning per request; ${generator.label}, ${CONNECTIONS} connections, ${SECONDS} s after a 2 s warm-up${roundsText}; ${machine}; ${loads}`,
  "",
  "req/s; in brackets, against the same runtime's server spawning natively",
  "",
  "| server: spawns with | echo | cat 163 KB |",
  "|---|---|---|",
  ...results.map((r) => `| ${r.name} | ${cell(r, "echo")} | ${cell(r, "cat 163 KB")} |`),
  "",
  "Targets",
  "",
  "| workload | target | row | req/s | against | req/s | ratio | verdict | ratio of CPU ceilings |",
  "|---|---|---|---|---|---|---|---|---|",
  ...targets(),
  "",
  `Where the time goes: CPU µs per request over the measured ${SECONDS} s (/proc; ${CORES} cores give ${
    Math.round(CORES * 1e6 / 1000)
  } µs per request at 1,000 req/s). host: the server's main process; children: its other processes (pool or cluster ` +
  "workers); commands: echo/cat, reaped by either; generator: the load generator; others: the rest of the machine " +
  "(other jobs, this script, the kernel's network work); busy: all of these; stolen: time the hypervisor gave " +
  "to other machines; experiment: host + children + commands + generator; ceiling: the req/s that allows on " +
  `${CORES} idle cores (${CORES}e6 / experiment), which other load on the machine disturbs less than req/s; the ` +
  "targets' last column compares these.",
  "",
  "| server: spawns with | workload | req/s | host | children | commands | generator | others | busy | stolen | experiment | ceiling |",
  "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ...WORKLOADS.flatMap((w) => results.map((r) => cpuRow(r, w.name))),
].join("\n");
console.log(`\n${table}\n`);
mkdirSync(join(root, "bench", "results"), { recursive: true });
writeFileSync(
  join(root, "bench", "results", "http.json"),
  JSON.stringify(
    { machine, generator: generator.label, seconds: SECONDS, rounds: ROUNDS, loadavg: [load1, loadavg()[0]], results },
    null,
    2,
  ),
);
writeFileSync(join(root, "bench", "results", "http.md"), `${table}\n`);

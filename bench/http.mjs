// The write-up's HTTP experiment: for each runtime (and a Node host with Bun workers), a server that runs a
// process per request (bench/http_server.ts), natively and through the pool, for `echo hi` and a 163 KB
// `cat`, driven by wrk, oha or bombardier (whichever is installed) at 30 connections after a warm-up.
// When `go` is on PATH the same server in Go (os/exec, bench/reference/go_server.go) runs too, as the
// reference the issue's target names, measured in the same run.
// Prints a table and writes bench/results/http.{json,md}. `node bench/http.mjs` (BENCH_HTTP_SECONDS, default 8).
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { bin, buildDist, root } from "../support/setup.mjs";
import { countOf, scriptArgs, writeCatFixture } from "../support/fixture.mjs";

const SECONDS = countOf("BENCH_HTTP_SECONDS", 8);
const CONNECTIONS = 30;

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
  },
  {
    name: "bombardier",
    args: (url, seconds) => ["-c", `${CONNECTIONS}`, "-d", `${seconds}s`, "-p", "r", "-o", "json", url],
    rate: (out) => JSON.parse(out).result.rps.mean,
    errors: (out) => {
      const r = JSON.parse(out).result;
      return r.req1xx + r.req3xx + r.req4xx + r.req5xx + r.others;
    },
  },
];

/** The first installed load generator, with its `path` looked up once here (not for each load). */
function loadGenerator() {
  for (const candidate of GENERATORS) {
    const path = which(candidate.name);
    if (path !== undefined) return { ...candidate, path };
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
buildDist(); // Bun and Node servers run the npm build, as their users do (bench/_spawners.ts)

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-http-"));
const catFile = writeCatFixture(scratch);

const server = "bench/http_server.ts";
const hosts = [
  { label: "deno", cmd: "deno", args: scriptArgs("deno", server) },
  { label: "bun", cmd: "bun", args: scriptArgs("bun", server) },
  { label: "node", cmd: "node", args: scriptArgs("node", server) },
  { label: "node host, bun workers", cmd: "node", args: scriptArgs("node", server), env: { BENCH_WORKERS: "bun" } },
];

function startServer(host, mode) {
  const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, BENCH_CAT_FILE: catFile, ...host.env };
  const child = spawn(host.exe ?? join(bin, host.cmd), [...host.args, mode], {
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
      const match = /listening (\d+)/.exec(seen);
      if (match) resolve({ port: Number(match[1]), stop: () => (child.kill("SIGTERM"), exited) });
    });
    child.on("exit", (code) => reject(new Error(`${host.label} ${mode} server exited (${code})`)));
  });
}

function load(url, seconds) {
  const out = execFileSync(generator.path, generator.args(url, seconds), { encoding: "utf8" });
  return { rate: generator.rate(out), errors: generator.errors(out) };
}

/**
 * The Go reference server, built into the scratch directory, as a host marked `reference: true` (it runs natively
 * only); undefined without a Go toolchain.
 */
function goReference() {
  const go = which("go");
  if (go === undefined) return undefined;
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
  return { label: `Go (${version.replace(/^go/, "")}, os/exec), reference`, exe, args: [], reference: true };
}

/** Loads one server on one path for SECONDS after a 2 s warm-up; returns req/s. */
async function measure(host, mode, path, workload) {
  process.stdout.write(`${host.label} ${workload}${host.reference ? "" : ` ${mode}`}... `);
  const server = await startServer(host, mode);
  try {
    const url = `http://127.0.0.1:${server.port}${path}`;
    load(url, 2); // warm-up
    const { rate, errors } = load(url, SECONDS);
    if (errors > 0) throw new Error(`${errors} failed responses`);
    console.log(`${Math.round(rate)} req/s`);
    return Math.round(rate);
  } finally {
    await server.stop();
  }
}

const results = [];
try {
  const reference = goReference();
  // The reference runs natively only; every runtime natively and through the pool.
  for (const host of [...(reference ? [reference] : []), ...hosts]) {
    for (const path of ["/echo", "/cat"]) {
      const row = { label: host.label, workload: path === "/echo" ? "echo" : "cat 163 KB" };
      if (host.reference) row.reference = true;
      for (const mode of host.reference ? ["native"] : ["native", "pool"]) {
        row[mode] = await measure(host, mode, path, row.workload);
      }
      if (!host.reference) row.ratio = Number((row.pool / row.native).toFixed(2));
      results.push(row);
    }
  }
} finally {
  rmSync(scratch, { recursive: true, force: true }); // the fixture and the Go server's binary
}

const machine = `${cpus().length} cores, ${cpus()[0]?.model ?? "unknown cpu"}, ${process.platform}`;
const table = [
  `HTTP server spawning per request; ${generator.name}, ${CONNECTIONS} connections, ${SECONDS} s after a 2 s warm-up; ${machine}`,
  "",
  "| server (workers) | workload | native req/s | pool req/s | pool / native |",
  "|---|---|---|---|---|",
  ...results.map((r) =>
    r.reference
      ? `| ${r.label} | ${r.workload} | ${r.native} | | |`
      : `| ${r.label} | ${r.workload} | ${r.native} | ${r.pool} | ${r.ratio.toFixed(2)}x |`
  ),
].join("\n");
console.log(`\n${table}\n`);
mkdirSync(join(root, "bench", "results"), { recursive: true });
writeFileSync(
  join(root, "bench", "results", "http.json"),
  JSON.stringify({ machine, generator: generator.name, results }, null, 2),
);
writeFileSync(join(root, "bench", "results", "http.md"), `${table}\n`);

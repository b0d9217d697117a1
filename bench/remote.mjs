// Remote pools against local ones: `echo hi` and `cat` of the 163 KB fixture, at 1 in flight (latency) and 30 in
// flight (throughput), through a local pool and through a remote pool whose one agent runs on this machine behind a
// nats-server on loopback (so the difference is what NATS and the agent's relay add, not a network). Both pools use
// the same workers (native where built). Rounds interleave the two paths; medians are reported. Every output is
// checked byte for byte.
//
// Run: `node bench/remote.mjs` (or `bun bench/remote.mjs`, `deno run -A bench/remote.mjs`): the host and the agent
// run under that runtime. Env: BENCH_SPAWNS (per measurement at 30 in flight, default 300; a third at 1 in flight),
// BENCH_ROUNDS (3). Writes bench/results/remote.md.
import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { catFixtureBytes, countOf, median, percentile, writeCatFixture } from "../support/fixture.mjs";
import { startNatsServer } from "../support/nats_server.mjs";
import { childPids, cpuMillis } from "../support/proc.ts";
import { buildDist, root } from "../support/setup.mjs";

const HOST = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";
const SPAWNS = countOf("BENCH_SPAWNS", 300);
const ROUNDS = countOf("BENCH_ROUNDS", 3);
if (HOST === "node") buildDist(); // Node runs the npm build, as its users do
const { Pool } = await import(HOST === "node" ? join(root, "dist/mod.js") : join(root, "mod.ts"));

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-remote-bench-"));
const catFile = writeCatFixture(scratch);
const catBytes = Buffer.from(catFixtureBytes());
const server = await startNatsServer();
const subject = `bench.${process.pid}`;
const agentArgs = HOST === "deno"
  ? ["run", "-A", "remote/cli.ts"]
  : [HOST === "node" ? "dist/remote/cli.js" : "remote/cli.ts"];
const agent = spawn(process.execPath, [
  ...agentArgs,
  "agent",
  "--servers",
  server.url,
  "--subject",
  subject,
  "--insecure",
], {
  cwd: root,
  stdio: ["ignore", "ignore", "pipe"],
});
// Its log (a line per command) is read until it listens, then drained unread.
await new Promise((resolve, reject) => {
  let log = "";
  const listen = (text) => {
    log += text;
    if (!log.includes('"listening"')) return;
    agent.stderr.off("data", listen).on("data", () => {});
    resolve();
  };
  agent.stderr.setEncoding("utf8").on("data", listen);
  agent.on("exit", (code) => reject(new Error(`The agent exited with ${code}: ${log}`)));
});
// Whatever happens below, the agent, the server and the scratch directory go.
process.on("exit", () => {
  agent.kill("SIGKILL");
  rmSync(scratch, { recursive: true, force: true });
});

const local = new Pool();
const remote = new Pool({ remote: { servers: server.url, subject } });
await local.ready();
await remote.ready();

const workloads = {
  echo: { cmd: "echo", args: ["hi"], check: (out) => out.length === 3 && out[0] === 104 && out[1] === 105 },
  cat: {
    cmd: "cat",
    args: [catFile],
    // memcmp (Buffer.equals): a byte-by-byte loop would cost the host more than the command.
    check: (out) => catBytes.equals(out),
  },
};

async function one(pool, workload) {
  const start = performance.now();
  const { stdout, code } = await pool.command(workload.cmd, { args: workload.args }).output();
  if (code !== 0 || !workload.check(stdout)) throw new Error(`${workload.cmd}: wrong output (code ${code})`);
  return performance.now() - start;
}

/** CPU time (user + system) of process `pid` and its live descendants so far, in µs (Linux). */
function treeCpu(pid) {
  try {
    return cpuMillis(pid) * 1000 + childPids(pid).reduce((sum, child) => sum + treeCpu(child), 0);
  } catch {
    return 0; // gone (a command that ended meanwhile): its CPU is then its parent's (cutime), not counted here
  }
}

/** CPU per command, in µs, of the host, its local workers, the agent (with its workers) and the nats-server. */
function cpuNow(pool) {
  const { user, system } = process.cpuUsage();
  const workers = pool.stats().runtime === "remote" ? 0 : pool.stats().workers.reduce((s, w) => s + treeCpu(w.pid), 0);
  return { host: user + system, workers, agent: treeCpu(agent.pid), server: treeCpu(server.pid) };
}

/** `count` commands, `inFlight` at a time: spawns/s, the latencies, and CPU per command by process. */
async function measure(pool, workload, count, inFlight) {
  const latencies = [];
  let next = 0;
  const cpu = cpuNow(pool);
  const start = performance.now();
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next++ < count) latencies.push(await one(pool, workload));
  }));
  const seconds = (performance.now() - start) / 1000;
  const end = cpuNow(pool);
  const per = Object.fromEntries(Object.keys(cpu).map((key) => [key, (end[key] - cpu[key]) / count]));
  latencies.sort((a, b) => a - b);
  return { perSecond: count / seconds, p50: percentile(latencies, 0.5), p99: percentile(latencies, 0.99), cpu: per };
}

const results = {};
for (const [name, workload] of Object.entries(workloads)) {
  for (const inFlight of [1, 30]) {
    const count = inFlight === 1 ? Math.ceil(SPAWNS / 3) : SPAWNS;
    const paths = { local, remote };
    for (const pool of Object.values(paths)) await measure(pool, workload, Math.ceil(count / 3), inFlight); // warm-up
    const runs = { local: [], remote: [] };
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? ["local", "remote"] : ["remote", "local"];
      for (const path of order) runs[path].push(await measure(paths[path], workload, count, inFlight));
      process.stderr.write(".");
    }
    results[`${name} @${inFlight}`] = Object.fromEntries(
      Object.entries(runs).map(([path, list]) => [path, {
        perSecond: median(list.map((r) => r.perSecond)),
        p50: median(list.map((r) => r.p50)),
        p99: median(list.map((r) => r.p99)),
        cpu: Object.fromEntries(Object.keys(list[0].cpu).map((key) => [key, median(list.map((r) => r.cpu[key]))])),
      }]),
    );
  }
}
process.stderr.write("\n");

await remote.close();
await local.close();
agent.kill("SIGTERM");
await new Promise((resolve) => agent.once("exit", resolve));
await server.stop();
rmSync(scratch, { recursive: true, force: true });

const lines = [
  `# Remote pool vs local pool (${HOST} host, ${HOST} agent, one nats-server on loopback)`,
  "",
  `${new Date().toISOString()}, ${cpus().length} cores, ${ROUNDS} rounds of ${SPAWNS} commands at 30 in flight and ` +
  `${Math.ceil(SPAWNS / 3)} at 1, medians. Command: \`${HOST === "deno" ? "deno run -A" : HOST} bench/remote.mjs\`.`,
  "",
  "| workload | local spawns/s | remote spawns/s | remote/local | local p50 ms | remote p50 ms | local p99 ms | remote p99 ms |",
  "|---|---:|---:|---:|---:|---:|---:|---:|",
  ...Object.entries(results).map(([name, { local, remote }]) =>
    `| ${name} | ${local.perSecond.toFixed(0)} | ${remote.perSecond.toFixed(0)} | ${
      (remote.perSecond / local.perSecond).toFixed(2)
    }x | ${local.p50.toFixed(2)} | ${remote.p50.toFixed(2)} | ${local.p99.toFixed(2)} | ${remote.p99.toFixed(2)} |`
  ),
  "",
  "CPU per command in µs (user + system, /proc; the commands' own excluded): where the remote path's time goes.",
  "",
  "| workload | local: host | local: workers | remote: host | remote: agent and its workers | remote: nats-server |",
  "|---|---:|---:|---:|---:|---:|",
  ...Object.entries(results).map(([name, { local, remote }]) =>
    `| ${name} | ${
      [local.cpu.host, local.cpu.workers, remote.cpu.host, remote.cpu.agent, remote.cpu.server]
        .map((us) => us.toFixed(0)).join(" | ")
    } |`
  ),
];
const table = lines.join("\n") + "\n";
writeFileSync(join(root, "bench/results/remote.md"), table);
console.log(table);

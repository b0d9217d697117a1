#!/usr/bin/env node
/**
 * `spawnpool agent`: serves a remote pool's commands from this machine. Run it with `npx spawnpool agent`,
 * `bunx spawnpool agent` or `deno run -A jsr:@spawnpool/spawnpool/agent`; `--help` lists the options.
 *
 * @module
 */

import { hostname, userInfo } from "node:os";
import process from "node:process";
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { currentPlatform } from "../adapters/platform.ts";
import type { WorkerRuntime } from "../core/adapter.ts";
import { Agent, type AgentEvent, type AgentOptions } from "./agent.ts";

const USAGE = `Usage: spawnpool agent [options]

Runs commands for remote pools: takes them from NATS subject --subject (one agent of the queue group takes each),
runs them in a local pool, and streams their output back. Needs the NATS client beside spawnpool
(npm install @nats-io/transport-node). Whoever may publish to that subject can run commands as this agent's user:
confine it with NATS permissions (docs/remote.md#security in the spawnpool package). It needs credentials (a token,
a user, a .creds file or a TLS client certificate), or --insecure to run without.

  --servers URL[,URL]   NATS servers (env SPAWNPOOL_NATS_SERVERS)     [nats://127.0.0.1:4222]
  --subject S           the subject callers send commands to          [spawnpool]
  --queue Q             the queue group of this fleet's agents        [spawnpool]
  --concurrency N       commands at once; past it, callers try another agent   [32]
  --size N              local worker processes                        [2 to 4, by cores]
  --runtime R           local workers' runtime: native, deno, bun or node   [native where built, else this one]
  --cgroup DIR          a writable cgroup v2 directory to run the commands under (native workers only)
  --token-file F        a file holding the server's token (env SPAWNPOOL_NATS_TOKEN)
  --user U              user name (the password from env SPAWNPOOL_NATS_PASS)
  --creds F             a .creds file (user JWT and NKey seed)
  --tls                 TLS, with the system's trusted CAs
  --tls-ca F            TLS, with this CA's PEM file
  --tls-cert F          a client certificate (PEM), with --tls-key F
  --insecure            run without credentials: anyone who can reach the servers can run commands as this user
  --name NAME           what callers see this agent as                [the host name]
  --id ID               the agent's id in its control subjects, S.ctl.ID.* (fixed, for NATS permissions)  [random]
  --max-buffer BYTES    the most buffered output a command may collect here   [268435456]
  --verbose             log each command's arguments too
  --help                this text

Logs one JSON line per command start, exit and error on stderr. SIGINT or SIGTERM: stop taking commands, let the
running ones finish (a second signal kills them), then end by that signal.`;

function fail(message: string): never {
  console.error(`spawnpool agent: ${message}\n\n${USAGE}`);
  process.exit(2);
}

// `agent` is the one command, and may be left out (`deno run -A jsr:@spawnpool/spawnpool/agent --servers ...`).
const argv = process.argv.slice(2);
if (argv[0] === "agent") argv.shift();
if (argv[0] === "--help" || argv[0] === "-h") {
  console.log(USAGE);
  process.exit(0);
}
if (argv[0] !== undefined && !argv[0].startsWith("-")) fail(`unknown command "${argv[0]}"`);
let values: Record<string, string | boolean | undefined>;
try {
  values = parseArgs({
    args: argv,
    options: {
      servers: { type: "string" },
      subject: { type: "string" },
      queue: { type: "string" },
      concurrency: { type: "string" },
      size: { type: "string" },
      runtime: { type: "string" },
      cgroup: { type: "string" },
      "token-file": { type: "string" },
      user: { type: "string" },
      creds: { type: "string" },
      tls: { type: "boolean" },
      "tls-ca": { type: "string" },
      "tls-cert": { type: "string" },
      "tls-key": { type: "string" },
      insecure: { type: "boolean" },
      name: { type: "string" },
      id: { type: "string" },
      "max-buffer": { type: "string" },
      verbose: { type: "boolean" },
      help: { type: "boolean" },
    },
  }).values;
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
if (values.help) {
  console.log(USAGE);
  process.exit(0);
}

const str = (key: string): string | undefined => values[key] as string | undefined;
function positive(key: string): number | undefined {
  const text = str(key);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 1) fail(`--${key} must be a positive integer, got "${text}"`);
  return value;
}

const verbose = values.verbose === true;
function log(event: AgentEvent): void {
  const line = { time: new Date().toISOString(), ...event };
  if (!verbose) delete line.args;
  console.error(JSON.stringify(line));
}

function readSecret(file: string): string {
  let secret: string;
  try {
    secret = readFileSync(file, "utf8").trim();
  } catch (error) {
    fail(`cannot read ${file}: ${error instanceof Error ? error.message : String(error)}`);
  }
  return secret || fail(`${file} is empty`);
}

const tokenFile = str("token-file");
const servers = (str("servers") ?? process.env.SPAWNPOOL_NATS_SERVERS ?? "nats://127.0.0.1:4222").split(",");
const options: AgentOptions = {
  servers,
  subject: str("subject"),
  queue: str("queue"),
  concurrency: positive("concurrency"),
  pool: { size: positive("size"), runtime: str("runtime") as WorkerRuntime | undefined, cgroup: str("cgroup") },
  token: tokenFile !== undefined ? readSecret(tokenFile) : process.env.SPAWNPOOL_NATS_TOKEN || undefined,
  credentials: str("creds"),
  agentName: str("name"),
  agentId: str("id"),
  maxBuffer: positive("max-buffer"),
  log,
};
if (str("user") !== undefined) {
  options.user = str("user");
  options.pass = process.env.SPAWNPOOL_NATS_PASS ?? fail("--user needs the password in env SPAWNPOOL_NATS_PASS");
}
if ((str("tls-cert") === undefined) !== (str("tls-key") === undefined)) fail("--tls-cert and --tls-key go together");
if (values.tls === true || str("tls-ca") !== undefined || str("tls-cert") !== undefined) {
  options.tls = { caFile: str("tls-ca"), certFile: str("tls-cert"), keyFile: str("tls-key") };
}
// Nothing of the agent's own secrets reaches the commands it runs.
for (const name of ["SPAWNPOOL_NATS_TOKEN", "SPAWNPOOL_NATS_PASS"]) delete process.env[name];

/** This process's user name, for the warning of an agent without credentials. */
function userName(): string {
  try {
    return userInfo().username;
  } catch {
    return String(process.getuid?.() ?? "?");
  }
}

const platform = currentPlatform();
let agent: Agent;
try {
  agent = new Agent(platform, options, hostname());
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
}
// Secure by default: an agent that any client of the servers could command runs only when asked for by name.
const credentials = options.token !== undefined || options.user !== undefined || options.credentials !== undefined ||
  str("tls-cert") !== undefined;
if (!credentials && values.insecure !== true) {
  console.error(
    "spawnpool agent: refusing to start without NATS credentials: anyone who can reach the servers could run " +
      "commands as this user. Give --token-file F (or env SPAWNPOOL_NATS_TOKEN), --user U (password in env " +
      "SPAWNPOOL_NATS_PASS), --creds F or --tls-cert F --tls-key F; or --insecure to run without them.",
  );
  process.exit(2);
}
/**
 * Ends this stopped agent by `signal`, as a process without a handler for it ends (status 143 for SIGTERM, 130 for
 * SIGINT: what supervisors take for a clean stop), once what it logged is written. Not process.exit(): Node can
 * deadlock in its own teardown there (a V8 background compile waiting for a collection, nodejs/node#54918), and the
 * agent would hang after logging "stopped" until its supervisor killed it.
 */
function endBy(signal: "SIGINT" | "SIGTERM"): void {
  process.stderr.write("", () => {
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  });
}

let signals = 0;
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.on(signal, () => {
    // The first lets running commands finish; a second kills them.
    if (signals++ === 0) void agent.stop().then(() => endBy(signal));
    else void agent.stop({ drain: false });
  });
}
if (!credentials) {
  log({
    event: "insecure",
    reason: `WARNING: --insecure, no NATS credentials: anyone who can reach ${servers.join(", ")} can run commands ` +
      `as user "${userName()}" on this machine`,
  });
}
try {
  await agent.start();
} catch (error) {
  log({ event: "failed", reason: error instanceof Error ? error.message : String(error) });
  process.exit(1);
}
// The client reconnects for ever, but gives up on rejected credentials: an agent that can no longer serve exits, so
// that its supervisor restarts it.
void agent.closed.then((error) => {
  log({ event: "failed", reason: `the connection to NATS closed: ${error?.message ?? "for good"}` });
  void agent.stop({ drain: false }).finally(() => process.exit(1));
});

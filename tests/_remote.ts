/**
 * What the remote-pool test files share: whether a nats-server is here, agent processes (remote/cli.ts under the
 * host's runtime) and their logs, process-group checks from /proc, error assertions, and an operator-mode setup (JWTs
 * and .creds files made at test time with @nats-io/nkeys).
 *
 * @module
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn as spawnChild } from "node:child_process";
import { Buffer } from "node:buffer";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { createAccount, createOperator, createUser, type KeyPair } from "@nats-io/nkeys";
import { type Pool, SpawnPoolError } from "../mod.ts";
import { natsRequired, natsServerMissing, natsServerPath } from "../support/nats_server.mjs";
import { alive, hostArgv, withTimeout } from "./_helpers.ts";
import { inGroup } from "../support/session.mjs";

/** Why the remote tests cannot run here (no nats-server), or undefined. */
export const missing: string | undefined = natsServerPath() === undefined ? natsServerMissing() : undefined;

/**
 * The `skip` of a file's remote tests: the reason, with one SKIP line printed, when no nats-server is found; never on
 * CI (CI set), where they must run (and fail).
 */
export function skipWithout(file: string): string | false {
  if (missing === undefined || natsRequired()) return false;
  console.log(`SKIP ${file}: ${missing}`);
  return missing;
}

const CLI = fileURLToPath(new URL("../remote/cli.ts", import.meta.url).href);
export const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
export const sleep = (ms: number): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, ms));
let subjects = 0;
/** A subject of its own for each test. */
export const freshSubject = (): string => `sprt.${process.pid}.${subjects++}`;

/** Waits until process group `pgid` is empty (or `ms` passed); returns what is left. */
export async function groupSurvivors(pgid: number, ms: number): Promise<number[]> {
  const deadline = performance.now() + ms;
  while (inGroup(pgid).length > 0 && performance.now() < deadline) await sleep(20);
  return inGroup(pgid);
}

/** Asserts `error` is a SpawnPoolError with `code` whose message matches `message`. */
export function assertPoolError(error: unknown, code: string | string[], message?: RegExp): SpawnPoolError {
  assert.ok(error instanceof SpawnPoolError, `expected a SpawnPoolError, got ${String(error)}`);
  const codes = [code].flat();
  assert.ok(codes.includes(error.code), `code ${error.code} (${error.message}), expected ${codes.join(" or ")}`);
  if (message) assert.match(error.message, message);
  return error;
}

/** The rejection of `promise` (which must reject within `ms`), and how long it took. */
export async function rejection(promise: Promise<unknown>, ms = 10_000): Promise<{ error: unknown; ms: number }> {
  const start = performance.now();
  try {
    await withTimeout(promise, ms, `did not settle in ${ms} ms`);
  } catch (error) {
    return { error, ms: performance.now() - start };
  }
  assert.fail("expected a rejection");
}

/** A running agent process. */
export interface AgentProcess {
  child: ChildProcess;
  pid: number;
  lines: string[];
  exited: Promise<number | null>;
  /** SIGKILLs it (and waits for it). */
  kill(): Promise<void>;
  /** SIGTERMs it (running commands finish first) and waits. */
  stop(): Promise<void>;
}

/** Agents still running, for a file's last hook to kill. */
export const agents: Set<AgentProcess> = new Set<AgentProcess>();

/**
 * Starts `spawnpool agent` on `servers` under this host's runtime; resolves once it logged "listening". Its `args` give
 * its credentials, or `--insecure` for a server without (an agent without either refuses to start).
 */
export function startAgent(
  servers: string,
  subject: string,
  args: string[] = [],
  env: Record<string, string> = {},
  expectFailure = false,
): Promise<AgentProcess> {
  const argv = hostArgv(CLI, "agent", "--servers", servers, "--subject", subject, "--size", "2", ...args);
  return launchAgent(argv, env, expectFailure);
}

/**
 * Starts `spawnpool agent` under `runtime` ("node", "bun" or "deno"), its workers of that runtime too, on a server
 * without credentials (`--insecure`).
 */
export function startAgentUnder(runtime: string, servers: string, subject: string): Promise<AgentProcess> {
  const script = runtime === "deno" ? ["run", "-A", "--quiet", CLI] : [CLI];
  return launchAgent([
    runtime,
    ...script,
    "agent",
    "--servers",
    servers,
    "--subject",
    subject,
    "--runtime",
    runtime,
    "--insecure",
  ]);
}

// An agent a file leaves running (one that never reached its after hook) goes with the test process.
process.on("exit", () => {
  for (const agent of agents) agent.child.kill("SIGKILL");
});

/** Runs `argv`, an agent; resolves once it logged "listening" (or rejects with its log; with `expectFailure`, resolves). */
function launchAgent(argv: string[], env: Record<string, string> = {}, expectFailure = false): Promise<AgentProcess> {
  const [cmd, ...rest] = argv;
  // Its stdout ignored: "inherit" on a remote pool is the agent's stdio.
  const child = spawnChild(cmd, rest, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  const lines: string[] = [];
  const exited = new Promise<number | null>((resolve) => {
    child.once("exit", (code) => resolve(code));
    child.once("error", () => resolve(null));
  });
  const running = () => child.exitCode === null && child.signalCode === null;
  const agent: AgentProcess = {
    child,
    pid: child.pid!,
    lines,
    exited,
    async kill() {
      if (running()) child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (!running()) return;
      // The first SIGTERM lets running commands finish; a second kills them; SIGKILL if even that hangs.
      const escalate = [
        setTimeout(() => child.kill("SIGTERM"), 5_000),
        setTimeout(() => child.kill("SIGKILL"), 10_000),
      ];
      child.kill("SIGTERM");
      await exited.finally(() => escalate.forEach(clearTimeout));
    },
  };
  agents.add(agent);
  exited.then(() => agents.delete(agent));
  return new Promise((resolve, reject) => {
    let partial = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`agent not listening in 30 s:\n${lines.join("\n")}`));
    }, 30_000);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (line.includes('"listening"')) {
          clearTimeout(timer);
          resolve(agent);
        }
      }
    });
    exited.then((code) => {
      clearTimeout(timer);
      if (partial) lines.push(partial);
      if (expectFailure) resolve(agent);
      else reject(new Error(`agent exited (${code}) before listening:\n${lines.join("\n")}`));
    });
  });
}

/**
 * Asserts that a SIGTERMed agent stopped as it should: its "stopped" line, then its end by SIGTERM (as a process
 * without a handler ends; not by the SIGKILL that {@linkcode AgentProcess.stop} sends one that hangs).
 */
export async function assertStopped(agent: AgentProcess): Promise<void> {
  const code = await agent.exited;
  assert.ok(agent.lines.some((line) => line.includes('"stopped"')), agent.lines.join("\n"));
  assert.deepEqual(
    { code, signal: agent.child.signalCode },
    { code: null, signal: "SIGTERM" },
    agent.lines.join("\n"),
  );
  assert.equal(alive(agent.pid), false);
}

/** The pids of the agent's commands, from its "start" log lines. */
export function startedPids(agent: AgentProcess): number[] {
  return agent.lines.filter((line) => line.includes('"start"')).map((line) => JSON.parse(line).pid as number);
}

/** Runs `echo hello` through `pool` and checks the output. */
export async function echoWorks(pool: Pool, word = "hello"): Promise<void> {
  const proc = pool.spawn(["echo", word]);
  const out = await new Response(proc.stdout).text();
  assert.equal(await proc.exited, 0);
  assert.equal(out, `${word}\n`);
}

/** A NATS JWT: `{"typ":"JWT","alg":"ed25519-nkey"}`, the claims, and `issuer`'s signature over "header.claims". */
function natsJwt(issuer: KeyPair, subject: KeyPair, name: string, nats: Record<string, unknown>): string {
  const segment = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const claims = {
    jti: randomBytes(20).toString("hex").toUpperCase(),
    iat: Math.floor(Date.now() / 1000),
    iss: issuer.getPublicKey(),
    name,
    sub: subject.getPublicKey(),
    nats: { ...nats, version: 2 },
  };
  const signed = `${segment({ typ: "JWT", alg: "ed25519-nkey" })}.${segment(claims)}`;
  return `${signed}.${Buffer.from(issuer.sign(new TextEncoder().encode(signed))).toString("base64url")}`;
}

/** The text of a user's .creds file: its JWT, then its NKey seed (the layout `nsc` writes). */
function credsFile(jwt: string, user: KeyPair): string {
  return `-----BEGIN NATS USER JWT-----\n${jwt}\n------END NATS USER JWT------\n\n` +
    "************************* IMPORTANT *************************\n" +
    "NKEY Seed printed below can be used to sign and prove identity.\n" +
    "NKEYs are sensitive and should be treated as secrets.\n\n" +
    `-----BEGIN USER NKEY SEED-----\n${new TextDecoder().decode(user.getSeed())}\n------END USER NKEY SEED------\n\n` +
    "*************************************************************\n";
}

/** An operator-mode setup: the server's config, and .creds files of users of the preloaded account or of another. */
export interface OperatorMode {
  /** `operator: <JWT>`, `resolver: MEMORY`, and `resolver_preload` with the account's JWT. */
  config: string;
  /** .creds files of users `caller` and `agent` of the preloaded account. */
  caller: string;
  agent: string;
  /** The .creds file of a user signed by another account's key, one the server does not know. */
  stranger: string;
}

/**
 * Makes, without `nsc`, an operator (self-signed), an account it signs, two users (caller, agent) the account signs,
 * and a user signed by another account key, one the server has no JWT for; writes the .creds files into `dir`. No
 * limits: -1 everywhere (`nsc`'s defaults).
 */
export function operatorMode(dir: string): OperatorMode {
  mkdirSync(dir, { recursive: true });
  const operator = createOperator();
  const account = createAccount();
  const other = createAccount();
  const unlimited = { subs: -1, data: -1, payload: -1 };
  const accountClaims = {
    type: "account",
    limits: { ...unlimited, imports: -1, exports: -1, wildcards: true, conn: -1, leaf: -1 },
    default_permissions: { pub: {}, sub: {} },
  };
  const user = (name: string, issuer: KeyPair): string => {
    const keys = createUser();
    const jwt = natsJwt(issuer, keys, name, { type: "user", pub: {}, sub: {}, ...unlimited });
    const file = join(dir, `${name}.creds`);
    writeFileSync(file, credsFile(jwt, keys), { mode: 0o600 });
    return file;
  };
  return {
    config: `operator: ${natsJwt(operator, operator, "spawnpool-test", { type: "operator" })}\n` +
      "resolver: MEMORY\n" +
      `resolver_preload: {\n  ${account.getPublicKey()}: ${natsJwt(operator, account, "pool", accountClaims)}\n}\n`,
    caller: user("caller", account),
    agent: user("agent", account),
    stranger: user("stranger", other),
  };
}

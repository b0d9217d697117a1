/**
 * What the remote-pool test files share: whether a nats-server is here, agent processes (remote/cli.ts under the
 * host's runtime) and their logs, process-group checks from /proc, and error assertions.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type ChildProcess, spawn as spawnChild } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { type Pool, SpawnPoolError } from "../mod.ts";
import { natsServerMissing, natsServerPath } from "../support/nats_server.mjs";
import { alive, childPids, HOST, hostArgv, withTimeout } from "./_helpers.ts";

/** Why the remote tests cannot run here (no nats-server), or undefined. */
export const missing: string | undefined = natsServerPath() === undefined ? natsServerMissing() : undefined;

/**
 * The `skip` of a file's remote tests: the reason, with one SKIP line printed, when no nats-server is found; never on
 * CI (CI set), where they must run (and fail).
 */
export function skipWithout(file: string): string | false {
  if (missing === undefined || process.env.CI) return false;
  console.log(`SKIP ${file}: ${missing}`);
  return missing;
}

const CLI = fileURLToPath(new URL("../remote/cli.ts", import.meta.url).href);
export const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
export const sleep = (ms: number): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, ms));
let subjects = 0;
/** A subject of its own for each test. */
export const freshSubject = (): string => `sprt.${process.pid}.${subjects++}`;

/** A process's descendants, from /proc. */
export function descendants(pid: number): number[] {
  return childPids(pid).flatMap((child) => [child, ...descendants(child)]);
}

/** Processes in process group `pgid`, from /proc (zombies left out). */
export function groupMembers(pgid: number): number[] {
  const found: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] !== "Z" && Number(fields[2]) === pgid) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Waits until process group `pgid` is empty (or `ms` passed); returns what is left. */
export async function groupSurvivors(pgid: number, ms: number): Promise<number[]> {
  const deadline = performance.now() + ms;
  while (groupMembers(pgid).length > 0 && performance.now() < deadline) await sleep(20);
  return groupMembers(pgid);
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

/** Starts `spawnpool agent` on `servers`; resolves once it logged "listening" (or rejects with its log). */
export function startAgent(
  servers: string,
  subject: string,
  args: string[] = [],
  env: Record<string, string> = {},
  expectFailure = false,
): Promise<AgentProcess> {
  const [cmd, ...rest] = hostArgv(CLI, "agent", "--servers", servers, "--subject", subject, "--size", "2", ...args);
  const child = spawnChild(cmd, rest, { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, ...env } });
  const lines: string[] = [];
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const agent: AgentProcess = {
    child,
    pid: child.pid!,
    lines,
    exited,
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
        await exited.finally(() => clearTimeout(timer));
      }
    },
  };
  agents.add(agent);
  exited.then(() => agents.delete(agent));
  return new Promise((resolve, reject) => {
    let partial = "";
    const timer = setTimeout(() => reject(new Error(`agent not listening in 20 s:\n${lines.join("\n")}`)), 20_000);
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
 * Asserts that a SIGTERMed agent stopped as it should: its "stopped" line, exit code 0. (Deno's node:child_process
 * reports a child it sent a signal to as ended by that signal, whatever it exited with.)
 */
export async function assertStopped(agent: AgentProcess): Promise<void> {
  const code = await agent.exited;
  assert.ok(agent.lines.some((line) => line.includes('"stopped"')), agent.lines.join("\n"));
  if (HOST !== "deno") assert.equal(code, 0);
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

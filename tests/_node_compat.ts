/**
 * The harness of the drop-in's differential suite (tests/node_compat_test.ts): the fixtures, how a scenario runs
 * and is observed through either module, and the process state some scenarios need around both runs.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as native from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { configureDefaultPool, Pool, type RuntimeName, type WorkerRuntime } from "../mod.ts";
import * as pooled from "../node.ts";
import { catFixtureBytes, writeCatFixture } from "../support/fixture.mjs";
import { HOST, withTimeout } from "./_helpers.ts";

// SPAWNPOOL_COMPAT_WORKERS runs the drop-in's default pool on other workers than the host's (e.g. "native"); without it,
// on the host's own (said explicitly: the default is native where a native worker is built). Either way every command
// goes to a worker (no `startInHost`). "in-host" runs each scenario on a pool of its own that runs commands in the host
// (`startInHost`, as the default pool does with a script's first commands): there a scenario's commands run in the
// host until a worker is ready (two running at once start one) or unless one needs a process group of its own.
const workersSetting = process.env.SPAWNPOOL_COMPAT_WORKERS;
/** Whether the scenarios run on pools that start commands in the host. */
export const IN_HOST = workersSetting === "in-host";
export const COMPAT_WORKERS = (IN_HOST ? undefined : workersSetting) as WorkerRuntime | undefined;
configureDefaultPool({ runtime: COMPAT_WORKERS ?? HOST, startInHost: false });

export type CP = Pick<typeof native, "spawn" | "execFile" | "exec">;

/** The scenario's own pool, in-host runs: `inScenarioPool` sets it. */
let scenarioApi: CP | undefined;
/** The drop-in's functions on the scenario's pool (in-host runs), with their own properties (util.promisify's). */
const onScenarioPool = new Proxy({} as CP, {
  get(_target, key) {
    if (scenarioApi === undefined) throw new Error("in-host scenarios run inside inScenarioPool()");
    return scenarioApi[key as keyof CP];
  },
});

/**
 * Runs a scenario's pooled side: in-host runs on a pool of its own that runs commands in the host, closed after it (what
 * the scenario left running finishes first, as it would on the default pool, which never closes); otherwise as it is,
 * on the default pool.
 */
export async function inScenarioPool<T>(run: () => Promise<T> | T): Promise<T> {
  if (!IN_HOST) return await run();
  const pool = new Pool({ startInHost: true, runtime: HOST }); // workers, when two commands run at once: the host's
  scenarioApi = pooled.childProcessFor(pool);
  try {
    return await run();
  } finally {
    scenarioApi = undefined;
    void pool.close();
  }
}

export const MODULES: Array<[string, CP]> = [["native", native], ["pooled", IN_HOST ? onScenarioPool : pooled]];

export const scratch = realpathSync(mkdtempSync(join(tmpdir(), "spawnpool-compat-")));
/** A deterministic file of every byte value, 163 KB (the write-up's cat payload size). */
export const PATTERN = writeCatFixture(scratch);
export const patternBytes = Buffer.from(catFixtureBytes());
export const BIG = join(scratch, "big.bin");
writeFileSync(BIG, Buffer.concat(Array.from({ length: 32 }, () => patternBytes))); // 5.2 MB
export const NOT_EXECUTABLE = join(scratch, "not-executable.sh");
writeFileSync(NOT_EXECUTABLE, "#!/bin/sh\necho never\n");
chmodSync(NOT_EXECUTABLE, 0o644);
export const A_DIRECTORY = join(scratch, "a-directory");
mkdirSync(A_DIRECTORY);
/**
 * Notes each SIGTERM it gets in the file its last argument names; prints "early", and exits 3 a second after its first
 * SIGTERM (a second one by then is noted too), or after 10 s without one.
 */
export const COUNT_TERMS = join(scratch, "count-terms.mjs");
writeFileSync(
  COUNT_TERMS,
  [
    'import { appendFileSync } from "node:fs";',
    'import process from "node:process";',
    "let exiting = false;",
    'process.on("SIGTERM", () => {',
    '  appendFileSync(process.argv.at(-1), "TERM\\n");',
    "  if (!exiting) setTimeout(() => process.exit(3), 1000);",
    "  exiting = true;",
    "});",
    'process.stdout.write("early\\n");',
    "setTimeout(() => process.exit(3), 10_000);",
  ].join("\n"),
);

export function digest(chunks: Buffer[]): string {
  const all = Buffer.concat(chunks);
  const preview = all.subarray(0, 48).toString("latin1");
  return `${all.length}:${createHash("sha256").update(all).digest("hex").slice(0, 16)}:${JSON.stringify(preview)}`;
}

/** The fields of an error a program can rely on. */
export function describeError(error: unknown): Record<string, unknown> {
  const e = error as Record<string, unknown> & Error;
  const out: Record<string, unknown> = { name: e.name, code: e.code };
  // Which fields are enumerable is part of the shape (a logger or `{ ...error }` shows exactly those). Node is
  // the reference: Bun's and Deno's own errors carry other fields, so they are compared under Node only.
  if (HOST === "node") out.keys = Object.keys(e).sort();
  for (const key of ["errno", "syscall", "path", "spawnargs", "killed", "signal", "cmd"]) {
    if (key in e) out[key] = e[key];
  }
  if (e.name === "AbortError") out.cause = String((e as { cause?: unknown }).cause);
  return out;
}

/** What `fn` threw; fails if it did not throw. */
export function thrownError(fn: () => unknown): Error {
  try {
    fn();
  } catch (error) {
    return error as Error;
  }
  throw new assert.AssertionError({ message: "did not throw" });
}

/** Calls `fn` and describes what it threw; fails if it did not throw. */
export function thrown(fn: () => unknown): Record<string, unknown> {
  try {
    fn();
  } catch (error) {
    return { threw: (error as Error).name, code: (error as { code?: unknown }).code };
  }
  return { threw: false };
}

export interface SpawnCase {
  file: string;
  args?: unknown[];
  options?: Record<string, unknown> | (() => Record<string, unknown>);
  /** Written to stdin, then stdin ends; "keep" leaves stdin open; undefined ends it at once if piped. */
  input?: Buffer | string | string[] | "keep";
  /** Runs right after spawn(). */
  act?: (child: native.ChildProcess, log: string[]) => unknown;
  /** Reads stdout through this instead of 'data' listeners. */
  read?: "none" | "pipe-slow" | "for-await" | "readable" | "utf8";
}

/** Waits for `promise`, or fails the scenario after 20 s. */
export const within20s = <T>(promise: Promise<T>, what: string): Promise<T> =>
  withTimeout(promise, 20_000, `${what}: no 'close' in 20000 ms`);

/** Spawns through `cp` and records everything a program could observe, until 'close'. */
export async function observe(cp: CP, c: SpawnCase): Promise<Record<string, unknown>> {
  const log: string[] = [];
  const options = typeof c.options === "function" ? c.options() : c.options;
  const child = c.args === undefined
    ? (cp.spawn as (f: string, o?: unknown) => native.ChildProcess)(c.file, options)
    : (cp.spawn as (f: string, a: unknown, o?: unknown) => native.ChildProcess)(c.file, c.args, options);
  const out: Record<string, Buffer[]> = { stdout: [], stderr: [] };
  let spawned = false;
  let dataBeforeSpawn = false;
  child.on("spawn", () => {
    spawned = true;
    log.push(`spawn pid:${typeof child.pid}`);
  });
  child.on("exit", (code, signal) => log.push(`exit ${code} ${signal}`));
  child.on("error", (error) => log.push(`error ${JSON.stringify(describeError(error))}`));
  const streamDone: Promise<void>[] = [];
  for (const name of ["stdout", "stderr"] as const) {
    const stream = child[name];
    if (stream === null) continue;
    const collect = (chunk: Buffer | string) => {
      if (!spawned) dataBeforeSpawn = true;
      out[name].push(Buffer.from(chunk));
    };
    if (name === "stdout" && c.read === "none") continue;
    if (name === "stdout" && c.read === "pipe-slow") {
      const sink = new Writable({
        highWaterMark: 1024,
        write(chunk, _encoding, callback) {
          collect(chunk);
          setTimeout(callback, 1);
        },
      });
      stream.pipe(sink);
      streamDone.push(new Promise((resolve) => sink.on("finish", () => resolve())));
    } else if (name === "stdout" && c.read === "for-await") {
      streamDone.push((async () => {
        for await (const chunk of stream) collect(chunk);
      })());
    } else if (name === "stdout" && c.read === "readable") {
      stream.on("readable", () => {
        let chunk;
        while ((chunk = stream.read()) !== null) collect(chunk);
      });
    } else {
      if (name === "stdout" && c.read === "utf8") stream.setEncoding("utf8");
      stream.on("data", collect);
    }
  }
  if (child.stdin !== null) {
    child.stdin.on("error", (error) => log.push(`stdin error ${(error as { code?: string }).code}`));
    if (Array.isArray(c.input)) {
      for (const piece of c.input) child.stdin.write(piece);
      child.stdin.end();
    } else if (c.input !== "keep") child.stdin.end(c.input);
  }
  // Listen for 'close' before anything awaits: Bun's native module emits it from a microtask on failure.
  const closed = new Promise<[unknown, unknown]>((resolve) =>
    child.on("close", (code, signal) => resolve([code, signal]))
  );
  await c.act?.(child, log);
  const [code, signal] = await within20s(closed, `${c.file} ${JSON.stringify(c.args)}`);
  log.push(`close ${code} ${signal}`);
  await Promise.all(streamDone);
  return {
    log,
    stdout: digest(out.stdout),
    stderr: digest(out.stderr),
    dataBeforeSpawn,
    exitCode: child.exitCode,
    signalCode: child.signalCode,
    killed: child.killed,
    connected: child.connected,
    stdio: child.stdio.slice(0, 4).map((s) => s === null ? null : "stream"),
    stdioIsStreams: child.stdio[0] === child.stdin && child.stdio[1] === child.stdout,
    spawnfile: child.spawnfile,
    spawnargs: child.spawnargs,
  };
}

export type ExecResult = Record<string, unknown>;

export function describeResult(error: unknown, stdout: unknown, stderr: unknown): ExecResult {
  const show = (v: unknown) => Buffer.isBuffer(v) ? `Buffer ${digest([v])}` : typeof v === "string" ? v : typeof v;
  return { error: error === null ? null : describeError(error), stdout: show(stdout), stderr: show(stderr) };
}

/** Runs `call(cp, callback)` and records the callback's arguments. */
export function viaCallback(call: (cp: CP, callback: (e: unknown, o: unknown, r: unknown) => void) => unknown) {
  return (cp: CP) =>
    within20s(
      new Promise<ExecResult>((resolve) => call(cp, (e, o, r) => resolve(describeResult(e, o, r)))),
      "callback",
    );
}

/** Runs a promisified call and records its result or rejection. */
export function viaPromise(call: (cp: CP) => Promise<{ stdout: unknown; stderr: unknown }>) {
  return async (cp: CP) => {
    try {
      const { stdout, stderr } = await call(cp);
      return describeResult(null, stdout, stderr);
    } catch (error) {
      const e = error as { stdout?: unknown; stderr?: unknown };
      return describeResult(error, e.stdout, e.stderr);
    }
  };
}

export interface Scenario {
  name: string;
  run: (cp: CP) => Promise<unknown> | unknown;
  /** Fields the runtime's own node:child_process gets wrong there, with the reason; not compared. */
  nativeDiffers?: Partial<Record<RuntimeName, { fields: string[]; why: string }>>;
  /** The pool hands this call to the runtime's own node:child_process (it needs what a pool cannot give). */
  runsNatively?: boolean;
  /** Fields where the pool departs from Node on purpose, with the reason; not compared on any runtime. */
  poolDiffers?: { fields: string[]; why: string };
  /**
   * Fields where the pool departs from Node depending on the runtime that spawns the commands (the workers', or the
   * host's when the commands run in the host), or that hosts them, or ("in-host") wherever commands run in the host,
   * with the reason.
   */
  spawnerDiffers?: Partial<Record<string, { fields: string[]; why: string }>>;
  /** Maps a result before comparing, for outcomes that legitimately vary between runs. */
  normalize?: (result: Record<string, unknown>) => Record<string, unknown>;
  /** Extra checks of the pooled result (Node's behaviour where a runtime's native differs). */
  expectPooled?: (result: Record<string, unknown>) => void;
}

export const spawnCase = (name: string, c: SpawnCase, extra: Partial<Scenario> = {}): Scenario => ({
  name,
  run: (cp) => observe(cp, c),
  ...extra,
});

export const sh = (script: string, options?: Record<string, unknown>, more: Partial<SpawnCase> = {}): SpawnCase => ({
  file: "sh",
  args: ["-c", script],
  options,
  ...more,
});

export const abortedController = new AbortController();
abortedController.abort(new Error("already aborted"));

export function range(n: number): string[] {
  return Array.from({ length: n }, (_, i) => String(i));
}

export function timeoutSignal(ms: number): AbortSignal {
  const controller = new AbortController();
  setTimeout(() => controller.abort(new Error("stop")), ms);
  return controller.signal;
}

// The scenarios that depend on process state set it here, around both runs. Those about the cwd run in the
// scratch directory, which the workers (started from the repository) do not share.
export const inScratch = {
  before: () => process.chdir(scratch),
  after: () => process.chdir(fileURLToPath(new URL("..", import.meta.url).href)),
};
export const stateful: Record<string, { before: () => void; after: () => void }> = {
  "follows process.chdir()": inScratch,
  "a relative cwd is taken from the host's current directory": inScratch,
  "an empty cwd is the host's": inScratch,
  "env follows process.env changes": {
    before: () => void (process.env.SPAWNPOOL_COMPAT_VAR = "set at runtime"),
    after: () => void delete process.env.SPAWNPOOL_COMPAT_VAR,
  },
};

/** Where a runtime's own node:child_process departs from Node in every scenario. */
export const EVERY_SCENARIO_DIFFERS: Partial<Record<RuntimeName, { fields: string[]; why: string }>> = {
  deno: { fields: ["connected"], why: "Deno's ChildProcess has no 'connected' property" },
};

export function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

export function omit(value: unknown, fields: string[]): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  return Object.fromEntries(Object.entries(value).filter(([key]) => !fields.includes(key)));
}

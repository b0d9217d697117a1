/**
 * Helpers shared by the native worker's test files (not a test file itself): the builds under test, a sanitized
 * worker on a channel the test holds as a host would, and spawn request frames.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawn as nodeSpawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { ByteChannel } from "../core/adapter.ts";
import { decodeExit, encodeCredit, encodeJson, Frame, FrameDecoder, type SpawnRequest } from "../core/frame.ts";
import { listenForWorker } from "../adapters/_net_listener.ts";
import { handshake } from "../adapters/_unix_handshake.ts";
import { frame, withTimeout } from "./_helpers.ts";

/** The ASan+UBSan build, the one most tests run. */
export const ASAN_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker-asan", import.meta.url).href);
/** The poll() and SIGCHLD build: the loop systems without epoll and pidfd get. */
export const POLL_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker-poll", import.meta.url).href);
/** The release build, for what the sanitizers would blur: memory. */
export const RELEASE_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker", import.meta.url).href);
/** Leaks are checked at exit (LeakSanitizer works on this machine kind); any report aborts the worker. */
export const SANITIZER_ENV = {
  ASAN_OPTIONS: "detect_leaks=1:abort_on_error=1:halt_on_error=1",
  UBSAN_OPTIONS: "halt_on_error=1:print_stacktrace=1",
};
/** What a sanitizer report on the worker's stderr starts with. */
export const SANITIZER_REPORT = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/;
/** Bytes as UTF-8 text. */
export const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

/** A frame from the worker. */
export interface Received {
  type: number;
  id: number;
  payload: Uint8Array;
}

/** A sanitized native worker on a unix-socket channel this test holds, as a host would. */
export interface Worker {
  pid: number;
  channel: ByteChannel;
  /** Frames from the worker, in order; output payloads are not kept (only their frames). */
  received: Received[];
  /** Frames received, by type. */
  counts: Map<number, number>;
  /** Called for each frame as it arrives. */
  onFrame: (frame: Received) => void;
  /** Resolves with how the worker exited. */
  exited: Promise<{ code: number | null; signal: string | null }>;
  stderr: () => string;
  closed: Promise<void>;
  /** SIGKILLs the worker (a failed test must not leave it running). */
  kill(): void;
}

/**
 * Starts `command` (the sanitized worker, or a wrapper that execs a worker) as a worker of this test's, with `env`
 * added to its environment.
 */
export async function startWorker(
  command: string[] = [ASAN_WORKER],
  env: Record<string, string> = {},
): Promise<Worker> {
  assert.ok(existsSync(ASAN_WORKER), `${ASAN_WORKER} exists (npm run build:native)`);
  const pending = await listenForWorker();
  const child = nodeSpawn(command[0], command.slice(1), {
    stdio: ["ignore", "ignore", "pipe"],
    env: {
      ...process.env,
      ...SANITIZER_ENV,
      ...env,
      SPAWNPOOL_CHANNEL: "unix",
      SPAWNPOOL_BOOTSTRAP: pending.bootstrap,
    },
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  );
  const channel = await handshake(pending, { exited, kill: () => child.kill("SIGKILL") });
  let closeChannel!: () => void;
  const worker: Worker = {
    pid: child.pid!,
    channel,
    received: [],
    counts: new Map(),
    onFrame: () => {},
    exited,
    stderr: () => stderr,
    closed: new Promise((resolve) => (closeChannel = resolve)),
    kill: () => void child.kill("SIGKILL"),
  };
  const decoder = new FrameDecoder((type, id, payload) => {
    worker.counts.set(type, (worker.counts.get(type) ?? 0) + 1);
    // An exit's layout must decode; output is not kept, as a fuzz run moves hundreds of MB.
    if (type === Frame.Exit) decodeExit(payload);
    const output = type === Frame.Stdout || type === Frame.Stderr || type === Frame.Exit;
    worker.received.push({
      type,
      id,
      payload: output && payload.byteLength > 4096 ? new Uint8Array(0) : payload.slice(),
    });
    worker.onFrame({ type, id, payload });
  }, { lent: channel.lendsChunks === true });
  channel.start({ data: (chunk) => decoder.push(chunk), close: () => closeChannel() });
  return worker;
}

/** Waits for the worker to exit; fails on a signal, an unexpected code or a sanitizer report. */
export async function expectExit(worker: Worker, codes: number[], what: string): Promise<void> {
  const { code, signal } = await withTimeout(worker.exited, 20_000, `${what}: the worker did not exit`);
  assert.doesNotMatch(worker.stderr(), SANITIZER_REPORT, `${what}: sanitizer report`);
  assert.equal(signal, null, `${what}: killed by ${signal}\n${worker.stderr()}`);
  assert.ok(codes.includes(code!), `${what}: exit code ${code}, expected ${codes}\n${worker.stderr()}`);
}

/** Runs `body` on a worker started from `command`, then closes its channel: the worker must exit 0, clean. */
export async function withWorker(
  what: string,
  command: string[] | undefined,
  body: (worker: Worker) => Promise<void> | void,
  env?: Record<string, string>,
) {
  const worker = await startWorker(command, env);
  try {
    await body(worker);
    worker.channel.close();
    await expectExit(worker, [0], what);
  } finally {
    worker.kill();
  }
}

/** Waits until every request of `ids` got its Exit or SpawnError frame; returns those frames by id. */
export async function settled(worker: Worker, ids: number[], ms: number, what: string): Promise<Map<number, Received>> {
  const found = new Map<number, Received>();
  const check = () => {
    for (const f of worker.received) {
      if ((f.type === Frame.Exit || f.type === Frame.SpawnError) && ids.includes(f.id)) found.set(f.id, f);
    }
    return found.size === ids.length;
  };
  const previous = worker.onFrame;
  const all = new Promise<void>((resolve) => {
    worker.onFrame = (f) => {
      previous(f);
      if ((f.type === Frame.Exit || f.type === Frame.SpawnError) && check()) resolve();
    };
    if (check()) resolve();
  });
  try {
    await withTimeout(all, ms, `${what}: not every request was answered in ${ms} ms`);
  } finally {
    worker.onFrame = previous;
  }
  return found;
}

/** The exit code of a request's Exit frame (failing on any other frame). */
export function exitCode(f: Received | undefined, what: string): number | null {
  assert.equal(f?.type, Frame.Exit, `${what}: ${f && text(f.payload)}`);
  return decodeExit(f!.payload).info.code;
}

/** The peak resident memory of a process, in bytes. */
export function peakMemory(pid: number): number {
  return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}

/** A valid spawn request (`true`, buffered, piped output), with `overrides`. */
export const request = (overrides: Partial<SpawnRequest>): SpawnRequest => ({
  cmd: "true",
  args: [],
  stdin: "null",
  stdout: "piped",
  stderr: "piped",
  buffered: true,
  killSignal: "SIGTERM",
  forceKillAfterDelay: 50,
  window: 65536,
  group: false,
  ...overrides,
});
/** A Spawn frame of `request(overrides)`. */
export const spawnFrame = (id: number, overrides: Partial<SpawnRequest>) =>
  frame(Frame.Spawn, id, encodeJson(request(overrides)));

/** A host's side of flow control: every output frame is credited at once. */
export function creditOutput(worker: Worker): void {
  worker.onFrame = ({ type, id, payload }) => {
    if (type === Frame.Stdout || type === Frame.Stderr) {
      worker.channel.write([frame(Frame.Credit, id, encodeCredit(type === Frame.Stdout ? 1 : 2, payload.byteLength))]);
    }
  };
}

/**
 * The native worker (native/worker.c) under AddressSanitizer and UndefinedBehaviorSanitizer
 * (native/build/spawnpool-worker-asan, built by tools/build_native.mjs): pool scenarios through the real host,
 * the protocol limits, and a fuzz run of random and mutated frames over its real channel. A sanitizer report,
 * a leak (LeakSanitizer runs at exit), a crash, a hang or an fd that stays open fails the test.
 *
 * The heavy fuzz run (over 100,000 frames) runs under Node; Deno and Bun run a smaller one of the same code. The
 * pool scenarios also run on native/build/spawnpool-worker-poll, the poll() and SIGCHLD loop other systems get.
 *
 * @module
 */

import assert from "node:assert/strict";
import { execFileSync, spawn as nodeSpawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import type { ByteChannel } from "../core/adapter.ts";
import {
  decodeExit,
  decodeJson,
  encodeCredit,
  encodeJson,
  Frame,
  FrameDecoder,
  MAX_PAYLOAD_BYTES,
  type SpawnRequest,
} from "../core/frame.ts";
import { handshake, listenForWorker } from "../adapters/_unix_handshake.ts";
import { Pool, SpawnError, SpawnPoolError } from "../mod.ts";
import { alive, childPids, frame, HOST, withTimeout } from "./_helpers.ts";

const ASAN_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker-asan", import.meta.url).href);
const POLL_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker-poll", import.meta.url).href);
/** The release build, for what the sanitizers would blur: memory. */
const RELEASE_WORKER = fileURLToPath(new URL("../native/build/spawnpool-worker", import.meta.url).href);
/** Leaks are checked at exit (LeakSanitizer works on this machine kind); any report aborts the worker. */
const SANITIZER_ENV = {
  ASAN_OPTIONS: "detect_leaks=1:abort_on_error=1:halt_on_error=1",
  UBSAN_OPTIONS: "halt_on_error=1:print_stacktrace=1",
};
const SANITIZER_REPORT = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/;
const HEAVY = HOST === "node";
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

/** A seeded generator, so a failing run can be repeated (the seed is in the failure message). */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Received {
  type: number;
  id: number;
  payload: Uint8Array;
}

/** A sanitized native worker on a unix-socket channel this test holds, as a host would. */
interface Worker {
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

/** Starts `command` (the sanitized worker, or a wrapper that execs a worker) as a worker of this test's. */
async function startWorker(command: string[] = [ASAN_WORKER]): Promise<Worker> {
  assert.ok(existsSync(ASAN_WORKER), `${ASAN_WORKER} exists (npm run build:native)`);
  const pending = await listenForWorker();
  const child = nodeSpawn(command[0], command.slice(1), {
    stdio: ["pipe", "ignore", "pipe"],
    env: { ...process.env, ...SANITIZER_ENV, SPAWNPOOL_CHANNEL: "unix" },
  });
  let stderr = "";
  child.stderr!.setEncoding("utf8").on("data", (s: string) => (stderr += s));
  const exited = new Promise<{ code: number | null; signal: string | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal }))
  );
  const channel = await handshake(pending, {
    exited,
    sendLine: (line) => new Promise((resolve) => child.stdin!.end(line, () => resolve())),
    kill: () => child.kill("SIGKILL"),
  });
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
async function expectExit(worker: Worker, codes: number[], what: string): Promise<void> {
  const { code, signal } = await withTimeout(worker.exited, 20_000, `${what}: the worker did not exit`);
  assert.doesNotMatch(worker.stderr(), SANITIZER_REPORT, `${what}: sanitizer report`);
  assert.equal(signal, null, `${what}: killed by ${signal}\n${worker.stderr()}`);
  assert.ok(codes.includes(code!), `${what}: exit code ${code}, expected ${codes}\n${worker.stderr()}`);
}

/** Runs `body` on a worker started from `command`, then closes its channel: the worker must exit 0, clean. */
async function withWorker(what: string, command: string[] | undefined, body: (worker: Worker) => Promise<void> | void) {
  const worker = await startWorker(command);
  try {
    await body(worker);
    worker.channel.close();
    await expectExit(worker, [0], what);
  } finally {
    worker.kill();
  }
}

/** Waits until every request of `ids` got its Exit or SpawnError frame; returns those frames by id. */
async function settled(worker: Worker, ids: number[], ms: number, what: string): Promise<Map<number, Received>> {
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
function exitCode(f: Received | undefined, what: string): number | null {
  assert.equal(f?.type, Frame.Exit, `${what}: ${f && text(f.payload)}`);
  return decodeExit(f!.payload).info.code;
}

/** The peak resident memory of a process, in bytes. */
function peakMemory(pid: number): number {
  return Number(/VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}

function openFdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

const request = (overrides: Partial<SpawnRequest>): SpawnRequest => ({
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
const spawnFrame = (id: number, overrides: Partial<SpawnRequest>) =>
  frame(Frame.Spawn, id, encodeJson(request(overrides)));

const COMMANDS: string[][] = [
  ["true"],
  ["echo", "fuzz"],
  ["cat"],
  ["sh", "-c", "echo out; echo err >&2"],
  ["head", "-c", "200000", "/dev/zero"],
  ["spawnpool-no-such-program"],
  ["with\0nul"],
  ["/etc/passwd/x"],
];
const MODES = ["piped", "inherit", "null"] as const;
/** Signals a fuzzed kill may send: none that stops a command (it would never exit). */
const KILLS = ["SIGTERM", "-SIGKILL", "SIGKILL", "-SIGTERM", "SIGUSR1", "SIGCONT", "SIGNOPE", "", "-", "\u00ff\u0000"];

/** A random valid spawn request: always with a timeout, so every command ends. */
function randomRequest(rand: () => number): SpawnRequest {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(rand() * items.length)];
  const [cmd, ...args] = pick(COMMANDS);
  const buffered = rand() < 0.5;
  const out = request({
    cmd,
    args,
    stdin: pick(MODES),
    stdout: rand() < 0.8 ? "piped" : "null",
    stderr: rand() < 0.8 ? "piped" : "null",
    buffered,
    killSignal: pick(["SIGTERM", "SIGKILL", "SIGINT", "SIGNOPE"]),
    forceKillAfterDelay: Math.floor(rand() * 50),
    window: 1 + Math.floor(rand() * 70_000),
    timeout: 5 + Math.floor(rand() * 80),
    group: rand() < 0.5,
  });
  if (buffered && rand() < 0.5) out.maxBuffer = Math.floor(rand() * 100_000);
  if (rand() < 0.2) out.env = { FUZZ: "1", "ünï": "😀" };
  if (rand() < 0.1) out.clearEnv = true;
  if (rand() < 0.1) out.cwd = rand() < 0.5 ? "/" : "/spawnpool-no-such-dir";
  if (rand() < 0.05) out.detached = true;
  if (rand() < 0.05) out.argv0 = "renamed";
  return out;
}

/**
 * One phase of frames the protocol allows (the worker must answer all of them and stay up): spawns with fresh
 * ids, and stdin, kills, credits and releases aimed at them or at ids that are done or never existed. Returns the
 * number of frames sent and the ids spawned.
 */
function survivableFrames(rand: () => number, firstId: number, count: number): { frames: Uint8Array[]; ids: number[] } {
  const frames: Uint8Array[] = [];
  const ids: number[] = [];
  let next = firstId;
  const target = () => (ids.length > 0 && rand() < 0.9 ? ids[Math.floor(rand() * ids.length)] : 1_000_000 + next);
  for (let i = 0; i < count; i++) {
    const roll = rand();
    if (roll < 0.04 || ids.length === 0) {
      ids.push(next);
      frames.push(frame(Frame.Spawn, next++, encodeJson(randomRequest(rand))));
    } else if (roll < 0.4) {
      const bytes = new Uint8Array(Math.floor(rand() * 2048)).map(() => Math.floor(rand() * 256));
      frames.push(frame(Frame.Stdin, target(), bytes));
    } else if (roll < 0.45) {
      frames.push(frame(Frame.StdinEnd, target(), new Uint8Array(0)));
    } else if (roll < 0.55) {
      frames.push(frame(Frame.Kill, target(), new TextEncoder().encode(KILLS[Math.floor(rand() * KILLS.length)])));
    } else if (roll < 0.9) {
      frames.push(frame(Frame.Credit, target(), encodeCredit(rand() < 0.5 ? 1 : 2, Math.floor(rand() * 2 ** 32))));
    } else {
      frames.push(frame(Frame.Release, target(), new Uint8Array([rand() < 0.5 ? 1 : 2])));
    }
  }
  // Whatever still runs is ended: stdin closed, the group killed.
  for (const id of ids) {
    frames.push(frame(Frame.StdinEnd, id, new Uint8Array(0)));
    frames.push(frame(Frame.Kill, id, new TextEncoder().encode("-SIGKILL")));
  }
  return { frames, ids };
}

/** Sends frames in batches of random sizes, yielding between them so the worker's answers are read. */
async function sendAll(worker: Worker, frames: Uint8Array[], rand: () => number): Promise<void> {
  for (let i = 0; i < frames.length;) {
    const n = 1 + Math.floor(rand() * 64);
    worker.channel.write(frames.slice(i, i + n));
    i += n;
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}

/** A host's side of flow control: every output frame is credited at once. */
function creditOutput(worker: Worker): void {
  worker.onFrame = ({ type, id, payload }) => {
    if (type === Frame.Stdout || type === Frame.Stderr) {
      worker.channel.write([frame(Frame.Credit, id, encodeCredit(type === Frame.Stdout ? 1 : 2, payload.byteLength))]);
    }
  };
}

/**
 * Runs `body` on a fresh sanitized worker whose output is credited as a host would, with a generator seeded from
 * SPAWNPOOL_FUZZ_SEED (or the clock) and `index`; the worker is killed whatever happens.
 */
async function withFuzzWorker(
  index: number,
  body: (worker: Worker, rand: () => number, seed: number) => Promise<void>,
): Promise<void> {
  const seed = (Number(process.env.SPAWNPOOL_FUZZ_SEED ?? Date.now()) + index * 7919) >>> 0;
  const worker = await startWorker();
  try {
    creditOutput(worker);
    await body(worker, random(seed), seed);
  } finally {
    worker.kill();
  }
}

/** What a pool of native workers must do, against real commands; `scratch` is a directory to write a script in. */
async function poolScenarios(pool: InstanceType<typeof Pool>, scratch: string): Promise<void> {
  await pool.ready();
  assert.equal(pool.stats().runtime, "native");
  const echo = await pool.command("echo", { args: ["hi", "ünï😀"] }).output();
  assert.equal(text(echo.stdout), "hi ünï😀\n");
  const input = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 13) & 0xff);
  const cat = pool.spawn(["cat"], { stdin: input });
  assert.deepEqual(new Uint8Array(await new Response(cat.stdout).arrayBuffer()), input);
  const env = await pool.command("/usr/bin/env", { clearEnv: true, env: { ONLY: "this" } }).output();
  assert.equal(text(env.stdout), "ONLY=this\n");
  const streamed = pool.spawn(["head", "-c", "20000000", "/dev/zero"]);
  assert.equal((await new Response(streamed.stdout).arrayBuffer()).byteLength, 20_000_000);
  await assert.rejects(
    pool.command("sleep", { args: ["30"], timeout: 50 }).output(),
    (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_TIMEOUT",
  );
  await assert.rejects(
    pool.command("yes", { maxBuffer: 10_000 }).output(),
    (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_MAX_BUFFER",
  );
  // Relative programs and cwds: the host's own check leaves them to the worker, whose failures these are.
  for (
    const [cmd, cwd, code] of [["./spawnpool-no-such-program", undefined, "ENOENT"], [
      "pwd",
      "spawnpool-no-such-dir",
      "ENOENT",
    ], ["passwd/x", "/etc", "ENOTDIR"]] as const
  ) {
    const error = await pool.spawn([cmd], { cwd }).exited.then(() => null, (e) => e);
    assert.ok(error instanceof SpawnError && error.code === code, `${cmd}: ${error}`);
  }
  // A script without "#!" runs in the shell, as with Node's spawn (execvp).
  const script = join(scratch, "no-shebang");
  writeFileSync(script, "echo from a script without a shebang\n", { mode: 0o755 });
  assert.equal(text((await pool.command(script).output()).stdout), "from a script without a shebang\n");
  const killed = pool.spawn(["sleep", "30"]);
  await killed.spawned;
  killed.kill("SIGKILL");
  assert.equal(await killed.exited, 137);
  // Many children at once, each reaped.
  const many = await Promise.all(
    Array.from({ length: 40 }, (_, i) => pool.command("echo", { args: [`${i}`] }).output()),
  );
  assert.deepEqual(many.map((out) => text(out.stdout)), Array.from({ length: 40 }, (_, i) => `${i}\n`));
  // A grandchild holding stdout does not hold the request (the 200 ms grace).
  const held = await pool.command("sh", { args: ["-c", "sleep 30 & echo $!"] }).output();
  process.kill(Number(text(held.stdout).trim()), "SIGKILL");
}

describe(`${HOST} host, native worker under ASan and UBSan`, () => {
  it("runs pool scenarios without a sanitizer report or a leak", async () => {
    const logs = mkdtempSync(join(tmpdir(), "spawnpool-asan-"));
    const saved = { ASAN_OPTIONS: process.env.ASAN_OPTIONS, UBSAN_OPTIONS: process.env.UBSAN_OPTIONS };
    // The workers inherit the host's environment: reports go to files named after the worker's pid.
    process.env.ASAN_OPTIONS = `${SANITIZER_ENV.ASAN_OPTIONS}:log_path=${join(logs, "asan")}`;
    process.env.UBSAN_OPTIONS = `${SANITIZER_ENV.UBSAN_OPTIONS}:log_path=${join(logs, "ubsan")}`;
    const pool = new Pool({ size: 2, runtime: "native", execPath: ASAN_WORKER });
    try {
      await poolScenarios(pool, logs);
    } finally {
      process.env.ASAN_OPTIONS = saved.ASAN_OPTIONS ?? "";
      process.env.UBSAN_OPTIONS = saved.UBSAN_OPTIONS ?? "";
      await pool.close();
    }
    const reports = readdirSync(logs).filter((name) => name !== "no-shebang").map((name) =>
      readFileSync(join(logs, name), "utf8")
    );
    rmSync(logs, { recursive: true, force: true });
    assert.deepEqual(reports, [], "sanitizer reports");
  });

  it("the poll() and SIGCHLD build (what systems without epoll and pidfd run) passes the same scenarios", async () => {
    assert.ok(existsSync(POLL_WORKER), `${POLL_WORKER} exists (npm run build:native)`);
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-poll-"));
    const pool = new Pool({ size: 2, runtime: "native", execPath: POLL_WORKER });
    try {
      await poolScenarios(pool, scratch);
    } finally {
      await pool.close();
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it(`${HEAVY ? "100,000+" : "several thousand"} random frames: every request answered, no fd or child left over`, async () => {
    const phases = HEAVY ? 4 : 2;
    const perPhase = HEAVY ? 9_000 : 1_500;
    let sent = 0;
    for (let w = 0; w < (HEAVY ? 3 : 1); w++) {
      await withFuzzWorker(w, async (worker, rand, seed) => {
        const fds: number[] = [];
        let firstId = 1;
        for (let phase = 0; phase < phases; phase++) {
          const { frames, ids } = survivableFrames(rand, firstId, perPhase);
          firstId += ids.length;
          const answered = new Set<number>();
          const all = new Promise<void>((resolve) => {
            const credit = worker.onFrame;
            worker.onFrame = (received) => {
              credit(received);
              if (received.type === Frame.Exit || received.type === Frame.SpawnError) answered.add(received.id);
              if (ids.every((id) => answered.has(id))) resolve();
            };
          });
          await sendAll(worker, frames, rand);
          sent += frames.length;
          await withTimeout(
            Promise.race([
              all,
              worker.closed.then(() => Promise.reject(new Error(`worker closed: ${worker.stderr()}`))),
            ]),
            30_000,
            `seed ${seed}, phase ${phase}: ${ids.filter((id) => !answered.has(id)).length} of ${ids.length} unanswered`,
          ).catch((error) => {
            for (const id of ids.filter((id) => !answered.has(id))) {
              console.log(`unanswered ${id}: frames ${worker.received.filter((f) => f.id === id).map((f) => f.type)}`);
            }
            throw error;
          });
          creditOutput(worker);
          // Every command has exited and been reaped: the worker has no child, zombie or not.
          for (let i = 0; i < 100 && childPids(worker.pid).length > 0; i++) await new Promise((r) => setTimeout(r, 10));
          assert.deepEqual(childPids(worker.pid), [], `seed ${seed}: children left after phase ${phase}`);
          fds.push(openFdCount(worker.pid));
        }
        assert.ok(fds.every((n) => n <= fds[0]), `seed ${seed}: open fds per phase ${fds}`);
        // The hello came first, and the run exercised every kind of answer.
        assert.equal(worker.received[0].type, Frame.Hello);
        assert.equal(decodeJson(worker.received[0].payload).runtime, "native");
        for (const type of [Frame.Spawned, Frame.SpawnError, Frame.Stdout, Frame.Stderr, Frame.StdinAck, Frame.Exit]) {
          assert.ok((worker.counts.get(type) ?? 0) > 0, `seed ${seed}: no frame of type ${type}`);
        }
        if (w === 0) console.log(`fuzz worker frames by type: ${JSON.stringify([...worker.counts])}`);
        worker.channel.close();
        await expectExit(worker, [0], `seed ${seed}`);
      });
    }
    assert.ok(sent >= (HEAVY ? 100_000 : 3_000), `${sent} frames sent`);
  });

  it(`mutated frames: the worker answers or exits with 0 or 1, never crashes (${HEAVY ? 150 : 15} connections)`, async () => {
    const connections = HEAVY ? 150 : 15;
    let sent = 0;
    for (let c = 0; c < connections; c++) {
      await withFuzzWorker(c, async (worker, rand, seed) => {
        const { frames } = survivableFrames(rand, 1, 200);
        const mutated = frames.map((bytes) => {
          if (rand() > 0.05) return bytes;
          const copy = new Uint8Array(bytes);
          const flips = 1 + Math.floor(rand() * 4);
          for (let i = 0; i < flips; i++) copy[Math.floor(rand() * copy.byteLength)] = Math.floor(rand() * 256);
          return rand() < 0.2 ? copy.subarray(0, Math.floor(rand() * copy.byteLength)) : copy;
        });
        await sendAll(worker, mutated, rand);
        sent += mutated.length;
        await Promise.race([worker.closed, new Promise((r) => setTimeout(r, 20))]);
        worker.channel.close();
        await expectExit(worker, [0, 1], `seed ${seed}`);
      });
    }
    assert.ok(sent >= connections * 200);
  });

  it("a frame over the 64 MiB limit, a malformed request and an unknown type each close the channel", async () => {
    const cases: Array<[string, Uint8Array, RegExp]> = [
      [
        "oversized",
        (() => {
          const head = frame(Frame.Stdin, 1, new Uint8Array(0));
          new DataView(head.buffer).setUint32(0, MAX_PAYLOAD_BYTES + 1);
          return head;
        })(),
        /exceeds the 67108864-byte limit/,
      ],
      ["not JSON", frame(Frame.Spawn, 1, new TextEncoder().encode("{nope")), /not valid JSON/],
      ["not an object", frame(Frame.Spawn, 1, new TextEncoder().encode("[1]")), /not a JSON object/],
      ["invalid UTF-8", frame(Frame.Spawn, 1, new Uint8Array([0x22, 0xff, 0x22])), /not valid JSON/],
      ["malformed", spawnFrame(1, { window: 0 }), /Spawn request is malformed/],
      ["no group", frame(Frame.Spawn, 1, encodeJson({ ...request({}), group: undefined })), /malformed/],
      ["id 0", spawnFrame(0, {}), /already in use/],
      ["unknown type", frame(99, 7, new Uint8Array(3)), /Unknown frame type 99/],
      [
        "unknown type, refused before its payload comes",
        (() => {
          const head = frame(99, 7, new Uint8Array(0));
          new DataView(head.buffer).setUint32(0, 60 * 1024 * 1024);
          return head;
        })(),
        /Unknown frame type 99/,
      ],
      [
        "credit without a stream",
        new Uint8Array([
          ...spawnFrame(5, { cmd: "sleep", args: ["30"] }),
          ...frame(Frame.Credit, 5, new Uint8Array([3])),
        ]),
        /names no stream/,
      ],
    ];
    for (const [what, bytes, message] of cases) {
      const worker = await startWorker();
      worker.channel.write([bytes]);
      await expectExit(worker, [1], what);
      assert.match(worker.stderr(), message, what);
    }
  });

  it("a spawn with NUL in an argument fails with EINVAL, and the worker goes on", async () => {
    const worker = await startWorker();
    const answers = new Promise<void>((resolve) => {
      worker.onFrame = ({ id, type }) => {
        if (id === 2 && type === Frame.Exit) resolve();
      };
    });
    worker.channel.write([spawnFrame(1, { args: ["a\0b"] }), spawnFrame(2, { cmd: "echo", args: ["after"] })]);
    await withTimeout(answers, 10_000, "no answer");
    const [error] = worker.received.filter((f) => f.type === Frame.SpawnError);
    assert.deepEqual(decodeJson(error.payload), { code: "EINVAL", errno: -22, message: "spawn true EINVAL" });
    const exit = decodeExit(worker.received.find((f) => f.type === Frame.Exit)!.payload);
    assert.deepEqual([exit.info, text(exit.stdout)], [{ code: 0, signal: null, reason: null }, "after\n"]);
    worker.channel.close();
    await expectExit(worker, [0], "after EINVAL");
  });
  it("with too few fds for a pidfd each (EMFILE), every command is still reaped: SIGCHLD is the backstop", async () => {
    await withWorker(
      "60 commands at 40 fds",
      ["sh", "-c", 'ulimit -n 40 && exec "$0"', ASAN_WORKER],
      async (worker) => {
        const ids = Array.from({ length: 60 }, (_, i) => i + 1);
        const null3 = { stdin: "null", stdout: "null", stderr: "null" } as const;
        worker.channel.write(ids.map((id) => spawnFrame(id, { cmd: "sleep", args: ["0.3"], ...null3 })));
        const answers = await settled(worker, ids, 20_000, "60 commands at 40 fds");
        for (const id of ids) assert.equal(exitCode(answers.get(id), `request ${id}`), 0);
      },
    );
  });

  it("a low soft limit on fds is raised to the hard one", async () => {
    await withWorker("raised fd limit", ["sh", "-c", 'ulimit -S -n 40 && exec "$0"', ASAN_WORKER], (worker) => {
      const [soft, hard] = /Max open files\s+(\d+)\s+(\d+)/.exec(readFileSync(`/proc/${worker.pid}/limits`, "utf8"))!
        .slice(1);
      assert.equal(soft, hard);
    });
  });

  it("an inherited ignored SIGCHLD and blocked signals lose no exit code (epoll and poll builds)", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-sigchld-"));
    try {
      // What a careless parent can leave: SIGCHLD ignored (the kernel would reap the commands), signals blocked.
      const wrapper = join(scratch, "ignore-sigchld");
      writeFileSync(
        `${wrapper}.c`,
        `#include <signal.h>
#include <unistd.h>
int main(int argc, char **argv) {
  (void)argc;
  signal(SIGCHLD, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, 0);
  execv(argv[1], argv + 1);
  return 127;
}
`,
      );
      execFileSync(process.env.CC || "cc", ["-o", wrapper, `${wrapper}.c`]);
      for (const path of [ASAN_WORKER, POLL_WORKER]) {
        await withWorker(path, [wrapper, path], async (worker) => {
          worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", "exit 3"] })]);
          const answers = await settled(worker, [1], 10_000, path);
          assert.equal(exitCode(answers.get(1), path), 3, path);
        });
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("relative PATH entries (an empty one too) are looked up in the request's cwd, where the command runs", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-path-"));
    try {
      await withWorker("relative PATH", undefined, async (worker) => {
        mkdirSync(join(scratch, "bin"));
        writeFileSync(join(scratch, "bin", "in-bin"), "#!/bin/sh\necho in-bin\n", { mode: 0o755 });
        writeFileSync(join(scratch, "in-cwd"), "#!/bin/sh\necho in-cwd\n", { mode: 0o755 });
        const env = { PATH: "bin::/usr/bin:/bin" };
        worker.channel.write([
          spawnFrame(1, { cmd: "in-bin", cwd: scratch, env }),
          spawnFrame(2, { cmd: "in-cwd", cwd: scratch, env }),
        ]);
        const answers = await settled(worker, [1, 2], 10_000, "relative PATH");
        assert.equal(exitCode(answers.get(1), "in-bin"), 0);
        assert.equal(text(decodeExit(answers.get(1)!.payload).stdout), "in-bin\n");
        assert.equal(exitCode(answers.get(2), "in-cwd"), 0);
        assert.equal(text(decodeExit(answers.get(2)!.payload).stdout), "in-cwd\n");
      });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("a SpawnError quotes a few KiB of the program's name at most, with short escapes", async () => {
    await withWorker("long names", undefined, async (worker) => {
      worker.channel.write([
        spawnFrame(1, { cmd: "\u0001".repeat(1_000_000) }),
        spawnFrame(2, { cmd: `${"\n".repeat(100)}x` }),
      ]);
      const answers = await settled(worker, [1, 2], 20_000, "long names");
      const long = answers.get(1)!;
      assert.equal(long.type, Frame.SpawnError);
      assert.ok(long.payload.byteLength < 32 * 1024, `${long.payload.byteLength} bytes`);
      assert.equal((decodeJson(long.payload) as { code: string }).code, "ENOENT");
      const lines = answers.get(2)!;
      assert.equal(lines.type, Frame.SpawnError);
      assert.ok(lines.payload.byteLength < 300, `${lines.payload.byteLength} bytes`);
      assert.equal((decodeJson(lines.payload) as { message: string }).message, `spawn ${"\n".repeat(100)}x ENOENT`);
    });
  });

  it("60,000 variables in env merge into the environment in linear time", async () => {
    const env = Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`V${i}`, `${i}`]));
    await withWorker("60,000 variables", undefined, async (worker) => {
      const started = Date.now();
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", 'echo "$V0 $V59999"'], env })]);
      const answers = await settled(worker, [1], 30_000, "60,000 variables");
      const elapsed = Date.now() - started;
      assert.equal(exitCode(answers.get(1), "60,000 variables"), 0);
      assert.equal(text(decodeExit(answers.get(1)!.payload).stdout), "0 59999\n");
      assert.ok(elapsed < 3000, `${elapsed} ms`);
    });
  });

  it("a request of millions of values fails alone with E2BIG, parsed in memory bounded by the exec limit", async () => {
    await withWorker("millions of values", [RELEASE_WORKER], async (worker) => {
      worker.channel.write([
        spawnFrame(1, { args: new Array(3_000_000).fill("") }),
        spawnFrame(2, { cmd: "echo", args: ["after"] }),
      ]);
      const answers = await settled(worker, [1, 2], 30_000, "millions of values");
      assert.equal(answers.get(1)!.type, Frame.SpawnError);
      assert.equal((decodeJson(answers.get(1)!.payload) as { code: string }).code, "E2BIG");
      assert.equal(text(decodeExit(answers.get(2)!.payload).stdout), "after\n");
      const peak = peakMemory(worker.pid);
      assert.ok(peak < 80 * 1024 * 1024, `peak ${peak} bytes`);
    });
  });

  it("buffered output is not read while the host does not read the channel: the worker stays small", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-unread-"));
    // A host that reads nothing: the connection stays paused (pauseOnConnect) until the output is measured.
    const server = createServer({ pauseOnConnect: true });
    const path = join(scratch, "channel");
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const connected = new Promise<Socket>((resolve) => server.once("connection", resolve));
    const child = nodeSpawn(RELEASE_WORKER, [], {
      stdio: ["pipe", "ignore", "inherit"],
      env: { ...process.env, SPAWNPOOL_CHANNEL: "unix" },
    });
    try {
      child.stdin!.end(`${JSON.stringify({ path, secret: "00" })}\n`);
      const socket = await withTimeout(connected, 10_000, "the worker did not connect");
      server.close();
      const bytes = 100_000_000;
      socket.write(spawnFrame(1, { cmd: "head", args: ["-c", `${bytes}`, "/dev/zero"], stderr: "null" }));
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const peak = peakMemory(child.pid!);
      // Then read: every byte arrives, and the command exits 0.
      let received = 0;
      const exited = new Promise<number | null>((resolve) => {
        let secret = true;
        const decoder = new FrameDecoder((type, _id, payload) => {
          if (type === Frame.Stdout) received += payload.byteLength;
          if (type === Frame.Exit) {
            const exit = decodeExit(payload);
            received += exit.stdout.byteLength;
            resolve(exit.info.code);
          }
        });
        socket.on("data", (chunk: Uint8Array) => {
          if (secret) {
            secret = false;
            chunk = chunk.subarray(1);
          }
          decoder.push(chunk);
        });
        socket.resume();
      });
      assert.equal(await withTimeout(exited, 30_000, "no exit"), 0);
      assert.equal(received, bytes);
      assert.ok(peak < 48 * 1024 * 1024, `peak ${peak} bytes while the channel was not read`);
      socket.end();
    } finally {
      child.kill("SIGKILL");
      server.close();
      rmSync(scratch, { recursive: true, force: true });
    }
  });
  it("closing the channel kills the group of a command that exited while a grandchild holds its stdout", async () => {
    const worker = await startWorker();
    let grandchild = 0;
    try {
      creditOutput(worker);
      // The grandchild keeps writing, so the quiet period that would release the stream never comes; it ignores
      // SIGPIPE, so the worker's end of the pipe closing does not end it.
      const script = `(trap '' PIPE; while :; do echo tick; sleep 0.05; done) & echo "pid $!"`;
      const exited = new Promise<void>((resolve) => {
        const credit = worker.onFrame;
        worker.onFrame = (f) => {
          credit(f);
          if (f.type === Frame.Exited) resolve();
        };
      });
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", script], buffered: false, group: true })]);
      await withTimeout(exited, 10_000, "no Exited");
      const output = worker.received.filter((f) => f.type === Frame.Stdout).map((f) => text(f.payload)).join("");
      grandchild = Number(/pid (\d+)\n/.exec(output)![1]);
      assert.ok(alive(grandchild));
      worker.channel.close();
      await expectExit(worker, [0], "closed with a grandchild writing");
      const deadline = Date.now() + 1000;
      while (alive(grandchild) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.ok(!alive(grandchild), "the grandchild outlived the worker");
    } finally {
      worker.kill();
      if (grandchild > 0 && alive(grandchild)) process.kill(grandchild, "SIGKILL");
    }
  });
  it("commands get only fds 0-2: not the worker's inherited fds, nor /dev/null's on the vfork path", async () => {
    // The wrapper leaves fd 7 open, not close-on-exec, as a careless parent could.
    await withWorker("fds", ["sh", "-c", 'exec 7</dev/null; exec "$0"', ASAN_WORKER], async (worker) => {
      // The shell's fds, listed by its child (a glob or a $(...) would open one in the shell).
      const list: Partial<SpawnRequest> = { cmd: "sh", args: ["-c", "ls /proc/$$/fd"], stdin: "null" };
      // A uid (its own) takes the vfork path, as a cwd does where posix_spawn cannot change directory.
      worker.channel.write([spawnFrame(1, list), spawnFrame(2, { ...list, uid: process.getuid!() })]);
      const answers = await settled(worker, [1, 2], 10_000, "fds");
      for (const id of [1, 2]) {
        assert.equal(exitCode(answers.get(id), `request ${id}`), 0);
        assert.equal(text(decodeExit(answers.get(id)!.payload).stdout), "0\n1\n2\n", `request ${id}`);
      }
    });
  });

  it("a command ended by a real-time signal exits with 128 + its number, as in a shell", async () => {
    await withWorker("real-time signal", undefined, async (worker) => {
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", "kill -36 $$"] })]);
      const answers = await settled(worker, [1], 10_000, "real-time signal");
      assert.deepEqual(decodeExit(answers.get(1)!.payload).info, { code: 128 + 36, signal: null, reason: null });
    });
  });
});

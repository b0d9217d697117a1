/**
 * The native worker under AddressSanitizer and UndefinedBehaviorSanitizer against what a host must not be trusted
 * with: a fuzz run of random and mutated frames over its real channel, and frames past the protocol's limits. A
 * sanitizer report, a leak (LeakSanitizer runs at exit), a crash, a hang or an fd that stays open fails the test.
 *
 * The heavy fuzz run (over 100,000 frames) runs under Node; Deno and Bun run a smaller one of the same code.
 *
 * @module
 */

import assert from "node:assert/strict";
import { readdirSync } from "node:fs";
import process from "node:process";
import { describe, it } from "node:test";
import {
  decodeJson,
  encodeCredit,
  encodeJson,
  encodeRawMode,
  encodeResize,
  Frame,
  MAX_PAYLOAD_BYTES,
  type SpawnRequest,
} from "../core/frame.ts";
import { childPids, frame, HOST, withTimeout } from "./_helpers.ts";
import { creditOutput, expectExit, request, spawnFrame, startWorker, type Worker } from "./_native.ts";

const HEAVY = HOST === "node";

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

function openFdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

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
  if (rand() < 0.5) out.sockets = true; // piped stdio as socketpairs: a released one lingers until its writer stops
  if (rand() < 0.1) {
    // On a terminal of its own: its output is stream 1, stderr "null", never detached.
    out.terminal = { cols: 1 + Math.floor(rand() * 300), rows: 1 + Math.floor(rand() * 100) };
    if (rand() < 0.3) out.terminal.raw = true;
    out.stdout = "piped";
    out.stderr = "null";
    delete out.detached;
  }
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
  // First, two requests no fuzzed frame aims at, so that every seed sees every kind of answer: output on both streams
  // and a stdin write acknowledged (ended by its own StdinEnd), and a spawn failure.
  const fixed = [firstId, firstId + 1];
  const both = request({ cmd: "sh", args: ["-c", "echo out; echo err >&2; cat"], stdin: "piped", buffered: false });
  frames.push(
    frame(Frame.Spawn, fixed[0], encodeJson({ ...both, timeout: 10_000 })),
    frame(Frame.Stdin, fixed[0], new Uint8Array([1])),
    frame(Frame.StdinEnd, fixed[0], new Uint8Array(0)),
    frame(Frame.Spawn, fixed[1], encodeJson(request({ cmd: "spawnpool-no-such-program" }))),
  );
  let next = firstId + fixed.length;
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
    } else if (roll < 0.6) {
      const control = rand() < 0.5
        ? encodeResize(1 + Math.floor(rand() * 65535), 1 + Math.floor(rand() * 65535))
        : encodeRawMode(rand() < 0.5);
      frames.push(frame(Frame.Terminal, target(), control));
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
  return { frames, ids: [...fixed, ...ids] };
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

describe(`${HOST} host, native worker under ASan and UBSan: random, mutated and malformed frames`, () => {
  it(`${HEAVY ? "100,000+" : "several thousand"} random frames: every request answered, no fd or child left over`, async () => {
    const phases = HEAVY ? 4 : 2;
    const perPhase = HEAVY ? 9_000 : 1_500;
    let sent = 0;
    for (let w = 0; w < (HEAVY ? 3 : 1); w++) {
      await withFuzzWorker(w, async (worker, rand, seed) => {
        // What the worker holds once it said hello (its channel, loop and signal pipe): every phase must end with no more.
        for (let i = 0; i < 500 && worker.received.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
        assert.equal(worker.received[0]?.type, Frame.Hello, `seed ${seed}: no hello`);
        const atHello = openFdCount(worker.pid);
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
        assert.ok(
          fds.every((n) => n <= atHello),
          `seed ${seed}: open fds at the hello ${atHello}, after each phase ${fds}`,
        );
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
});

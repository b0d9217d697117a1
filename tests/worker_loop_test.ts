/**
 * The JS worker's loop (worker/serve.ts) against a fake adapter over an in-memory channel: output a runtime reads in
 * one huge piece, a spawn the adapter fails, garbage on the channel, and request ids.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { describe, it } from "node:test";
import {
  type Adapter,
  type ChildEvents,
  ChildStartError,
  type SpawnedChild,
  type WorkerProcess,
} from "../core/adapter.ts";
import {
  concatBytes,
  decodeExit,
  decodeJson,
  encodeCredit,
  encodeExit,
  encodeJson,
  Frame,
  MAX_PAYLOAD_BYTES,
  PROTOCOL_VERSION,
  type SpawnRequest,
  type WireSpawnFailure,
} from "../core/frame.ts";
import type { RequestSink } from "../core/request_sink.ts";
import { WorkerHandle } from "../core/worker_handle.ts";
import { SpawnPoolError } from "../mod.ts";
import { serve } from "../worker/serve.ts";
import { frame } from "./_helpers.ts";
import { random, randomBytes } from "./_fuzz.ts";
import { memoryChannel, type Sent } from "./_memory_channel.ts";

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

/** A worker loop on a memory channel whose adapter "spawns" by handing the test the child's event sink. */
function fakeWorker() {
  const { channel, push, sent } = memoryChannel();
  const paused: string[] = [];
  let events: ChildEvents | undefined;
  const child: SpawnedChild = {
    pid: 4242,
    write: () => Promise.resolve(true),
    closeStdin: () => {},
    kill: () => {},
    pause: (fd) => void paused.push(`pause ${fd}`),
    resume: (fd) => void paused.push(`resume ${fd}`),
    release: () => {},
  };
  const adapter = {
    runtime: "node",
    spawn: (_request: SpawnRequest, sink: ChildEvents) => {
      events = sink;
      return Promise.resolve(child);
    },
    onTerminate: () => {},
    pid: () => 1,
    exit: (code: number) => assert.fail(`the worker stopped (${code})`),
  } as unknown as Adapter;
  serve(adapter, channel);
  return {
    sent,
    paused,
    /** Sends a spawn request and resolves with the child's event sink once the worker has "spawned" it. */
    async spawn(id: number, request: Partial<SpawnRequest>): Promise<ChildEvents> {
      const full: SpawnRequest = {
        cmd: "fake",
        args: [],
        stdin: "null",
        stdout: "piped",
        stderr: "null",
        buffered: false,
        killSignal: "SIGTERM",
        forceKillAfterDelay: 5000,
        window: 1024 * 1024,
        group: false,
        ...request,
      };
      push(frame(Frame.Spawn, id, encodeJson(full)));
      await settle();
      return events!;
    },
    credit(id: number, bytes: number): void {
      push(frame(Frame.Credit, id, encodeCredit(1, bytes)));
    },
    release(id: number): void {
      push(frame(Frame.Release, id, new Uint8Array([1])));
    },
  };
}

/** Bytes with a position-dependent pattern, so a lost, repeated or reordered piece shows. */
function patterned(length: number): Uint8Array {
  const bytes = new Uint8Array(length);
  for (let i = 0; i < length; i++) bytes[i] = (i * 31 + (i >>> 16)) & 0xff;
  return bytes;
}

describe("output a runtime reads in one huge piece", () => {
  // Bun's pipe reader can hand over tens to hundreds of MB in one chunk under load (69-205 MB from `yes` on a
  // busy worker). Sent as one frame it passed the host's 64 MB frame limit, and the host dropped the worker
  // with ERR_PROTOCOL; streamed, it also passed the flow-control window.
  const window = 1024 * 1024;
  const sentBytes = (sent: Sent[], type: number) =>
    sent.filter((f) => f.type === type).reduce((sum, f) => sum + f.payload.byteLength, 0);

  it("streamed: leaves in frames of at most 1 MiB, never further ahead of the host's credit than the window", async () => {
    // A window larger than a frame, so that the 1 MiB bound is not the window's.
    const window = 4 * 1024 * 1024;
    const worker = fakeWorker();
    const events = await worker.spawn(1, { window });
    const output = patterned(3 * window + 12345);
    events.data(1, output.subarray(0, 10)); // a small read first, so the window does not end on a piece's edge
    events.data(1, output.subarray(10));
    await settle();
    const stdout = () => worker.sent.filter((f) => f.type === Frame.Stdout);
    assert.equal(sentBytes(worker.sent, Frame.Stdout), window, "one window's worth before any credit");
    assert.deepEqual(worker.paused, ["pause 1"], "the child's stream waits while output is held");
    events.exit(0, null);
    events.end(1);
    await settle();
    // Once the command exited, a window more goes ahead (what it left in its pipe), and no further.
    assert.equal(sentBytes(worker.sent, Frame.Stdout), 2 * window, "two windows' worth after the exit");
    assert.deepEqual(worker.paused, ["pause 1"], "the child's stream still waits while output is held");
    assert.ok(!worker.sent.some((f) => f.type === Frame.StreamEnd || f.type === Frame.Exit), "the end waits too");
    for (let credits = 1; !worker.sent.some((f) => f.type === Frame.Exit); credits++) {
      assert.ok(credits < 10, "every credit sends more");
      worker.credit(1, window);
      await settle();
      assert.ok(sentBytes(worker.sent, Frame.Stdout) <= (credits + 2) * window, "within the window after each credit");
    }
    assert.ok(stdout().every((f) => f.payload.byteLength <= 1024 * 1024), "frames of at most 1 MiB");
    assert.deepEqual(concatBytes(stdout().map((f) => f.payload)), output, "every byte, once, in order");
    const last = worker.sent.slice(-3).map((f) => f.type);
    assert.deepEqual(last, [Frame.Stdout, Frame.StreamEnd, Frame.Exit], "the end follows the last byte");
  });

  it("streamed: output held past the window when the command exits goes out with its end, and one Exit", async () => {
    const worker = fakeWorker();
    const events = await worker.spawn(1, { window });
    const output = patterned(window + window / 2);
    events.data(1, output);
    events.end(1); // the end comes while output is held
    await settle();
    assert.equal(sentBytes(worker.sent, Frame.Stdout), window, "one window before the exit");
    events.exit(0, null);
    await settle();
    const stdout = worker.sent.filter((f) => f.type === Frame.Stdout);
    assert.deepEqual(concatBytes(stdout.map((f) => f.payload)), output, "the rest, within the window after the exit");
    assert.equal(worker.sent.filter((f) => f.type === Frame.Exit).length, 1, "one Exit");
    assert.deepEqual(worker.sent.slice(-2).map((f) => f.type), [Frame.StreamEnd, Frame.Exit]);
  });

  it("streamed: a release drops the held output; the request completes and the stream stays paused", async () => {
    const worker = fakeWorker();
    const events = await worker.spawn(1, { window });
    events.data(1, patterned(3 * window));
    await settle();
    worker.release(1);
    worker.credit(1, window); // a credit that crossed the release on the way
    events.exit(141, null);
    await settle();
    assert.equal(sentBytes(worker.sent, Frame.Stdout), window, "nothing held was sent after the release");
    assert.deepEqual(worker.sent.slice(-1).map((f) => f.type), [Frame.Exit]);
    assert.deepEqual(worker.paused, ["pause 1"], "a released stream is never resumed");
  });

  for (const held of [true, false]) {
    const how = held ? "once held output has gone" : "when the last read filled the window exactly";
    it(`streamed: ${how}, a stream a grandchild keeps open is still let go after the exit`, async () => {
      const worker = fakeWorker();
      const events = await worker.spawn(1, { window, stderr: "piped" });
      events.data(1, patterned(held ? 2 * window : window)); // the stream is paused either way
      events.exit(0, null);
      const exitedAt = performance.now();
      events.end(1); // stderr stays open: a grandchild holds it and says nothing
      await settle();
      if (held) worker.credit(1, window);
      await settle();
      const ends = () => worker.sent.filter((f) => f.type === Frame.StreamEnd).map((f) => f.payload[0]);
      // Unless this process was held up past the grace since the exit (a loaded machine).
      if (performance.now() - exitedAt < 150) {
        assert.deepEqual(ends(), [1], "stdout ended, stderr not yet: the worker's grace is 200 ms");
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
      assert.deepEqual(ends(), [1, 2], "stderr let go after the grace");
      assert.equal(worker.sent.at(-1)?.type, Frame.Exit);
    });
  }

  it("buffered: output larger than the host's frame limit arrives whole, in frames of at most 1 MiB", async () => {
    const worker = fakeWorker();
    const events = await worker.spawn(1, { buffered: true });
    const output = patterned(MAX_PAYLOAD_BYTES + 1000 + 3);
    events.data(1, output.subarray(0, 1000)); // a small read first, so pieces do not line up with the flushes
    events.data(1, output.subarray(1000));
    events.exit(0, null);
    events.end(1);
    await settle();
    const exit = worker.sent.find((f) => f.type === Frame.Exit);
    assert.ok(exit, "the request completes");
    const parts = worker.sent.filter((f) => f.type === Frame.Stdout).map((f) => f.payload);
    parts.push(decodeExit(exit.payload).stdout);
    assert.ok(parts.every((part) => part.byteLength <= window), "no frame carries more than 1 MiB of output");
    const joined = concatBytes(parts);
    assert.equal(joined.byteLength, output.byteLength);
    assert.ok(Buffer.from(joined).equals(output), "every byte, once, in order");
  });
});

describe("a spawn the adapter fails", () => {
  // Adapters let their runtime's spawn errors out as they are, thrown or rejected; the worker loop maps them.
  const named = (name: string, message: string) => Object.assign(new Error(message), { name });
  const cases: Array<{ what: string; error: unknown; thrown: boolean; expected: WireSpawnFailure }> = [
    {
      what: "a Deno error with a name and no code (NotFound), thrown",
      error: named("NotFound", "Failed to spawn 'x': entity not found"),
      thrown: true,
      expected: { code: "ENOENT", message: "Failed to spawn 'x': entity not found" },
    },
    {
      what: "a Deno error with a name and no code (PermissionDenied), rejected",
      error: named("PermissionDenied", "denied"),
      thrown: false,
      expected: { code: "EACCES", message: "denied" },
    },
    {
      what: "a Deno error with a name and no code (NotADirectory), thrown",
      error: named("NotADirectory", "not a directory"),
      thrown: true,
      expected: { code: "ENOTDIR", message: "not a directory" },
    },
    {
      what: "a node error with its code and errno, rejected",
      error: Object.assign(new Error("spawn x ENOENT"), { code: "ENOENT", errno: -2 }),
      thrown: false,
      expected: { code: "ENOENT", errno: -2, message: "spawn x ENOENT" },
    },
    {
      what: "an error with both a code and a Deno name, thrown: the code wins; an errno that is no number is dropped",
      error: Object.assign(named("NotFound", "too long"), { code: "E2BIG", errno: "E2BIG" }),
      thrown: true,
      expected: { code: "E2BIG", message: "too long" },
    },
    {
      what: "a ChildStartError, rejected: passed on as it is",
      error: new ChildStartError({ code: "ENOTSUP", errno: -95, message: "argv0 is not supported" }),
      thrown: false,
      expected: { code: "ENOTSUP", errno: -95, message: "argv0 is not supported" },
    },
    {
      what: "an error that names no cause, thrown",
      error: new TypeError("bad"),
      thrown: true,
      expected: { code: "EUNKNOWN", message: "bad" },
    },
    {
      what: "a string, thrown",
      error: "no such thing",
      thrown: true,
      expected: { code: "EUNKNOWN", message: "no such thing" },
    },
  ];
  for (const { what, error, thrown, expected } of cases) {
    it(`${what}: the host hears ${expected.code}, and the worker goes on`, async () => {
      const { channel, push, sent } = memoryChannel();
      const exits: number[] = [];
      let calls = 0;
      const adapter = {
        runtime: "deno",
        spawn: () => {
          if (calls++ > 0) return Promise.resolve({ pid: 4242 } as SpawnedChild);
          if (thrown) throw error;
          return Promise.reject(error);
        },
        onTerminate: () => {},
        pid: () => 1,
        exit: (code: number) => void exits.push(code),
      } as unknown as Adapter;
      serve(adapter, channel);
      const request: SpawnRequest = {
        cmd: "x",
        args: [],
        stdin: "null",
        stdout: "null",
        stderr: "null",
        buffered: true,
        killSignal: "SIGTERM",
        forceKillAfterDelay: 5000,
        window: 1024 * 1024,
        group: false,
      };
      push(frame(Frame.Spawn, 1, encodeJson(request)));
      await settle();
      push(frame(Frame.Spawn, 1, encodeJson(request))); // the failed request let go of its id
      await settle();
      const frames = sent.filter((f) => f.type !== Frame.Hello);
      assert.deepEqual(frames.map((f) => [f.type, f.id]), [[Frame.SpawnError, 1], [Frame.Spawned, 1]]);
      assert.deepEqual(decodeJson(frames[0].payload), expected);
      assert.deepEqual(exits, [], "the worker did not stop");
    });
  }
});

describe("worker loop fed garbage", () => {
  it("stops with exit code 1 on malformed input, without throwing, for 500 random inputs", () => {
    const next = random(0xbad);
    let stops = 0;
    const logged: unknown[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => void logged.push(args); // the worker says why it stops
    try {
      for (let i = 0; i < 500; i++) {
        const exits: number[] = [];
        const adapter = {
          runtime: "node",
          spawn: () => Promise.reject(new Error("no spawns in this test")),
          onTerminate: () => {},
          pid: () => 1,
          exit: (code: number) => void exits.push(code),
        } as unknown as Adapter;
        const { channel, push } = memoryChannel();
        serve(adapter, channel);
        const garbage = randomBytes(next, 9 + Math.floor(next() * 200));
        // Half the inputs start with a plausible header, so the frame's type and payload checks are reached.
        if (i % 2 === 0) garbage.set([0, 0, 0, Math.floor(next() * 16), Math.floor(next() * 30), 0, 0, 0, 1]);
        push(garbage);
        if (exits.length > 0) {
          assert.deepEqual(exits, [1]);
          stops++;
        }
      }
    } finally {
      console.error = consoleError;
    }
    assert.ok(stops > 100, `most garbage stops the worker (${stops})`);
    assert.equal(logged.length, stops, "each stop says why");
  });

  it("a spawn request whose JSON is malformed stops the worker", () => {
    const exits: number[] = [];
    const adapter = { runtime: "node", onTerminate: () => {}, pid: () => 1, exit: (c: number) => void exits.push(c) };
    const { channel, push } = memoryChannel();
    serve(adapter as unknown as Adapter, channel);
    push(frame(Frame.Spawn, 1, encodeJson({ cmd: 5, args: "no" })));
    assert.deepEqual(exits, [1]);
  });
});

describe("request ids", () => {
  it("start over at 1 past the largest, and skip the ids of requests still in flight on the worker", async () => {
    const { channel, push } = memoryChannel();
    const fake: WorkerProcess = {
      pid: 4242,
      channel,
      exited: new Promise(() => {}),
      kill: () => {},
      killOrphans: () => {},
      ref: () => {},
      unref: () => {},
    };
    let closed: SpawnPoolError | undefined;
    const worker = new WorkerHandle(fake, (_, error) => void (closed = error), { maxRequestId: 3 });
    push(frame(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime: "node", pid: 4242 })));
    await worker.ready;
    const completed: number[] = [];
    const sink = (name: number) =>
      ({ pid: 5000 + name, onExit: () => void completed.push(name) }) as unknown as RequestSink; // spawned already
    const exit = (id: number) =>
      push(frame(Frame.Exit, id, concatBytes(encodeExit({ code: 0, signal: null, reason: null }))));
    assert.deepEqual([worker.begin(sink(1), false), worker.begin(sink(2), false), worker.begin(sink(3), false)], [
      1,
      2,
      3,
    ]);
    exit(2);
    assert.equal(worker.begin(sink(4), false), 2, "past the largest, 1 is in flight: the next free id");
    exit(1);
    assert.equal(worker.begin(sink(5), false), 1, "3 is still in flight");
    assert.throws(() => worker.begin(sink(6), false), RangeError, "every id in use is an error, not a loop");
    exit(3);
    exit(2);
    exit(1);
    assert.deepEqual(completed, [2, 1, 3, 4, 5], "each exit reached the request that held its id then");
    assert.equal(closed, undefined, "no frame broke the protocol");
    worker.close(new SpawnPoolError("ERR_POOL_CLOSED", "done"));
  });
});

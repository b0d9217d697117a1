/**
 * The host against a worker that breaks the protocol: random and mutated frames (fuzz), a live rogue worker in each
 * of several ways (the request fails with a clear error, the host neither crashes nor hangs, the next worker
 * serves), and a worker whose whole answer arrives in one read.
 */

import assert from "node:assert/strict";
import { once } from "node:events";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { after, describe, it } from "node:test";
import type { WorkerProcess } from "../core/adapter.ts";
import {
  concatBytes,
  decodeU32,
  encodeExit,
  encodeJson,
  encodeU32,
  Frame,
  FrameDecoder,
  PROTOCOL_VERSION,
} from "../core/frame.ts";
import { WorkerHandle } from "../core/worker_handle.ts";
import { groupIdTaken, orphanKiller, vouchFor } from "../adapters/_process.ts";
import { system } from "../adapters/_system.ts";
import { Execution } from "../core/execution.ts";
import { Pool, SpawnError, SpawnPoolError } from "../mod.ts";
import { childProcessFor } from "../node.ts";
import { alive, fixture, frame, rssBytes, survivors, withTimeout } from "./_helpers.ts";
import { random, randomBytes } from "./_fuzz.ts";
import { memoryChannel } from "./_memory_channel.ts";
import { request } from "./_native.ts";

describe("a host fed random and mutated worker frames (fuzz)", () => {
  it("100,000 frames: nothing escapes the channel, only the worker's children are signalled, every failed request is typed", async () => {
    const next = random(0xf00d);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)];
    // The "worker" is this process, and its commands real children of it, each leading a group of its own: the host's
    // real checks (/proc) run, and the real kill path down to its last step before the system call, where a spy
    // records what would have been signalled.
    const WORKER_PID = process.pid;
    const children = Array.from({ length: 3 }, () => spawn("sleep", ["600"], { detached: true, stdio: "ignore" }));
    const childPids = children.map((child) => child.pid!);
    // A stranger leading a group of its own (its parent, a shell, is gone) and its group's id past 32 bits.
    const stranger = Number(
      execFileSync("sh", ["-c", "setsid sleep 600 > /dev/null 2>&1 & echo $!"], { encoding: "utf8" }),
    );
    const named = [0, 1, WORKER_PID, stranger, 2 ** 32 - stranger, 2 ** 32 - WORKER_PID, ...childPids];
    const kill = system.kill;
    system.kill = (pid: number) => void signalled.push(-pid);
    const exit = (code: number | null, out = new Uint8Array(0)) =>
      concatBytes(encodeExit({ code, signal: null, reason: null }, [out]));
    let frames = 0;
    let protocolErrors = 0;
    // The pids of the Spawned frames the host decoded, found by decoding what it was fed the same way.
    const reported = new Set<number>();
    const signalled: number[] = [];
    const onMirrored = (type: number, _id: number, payload: Uint8Array) => {
      if (type === Frame.Spawned && payload.byteLength >= 4) reported.add(decodeU32(payload));
    };
    let mirror = new FrameDecoder(onMirrored);
    const before = rssBytes(process.pid);
    while (frames < 100_000) {
      const { channel, push } = memoryChannel();
      let closed: SpawnPoolError | undefined;
      const fake: WorkerProcess = {
        pid: WORKER_PID,
        channel,
        exited: new Promise(() => {}),
        kill: () => {},
        vouch: vouchFor(WORKER_PID),
        killOrphans: orphanKiller(false, WORKER_PID),
        ref: () => {},
        unref: () => {},
      };
      const worker = new WorkerHandle(fake, (_, error) => void (closed = error), { maxRequestId: 3 });
      mirror = new FrameDecoder(onMirrored);
      push(frame(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime: "node", pid: WORKER_PID })));
      await worker.ready;
      const scheduler = { submit: (execution: Execution) => execution.assign(worker) };
      const base = {
        cmd: "x",
        args: [] as string[],
        stdin: "piped",
        stdout: "piped",
        stderr: "piped",
        killSignal: "SIGTERM",
        group: false,
      } as const;
      const executions = [
        new Execution(scheduler, { ...base, buffered: true, maxBuffer: 1000, forceKillAfterDelay: 0, window: 4096 }),
        new Execution(scheduler, { ...base, buffered: false, forceKillAfterDelay: 0, window: 4096 }),
        new Execution(scheduler, { ...base, buffered: false, forceKillAfterDelay: 0, window: 64 }),
      ];
      const outcomes = executions.map((execution) => {
        let outcome: unknown = "pending";
        execution.completed.then(() => (outcome = "done"), (error) => (outcome = error));
        return () => outcome;
      });
      // Valid frames for those requests, then mutations of them: a wrong type, id, length or payload.
      const valid = (): Uint8Array => {
        const id = 1 + Math.floor(next() * 3);
        const pid = next() < 0.5 ? pick(named) : 2 + Math.floor(next() * 1_000_000);
        switch (Math.floor(next() * 8)) {
          case 0:
            return frame(Frame.Spawned, id, encodeU32(pid));
          case 1:
            return frame(pick([Frame.Stdout, Frame.Stderr]), id, randomBytes(next, Math.floor(next() * 2000)));
          case 2:
            return frame(Frame.StreamEnd, id, new Uint8Array([pick([1, 2, 0, 3])]));
          case 3:
            return frame(Frame.StdinAck, id, new Uint8Array([pick([0, 1])]));
          case 4:
            return frame(Frame.Exited, id, exit(0));
          case 5:
            return frame(
              Frame.Exit,
              id,
              exit(pick([0, 1, null]), randomBytes(next, Math.floor(next() * 1500)) as Uint8Array<ArrayBuffer>),
            );
          case 6:
            return frame(Frame.SpawnError, id, encodeJson({ code: "ENOENT", message: "nope" }));
          default:
            return frame(Frame.Credit, id, new Uint8Array(5)); // a host -> worker type
        }
      };
      const mutate = (bytes: Uint8Array): Uint8Array => {
        const out = bytes.slice();
        switch (Math.floor(next() * 5)) {
          case 0: // a byte anywhere
            out[Math.floor(next() * out.length)] = Math.floor(next() * 256);
            return out;
          case 1: // the type
            out[4] = Math.floor(next() * 256);
            return out;
          case 2: // the id
            out.set(encodeU32(Math.floor(next() * 8)), 5);
            return out;
          case 3: // the declared length
            out.set(encodeU32(Math.floor(next() * 4096)), 0);
            return out;
          default: // cut short
            return out.subarray(0, Math.floor(next() * out.length));
        }
      };
      for (let i = 0; i < 60 && closed === undefined; i++) {
        const bytes = next() < 0.7 ? valid() : mutate(valid());
        frames++;
        try {
          mirror.push(bytes);
        } catch {
          // the host's decoder meets the same error and closes the channel
        }
        push(bytes); // throws only if the host let an error out of its channel: the test fails then
      }
      for (let hop = 0; hop < 3; hop++) await Promise.resolve(); // the requests' promises settle
      if (closed !== undefined) {
        protocolErrors++;
        assert.equal(closed.code, "ERR_PROTOCOL", closed.message);
        // Every request that was in flight failed, typed (or had completed); none is left pending.
        for (const outcome of outcomes.map((get) => get())) {
          assert.ok(
            outcome === "done" || outcome instanceof SpawnPoolError || outcome instanceof SpawnError,
            String(outcome),
          );
        }
      } else {
        worker.close(new SpawnPoolError("ERR_POOL_CLOSED", "round over"));
      }
    }
    system.kill = kill;
    for (const pid of [...childPids, stranger]) process.kill(pid, "SIGKILL");
    const strangers = signalled.filter((pid) => !childPids.includes(pid) || !reported.has(pid));
    assert.deepEqual([...new Set(strangers)], [], "the host signalled only its worker's children");
    assert.ok(signalled.length > 0, "the worker's children were signalled when their rounds ended");
    assert.ok(protocolErrors > 500, `most rounds meet a broken frame (${protocolErrors})`);
    // Mutated headers declare payloads of up to 64 MiB that never come: one such buffer per channel at a time,
    // garbage once the round's channel is gone, which collectors leave lying for a while (Deno's grew by 266-280 MB
    // here, Bun's by 565 MB unless collected). The bound is for growth without end, as from a worker that ignored
    // the window (2.7 GB and more before flow control was enforced on the host).
    (globalThis as { Bun?: { gc(force: boolean): void } }).Bun?.gc(true);
    const grewMB = (rssBytes(process.pid) - before) / 2 ** 20;
    assert.ok(grewMB < 768, `the host grew by ${grewMB.toFixed(0)} MB`);
  });
});

describe("a Spawned frame's pid, vouched for once per chunk (core/worker_handle.ts)", () => {
  // A worker of this test's: its vouch is a spy (a stranger's pid is named a lie), its orphans recorded.
  async function handle() {
    const { channel, push } = memoryChannel();
    const vouched: number[] = [];
    const orphans: number[] = [];
    let closed: SpawnPoolError | undefined;
    const fake: WorkerProcess = {
      pid: 999_999,
      channel,
      exited: new Promise(() => {}),
      kill: () => {},
      vouch: (pid) => {
        vouched.push(pid);
        return pid === 4242 ? false : "12345";
      },
      killOrphans: (children) => void orphans.push(...children.map((child) => child.pid)),
      ref: () => {},
      unref: () => {},
    };
    const worker = new WorkerHandle(fake, (_, error) => void (closed = error));
    push(frame(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime: "native", pid: 999_999 })));
    await worker.ready;
    const scheduler = { submit: (execution: Execution) => execution.assign(worker) };
    const execution = new Execution(scheduler, request({ cmd: "x", forceKillAfterDelay: 0, window: 4096 }));
    execution.completed.catch(() => {});
    const exit = frame(Frame.Exit, execution.id, concatBytes(encodeExit({ code: 0, signal: null, reason: null }, [])));
    return { push, vouched, orphans, closed: () => closed, execution, exit, worker };
  }

  it("a request whose Exit comes in the same chunk completes without a vouch", async () => {
    const { push, vouched, execution, exit, closed } = await handle();
    push(concatBytes([frame(Frame.Spawned, execution.id, encodeU32(4242)), exit]));
    await execution.completed;
    assert.deepEqual([vouched, execution.pid, closed()], [[], 4242, undefined]);
  });
  it("a Spawned alone in its chunk is vouched for before its request hears of it: a stranger's pid is a lie", async () => {
    const { push, vouched, execution, closed } = await handle();
    push(frame(Frame.Spawned, execution.id, encodeU32(4242)));
    assert.deepEqual(vouched, [4242]);
    assert.equal(execution.pid, undefined, "the request never heard of the stranger");
    assert.equal(closed()?.code, "ERR_PROTOCOL");
    await assert.rejects(execution.completed, (error: SpawnPoolError) => error.code === "ERR_PROTOCOL");
  });
  it("a Spawned followed by output in the same chunk is vouched for before the output is delivered", async () => {
    const { push, vouched, execution, exit, worker, closed } = await handle();
    push(
      concatBytes([
        frame(Frame.Spawned, execution.id, encodeU32(777)),
        frame(Frame.Stdout, execution.id, encodeU32(1)),
      ]),
    );
    assert.deepEqual([vouched, execution.pid, closed()], [[777], 777, undefined]);
    push(exit);
    await execution.completed;
    assert.equal(worker.inFlight, 0);
  });
  it("a Spawned followed by the start of its Exit stays held until the Exit is whole, at every split", async () => {
    const header = 9;
    const length = (await handle()).exit.byteLength;
    let splits = 0;
    for (let at = header; at < length; at++) {
      const { push, vouched, execution, exit, closed } = await handle();
      push(concatBytes([frame(Frame.Spawned, execution.id, encodeU32(4242)), exit.subarray(0, at)]));
      assert.equal(execution.pid, undefined, "held while its Exit arrives");
      push(exit.subarray(at));
      await execution.completed;
      assert.deepEqual([vouched, execution.pid, closed()], [[], 4242, undefined], `split at ${at}`);
      splits++;
    }
    assert.ok(splits > 10);
  });
  it("a Spawned held for its Exit, when the worker dies before the Exit is whole: vouched for, its command killed", async () => {
    const { push, vouched, orphans, execution, exit, worker } = await handle();
    push(concatBytes([frame(Frame.Spawned, execution.id, encodeU32(779)), exit.subarray(0, 12)]));
    assert.deepEqual(vouched, []);
    worker.close(new SpawnPoolError("ERR_WORKER_DIED", "gone"));
    assert.deepEqual([vouched, orphans], [[779], [779]]);
    await assert.rejects(execution.completed, (error: SpawnPoolError) => error.code === "ERR_WORKER_DIED");
  });
  it("a Spawned of another request than the frame the chunk ends in is vouched for at the chunk's end", async () => {
    const { push, vouched, execution, closed } = await handle();
    const partOfAnother = frame(Frame.Exit, execution.id + 1000, new Uint8Array(64)).subarray(0, 20);
    push(concatBytes([frame(Frame.Spawned, execution.id, encodeU32(780)), partOfAnother]));
    assert.deepEqual([vouched, execution.pid, closed()], [[780], 780, undefined]);
  });
  it("a chunk that breaks the protocol after a Spawned: that command is known (vouched) when the worker's orphans die", async () => {
    const { push, vouched, orphans, execution, closed } = await handle();
    push(concatBytes([frame(Frame.Spawned, execution.id, encodeU32(778)), frame(99, execution.id, new Uint8Array(0))]));
    assert.equal(closed()?.code, "ERR_PROTOCOL");
    assert.deepEqual([vouched, orphans], [[778], [778]]);
  });
});

describe("a reaped command's process group (worker side)", () => {
  it("is known taken once a live process has its pid, and free while none has", async () => {
    const child = spawn("sleep", ["30"], { detached: true, stdio: "ignore" });
    const pid = child.pid!;
    assert.equal(groupIdTaken(pid), true, "a live process has the pid");
    const exited = new Promise((resolve) => child.once("exit", resolve));
    process.kill(pid, "SIGKILL");
    await exited; // reaped by this runtime
    assert.deepEqual(await survivors([pid]), []);
    assert.equal(groupIdTaken(pid), false, "nothing has the pid once it was reaped");
  });
});

const modeFile = join(mkdtempSync(join(tmpdir(), "spawnpool-rogue-")), "mode");
process.env.ROGUE_MODE_FILE = modeFile;
process.env.ROGUE_NODE = execFileSync("sh", ["-c", "command -v node"], { encoding: "utf8" }).trim();

describe("a live worker that breaks the protocol", () => {
  // A process leading a group of its own that is not the worker's child (its parent, a shell, is gone): what a rogue
  // worker may name for the host to kill.
  const stranger = Number(
    execFileSync("sh", ["-c", "setsid sleep 600 > /dev/null 2>&1 & echo $!"], { encoding: "utf8" }),
  );
  process.env.ROGUE_STRANGER = String(stranger);
  after(() => process.kill(stranger, "SIGKILL"));
  /** The request each case makes: a buffered echo, unless the case needs another. */
  const requests: Record<string, (pool: Pool) => Promise<unknown>> = {
    "over-window": (pool) => pool.spawn(["echo", "x"]).exited,
    "over-maxbuffer": (pool) => pool.command("echo", { args: ["x"], maxBuffer: 1000 }).output(),
  };
  const cases: Array<[string, string]> = [
    ["over-window", "ERR_PROTOCOL"],
    ["over-maxbuffer", "ERR_PROTOCOL"],
    ["absurd-length", "ERR_PROTOCOL"],
    ["unknown-type", "ERR_PROTOCOL"],
    ["unknown-request", "ERR_PROTOCOL"],
    ["malformed-exit", "ERR_PROTOCOL"],
    ["random-bytes", "ERR_PROTOCOL"],
    ["pid-0", "ERR_PROTOCOL"],
    ["pid-1", "ERR_PROTOCOL"],
    ["pid-worker", "ERR_PROTOCOL"],
    ["pid-host", "ERR_PROTOCOL"],
    ["pid-stranger", "ERR_PROTOCOL"],
    ["pid-wrap", "ERR_PROTOCOL"],
    ["spawned-twice", "ERR_PROTOCOL"],
    ["exit-before-spawned", "ERR_PROTOCOL"],
    ["truncated-then-exit", "ERR_WORKER_DIED"],
    ["close-channel", "ERR_WORKER_DIED"],
  ];
  for (const [mode, code] of cases) {
    it(`${mode}: the request fails with ${code}, the host goes on, the next worker serves`, async () => {
      writeFileSync(modeFile, mode);
      const pool = new Pool({ size: 1, runtime: "node", execPath: fixture("rogue_worker.sh") });
      try {
        await pool.ready();
        const rogue = pool.stats().workers[0].pid;
        await assert.rejects(
          (requests[mode] ?? ((pool) => pool.command("echo", { args: ["x"] }).output()))(pool),
          (e: unknown) => e instanceof SpawnPoolError && e.code === code,
        );
        assert.deepEqual(await survivors([rogue]), [], "the rogue worker is gone");
        assert.ok(alive(stranger), "the stranger the rogue named is alive");
        const out = await pool.command("echo", { args: ["recovered"] }).output();
        assert.equal(new TextDecoder().decode(out.stdout), "recovered\n");
        assert.equal(pool.stats().started, 2);
      } finally {
        await pool.close();
      }
    });
  }
});

describe("a worker whose whole answer arrives in one read (the node drop-in's event timing)", () => {
  // In Node, 'spawn' comes on its own turn of the event loop: code that awaits it, takes a few promise hops and
  // only then attaches its listeners misses no output, 'exit' or 'close'. The worker here answers a request with
  // Spawned, output, its end and Exit in one write, so nothing but the host's own scheduling keeps them apart.
  const hops = async () => {
    for (let i = 0; i < 3; i++) await Promise.resolve();
  };

  it("output piped: after awaiting 'spawn' and three promise hops, the listeners get every byte, 'exit' and 'close'", async () => {
    writeFileSync(modeFile, "all-at-once");
    const pool = new Pool({ size: 1, runtime: "node", execPath: fixture("rogue_worker.sh") });
    try {
      const child = childProcessFor(pool).spawn("echo", ["hi"], { stdio: ["ignore", "pipe", "ignore"] });
      await once(child, "spawn");
      await hops();
      let out = "";
      child.stdout!.on("data", (chunk) => (out += chunk));
      const both = Promise.all([once(child, "exit"), once(child, "close")]);
      const [[exitCode], [closeCode]] = await withTimeout(both, 5000, "'exit' or 'close' never came");
      assert.deepEqual({ out, exitCode, closeCode }, { out: "hi\n", exitCode: 0, closeCode: 0 });
    } finally {
      await pool.close();
    }
  });

  it("stdio 'ignore': 'exit' and 'close' attached after awaiting 'spawn' still come", async () => {
    writeFileSync(modeFile, "all-at-once");
    const pool = new Pool({ size: 1, runtime: "node", execPath: fixture("rogue_worker.sh") });
    try {
      const child = childProcessFor(pool).spawn("true", [], { stdio: "ignore" });
      await once(child, "spawn");
      await hops();
      const both = Promise.all([once(child, "exit"), once(child, "close")]);
      const [[exitCode], [closeCode]] = await withTimeout(both, 5000, "'exit' or 'close' never came");
      assert.deepEqual([exitCode, closeCode], [0, 0]);
    } finally {
      await pool.close();
    }
  });
});

/**
 * The native worker's process control (native/tree.c, native/cgroup.c, the limits in native/spawn.c) under
 * AddressSanitizer and UndefinedBehaviorSanitizer, and in the poll() build, over a channel the test holds as a host
 * would: whole-tree kills by frame (`*SIGNAL`) and by a killTree request's every end, the worker as subreaper while
 * only killTree commands run, limits named in the exit, and commands in cgroup leaves. A sanitizer report, a leak, a
 * crash or a hang fails the test. tests/process_control_test.ts runs the same through pools, on every shape.
 *
 * @module
 */

import assert from "node:assert/strict";
import { randomInt } from "node:crypto";
import { mkdirSync, readdirSync, rmdirSync, statfsSync } from "node:fs";
import process from "node:process";
import { describe, it } from "node:test";
import { decodeExit, type ExitInfo, Frame, type SpawnRequest } from "../core/frame.ts";
import { frame, HOST, markedProcesses, survivors } from "./_helpers.ts";
import { ASAN_WORKER, expectExit, POLL_WORKER, settled, spawnFrame, startWorker, type Worker } from "./_native.ts";

const newMarker = (): string => String(randomInt(10_000_000, 99_999_999));
const bytes = (s: string) => new TextEncoder().encode(s);
const quiet = { stdout: "null", stderr: "null", buffered: true } as const;
/** A shell that starts daemons leaving its tree (setsid; a subshell that exits at once), then runs `tail`. */
const daemonizing = (marker: string, tail: string): Partial<SpawnRequest> => ({
  ...quiet,
  cmd: "sh",
  args: ["-c", `setsid sleep ${marker}1 & (sleep ${marker}2 &); ${tail}`],
});

async function running(marker: string, count: number): Promise<void> {
  const deadline = performance.now() + 5000;
  while (markedProcesses(marker).length < count) {
    assert.ok(performance.now() < deadline, `${count} processes with ${marker} did not start`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function noneLeft(marker: string, what: string): Promise<void> {
  const left = await survivors(markedProcesses(marker), 3000);
  for (const pid of left) process.kill(pid, "SIGKILL");
  assert.deepEqual(left, [], `${what}: processes with ${marker} outlived their command`);
}

async function exitOf(worker: Worker, id: number, what: string): Promise<ExitInfo> {
  const answer = (await settled(worker, [id], 10_000, what)).get(id)!;
  assert.equal(answer.type, Frame.Exit, `${what}: ${new TextDecoder().decode(answer.payload)}`);
  return decodeExit(answer.payload).info;
}

/** A fresh cgroup v2 directory this process may write, or undefined. */
function scratchCgroup(): string | undefined {
  for (const mount of ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]) {
    try {
      if (statfsSync(mount).type !== 0x63677270) continue;
      const path = `${mount}/spawnpool-test-${process.pid}-${newMarker()}`;
      mkdirSync(path);
      return path;
    } catch {
      // not there, or not ours to write
    }
  }
  return undefined;
}

/** The same walk through every way of ending a tree, on one worker. */
async function walkTrees(worker: Worker, what: string): Promise<void> {
  // A *SIGTERM frame on a plain command: the tree below it, then its group.
  let marker = newMarker();
  worker.channel.write([spawnFrame(1, daemonizing(marker, `sleep ${marker}3`))]);
  await running(marker, 3);
  worker.channel.write([frame(Frame.Kill, 1, bytes("*SIGTERM"))]);
  assert.equal((await exitOf(worker, 1, what)).signal, "SIGTERM");
  await noneLeft(marker, `${what}: *SIGTERM`);
  // A killTree command: a plain kill reaches its tree.
  marker = newMarker();
  worker.channel.write([spawnFrame(2, { ...daemonizing(marker, `sleep ${marker}3`), killTree: true })]);
  await running(marker, 3);
  worker.channel.write([frame(Frame.Kill, 2, bytes("SIGKILL"))]);
  assert.equal((await exitOf(worker, 2, what)).signal, "SIGKILL");
  await noneLeft(marker, `${what}: kill`);
  // Its timeout, and its own exit (only killTree commands run: the worker adopts and ends what it left).
  marker = newMarker();
  worker.channel.write([
    spawnFrame(3, { ...daemonizing(marker, `sleep ${marker}3`), killTree: true, timeout: 300, group: true }),
  ]);
  assert.equal((await exitOf(worker, 3, what)).reason, "timeout");
  await noneLeft(marker, `${what}: timeout`);
  marker = newMarker();
  worker.channel.write([spawnFrame(4, { ...daemonizing(marker, "sleep 0.2"), killTree: true })]);
  assert.equal((await exitOf(worker, 4, what)).code, 0);
  await noneLeft(marker, `${what}: exit`);
  // Limits: CPU time, and a file's size.
  worker.channel.write([
    spawnFrame(5, { ...quiet, cmd: "sh", args: ["-c", "while :; do :; done"], limits: { cpuSeconds: 1 } }),
  ]);
  const cpu = await exitOf(worker, 5, what);
  assert.equal(cpu.signal, "SIGXCPU");
  assert.equal(cpu.limit, "cpu");
  worker.channel.write([
    spawnFrame(6, {
      ...quiet,
      cmd: "dd",
      args: ["if=/dev/zero", "of=/dev/null", "bs=1k", "count=1"],
      limits: { fileSizeBytes: 0 },
    }),
  ]);
  assert.equal((await exitOf(worker, 6, what)).limit, undefined, "dd to /dev/null writes no file: no limit hit");
  // The channel's close with a killTree command running: its whole tree goes with the worker.
  marker = newMarker();
  worker.channel.write([spawnFrame(7, { ...daemonizing(marker, `sleep ${marker}3`), killTree: true })]);
  await running(marker, 3);
  worker.channel.close();
  await expectExit(worker, [0], what);
  await noneLeft(marker, `${what}: the worker's end`);
}

describe(`${HOST} host, native worker process control under ASan and UBSan`, () => {
  it("kills whole trees by frame and at each end of a killTree command; names limits; leaks nothing", async () => {
    const worker = await startWorker([ASAN_WORKER]);
    try {
      await walkTrees(worker, "asan");
    } finally {
      worker.kill();
    }
  });

  it("the same in the poll() build (SIGCHLD, no pidfd; fork for vfork)", async () => {
    const worker = await startWorker([POLL_WORKER]);
    try {
      await walkTrees(worker, "poll");
    } finally {
      worker.kill();
    }
  });

  const cgroup = scratchCgroup();
  it(
    "the same with every command in a cgroup leaf; the leaves are gone after the worker",
    { skip: cgroup === undefined && "no writable cgroup v2 directory here" },
    async () => {
      const worker = await startWorker([ASAN_WORKER], { SPAWNPOOL_CGROUP: cgroup! });
      try {
        await walkTrees(worker, "cgroup");
        assert.deepEqual(readdirSync(cgroup!).filter((name) => name.startsWith("spawnpool-")), []);
      } finally {
        worker.kill();
        rmdirSync(cgroup!);
      }
    },
  );

  it("a cgroup it cannot use: the hello says why, and the worker exits", async () => {
    const worker = await startWorker([ASAN_WORKER], { SPAWNPOOL_CGROUP: "/proc" });
    try {
      const hello = await new Promise<Record<string, unknown>>((resolve) => {
        const found = worker.received.find((f) => f.type === Frame.Hello);
        if (found) return resolve(JSON.parse(new TextDecoder().decode(found.payload)));
        worker.onFrame = (f) => {
          if (f.type === Frame.Hello) resolve(JSON.parse(new TextDecoder().decode(f.payload)));
        };
      });
      assert.match(String(hello.error), /^cgroup: \/proc is not a cgroup v2 directory/);
      worker.channel.close();
      await expectExit(worker, [1], "bad cgroup");
    } finally {
      worker.kill();
    }
  });
});

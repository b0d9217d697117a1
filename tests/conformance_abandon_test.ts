/**
 * Commands a server walks away from: killed, timed out or past `maxBuffer`, with output nobody reads. Once such a
 * command has ended, nothing waits for a reader: its request completes, its worker's slot, zombie and pipes are let
 * go, and `close()` resolves, on every shape, worker runtime and remote pool. A stream still read after the end gets
 * what the command wrote.
 */

import assert from "node:assert/strict";
import { existsSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { childProcessFor } from "../node.ts";
import { abandonedYes } from "../support/abandoned.ts";
import type { Pool } from "../mod.ts";
import { DEFAULT_WINDOW } from "../core/options.ts";
import { childPids, withTimeout } from "./_helpers.ts";
import { forEachWorker, itUnlessRemote, scratch } from "./_conformance.ts";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A worker's open fds and children (zombies included: a worker keeps a command's until its request is done). */
function held(pid: number): { fds: number; children: number } {
  return { fds: readdirSync(`/proc/${pid}/fd`).length, children: childPids(pid).length };
}

/** Polls `check` every 10 ms until it holds or `ms` passed; returns whether it held. */
async function eventually(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = performance.now() + ms;
  while (!check()) {
    if (performance.now() > deadline) return false;
    await sleep(10);
  }
  return true;
}

await forEachWorker("commands ended with their output unread", (pool, _runtime, workers) => {
  const local = itUnlessRemote(workers, "its workers are the agent's, on its machine");

  it("1,000 `yes` killed, timed out or past maxBuffer, never read: every request completes and close() resolves", async () => {
    const fresh = workers.newPool(2);
    try {
      await fresh.ready();
      // A warm-up, then what the workers hold when idle: the runtimes open a few fds of their own early on, once.
      await Promise.all(Array.from({ length: 40 }, (_, i) => abandonedYes(fresh, i)));
      const pids = workers.remote ? [] : fresh.stats().workers.map((worker) => worker.pid);
      await eventually(() => fresh.stats().inFlight === 0, 5000);
      const before = pids.map(held);
      let next = 0;
      await Promise.all(Array.from({ length: 32 }, async () => {
        for (let i = next++; i < 1000; i = next++) await abandonedYes(fresh, i);
      }));
      // Within a second on a quiet machine (after the last exit, at most the pipe's rest and a 200 ms grace); the
      // margin is for a loaded one. Before the fix, they stayed in flight for good.
      const drained = await eventually(() => fresh.stats().inFlight === 0, 3000);
      assert.ok(drained, `still in flight after the last exit: ${JSON.stringify(fresh.stats())}`);
      if (pids.length > 0) {
        assert.deepEqual(fresh.stats().workers.map((worker) => worker.pid), pids, "no worker was replaced");
        // Summed over the workers, with a little slack: a Deno worker opens and closes a few fds of its own now and
        // then (its runtime's), while 1,000 commands held would hold a thousand pipes and zombies.
        const sum = (counts: Array<{ fds: number }>) => counts.reduce((total, count) => total + count.fds, 0);
        const settled = await eventually(
          () => sum(pids.map(held)) <= sum(before) + 4 && pids.every((pid) => held(pid).children === 0),
          3000,
        );
        assert.ok(settled, `workers hold ${JSON.stringify(pids.map(held))}, idle they held ${JSON.stringify(before)}`);
      }
    } finally {
      await withTimeout(fresh.close(), 10_000, "close() did not resolve");
    }
  });

  it("a stream read after its command was killed gets all the command wrote (window and pipe)", async () => {
    // More than the window the worker sends ahead of the reader, by 32 KiB that wait in the pipe or socket when it dies.
    // No more: a writer blocked on a full unix socket is woken only once what it queued there is down to a quarter of
    // its send buffer (the kernel's unix_writable()), about 5 of head's 8 KiB writes, so with more left over than that
    // it would wait for a reader for good whenever it filled the socket before the worker took the window from it (a
    // slow worker: under qemu-user, or on a loaded machine).
    const size = DEFAULT_WINDOW + 32 * 1024;
    const marker = join(scratch, `wrote-${Math.random().toString(36).slice(2)}`);
    const script = `head -c ${size} /dev/zero; : > '${marker}'; exec sleep 30`;
    for (const shape of ["deno", "bun"] as const) {
      const child = shape === "deno"
        ? pool.command("sh", { args: ["-c", script], stdout: "piped" }).spawn()
        : pool.spawn(["sh", "-c", script]);
      try {
        assert.ok(await eventually(() => existsSync(marker), 10_000), "the command wrote its output");
      } finally {
        child.kill("SIGKILL"); // also when it did not: a command left running would hold the file's pool open
      }
      if (shape === "deno") {
        const status = await (child as ReturnType<ReturnType<Pool["command"]>["spawn"]>).status;
        assert.equal(status.signal, "SIGKILL");
      } else {
        assert.equal(await (child as ReturnType<Pool["spawn"]>).exited, 137);
      }
      await sleep(300); // past the grace: what was not read by now must not have been dropped
      const out = await new Response(child.stdout as ReadableStream<Uint8Array>).arrayBuffer();
      assert.equal(out.byteLength, size, `${shape} shape`);
      rmSync(marker, { force: true });
    }
  });

  it("the drop-in emits no 'error' after 'exit' when the pool closes without draining", async () => {
    const closing = workers.newPool(1);
    const cp = childProcessFor(closing);
    const events: string[] = [];
    // The command exits at once; a background job of its holds stdout open, writing now and then, so the request is
    // still in flight when the pool closes.
    const child = cp.spawn("sh", [
      "-c",
      "(for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo x; sleep 0.1; done) & exit 4",
    ]);
    child.on("error", (error: NodeJS.ErrnoException) => events.push(`error ${error.code}`));
    child.on("exit", (code) => events.push(`exit ${code}`));
    const closed = new Promise((resolve) => child.on("close", resolve));
    child.stdout!.resume();
    await new Promise((resolve) => child.once("exit", resolve));
    await closing.close({ drain: false });
    await withTimeout(closed, 5000, "no 'close'");
    await sleep(50);
    assert.deepEqual(events, ["exit 4"]);
  });

  it("the Bun shape's maxBuffer counts streamed output: past it, killSignal", async () => {
    const term = pool.spawn(["yes"], { maxBuffer: 1_000_000 });
    assert.equal(await term.exited, 143);
    assert.equal(term.signalCode, "SIGTERM");
    const read = pool.spawn(["yes"], { maxBuffer: 100_000, killSignal: "SIGKILL" });
    const out = await new Response(read.stdout as ReadableStream<Uint8Array>).arrayBuffer();
    assert.equal(await read.exited, 137);
    assert.ok(out.byteLength > 100_000, `read ${out.byteLength} bytes`);
  });

  local("a killed command's zombie and pipes are let go though its output is never read", async () => {
    const child = pool.command("yes", { stdout: "piped", stderr: "piped" }).spawn();
    const pid = await child.spawned;
    const worker = pool.stats().workers.find((w) => childPids(w.pid).includes(pid));
    assert.ok(worker, "a worker runs the command");
    child.kill("SIGKILL");
    assert.equal((await child.status).signal, "SIGKILL");
    assert.ok(await eventually(() => !childPids(worker.pid).includes(pid), 3000), "the zombie is reaped");
  });
});

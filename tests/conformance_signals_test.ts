/**
 * The conformance suite, kills, signals, timeouts, maxBuffer, flow control, and a host or worker that dies: for
 * each worker runtime (SPAWNPOOL_TEST_WORKERS, see tests/_conformance.ts) under the host runtime that runs this
 * file (`deno test`, `bun test`, `node --test`), against real processes.
 */

import assert from "node:assert/strict";
import { spawn as nodeSpawn } from "node:child_process";
import process from "node:process";
import { it } from "node:test";
import { Pool, SpawnPoolError } from "../mod.ts";
import { alive, descendants, fixture, hostArgv, rssBytes, survivors, withTimeout } from "./_helpers.ts";
import { cancelledYes } from "../support/soak.ts";
import { forEachWorker, itUnlessRemote, scratch, text } from "./_conformance.ts";

const title = "kills, signals, timeouts, maxBuffer, flow control and a host or worker that dies";

/** Reads stdout up to a line "pid <n>" (a script's `echo "pid $!"`) and returns that pid. */
async function pidLine(reader: ReadableStreamDefaultReader<Uint8Array>): Promise<number> {
  let seen = "";
  while (!/pid \d+\n/.test(seen)) {
    const { value, done } = await reader.read();
    assert.ok(!done, `stdout ended early: ${seen}`);
    seen += text(value!);
  }
  return Number(/pid (\d+)\n/.exec(seen)![1]);
}

await forEachWorker(title, (pool, runtime, workers) => {
  // Tests that signal a worker by its pid: a remote pool's workers are its agent's, and stats() gives the agent's pid.
  const itWorkers = itUnlessRemote(
    workers,
    "its workers are the agent's, on its machine: stats() gives the agent's pid",
  );
  it("cancelling stdout closes the pipe in the worker: the command gets SIGPIPE", async () => {
    // Without the release `yes` would run forever. How it notices depends on the pipe: SIGPIPE on a
    // pipe, or ECONNRESET (exit 1) on the socketpairs node and bun use for stdio when bytes were unread.
    assert.equal(await withTimeout(cancelledYes(pool), 5000, "yes is still running"), undefined);
  });

  it(
    "a command starts with no signal blocked or caught; from a native worker, none ignored either",
    { skip: process.platform !== "linux" && "reads the command's /proc/self/status" },
    async () => {
      const { stdout } = await pool.command("cat", { args: ["/proc/self/status"] }).output();
      const masks = Object.fromEntries(
        [...text(stdout).matchAll(/^(Sig\w+|ShdPnd):\s*([0-9a-f]+)$/gm)].map((
          [, name, hex],
        ) => [name, BigInt(`0x${hex}`)]),
      );
      assert.equal(masks.SigBlk, 0n, "blocked signals");
      assert.equal(masks.SigCgt, 0n, "caught signals");
      // SIGPIPE (13) is ignored by every worker runtime and must not reach the command so.
      assert.equal((masks.SigIgn >> 12n) & 1n, 0n, "SIGPIPE ignored");
      // The native worker sets back whatever it ignores, SIGPIPE and what its own parent left ignored (nohup's
      // SIGHUP): the JavaScript workers leave the latter to their runtime's spawn.
      if (workers.runtime === "native" && !workers.remote) assert.equal(masks.SigIgn, 0n, "ignored signals");
    },
  );

  const itHostKilled = itUnlessRemote(
    workers,
    "the agent, not a worker of the host's, runs the command: it ends the command when the caller's inbox is gone or " +
      "the caller goes silent, not on its parent's death (and the fixture's host runs a local pool)",
  );
  itHostKilled(
    "the host killed with SIGKILL: within 1 s its worker, the command and the command's children are gone",
    async () => {
      const [exe, ...args] = hostArgv(fixture("host_to_kill.ts"));
      const host = nodeSpawn(exe, [...args, runtime], { stdio: ["ignore", "pipe", "inherit"] });
      const line = await new Promise<string>((resolve, reject) => {
        let seen = "";
        host.stdout.setEncoding("utf8").on("data", (s: string) => {
          seen += s;
          if (seen.includes("\n")) resolve(seen.split("\n")[0]);
        });
        host.on("exit", (code) => reject(new Error(`host exited (${code}) before starting the command`)));
      });
      const { worker, command } = JSON.parse(line) as { worker: number; command: number };
      const family = [worker, command, ...descendants(command)];
      assert.ok(family.length >= 3, `the command has a child (${family})`);
      host.kill("SIGKILL");
      assert.deepEqual(await survivors(family), [], "still alive 1 s after the host was killed");
    },
  );

  for (const signal of ["SIGKILL", "SIGTERM"] as const) {
    itWorkers(
      `a worker ended by ${signal} mid-stream: its requests fail with ERR_WORKER_DIED, its commands die, the pool goes on`,
      async () => {
        const own = new Pool({ size: 1, runtime });
        const streaming = own.command("yes", { stdout: "piped" }).spawn();
        const streamingPid = await streaming.spawned;
        const reader = streaming.stdout.getReader();
        assert.equal((await reader.read()).done, false);
        const sleeper = own.command("sleep", { args: ["30"] }).spawn();
        const sleeperPid = await sleeper.spawned;
        process.kill(own.stats().workers[0].pid, signal);
        const died = (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_WORKER_DIED";
        await assert.rejects(streaming.status, died);
        await assert.rejects(sleeper.status, died);
        await assert.rejects(async () => {
          while (!(await reader.read()).done);
        }, died);
        assert.deepEqual(await survivors([streamingPid, sleeperPid]), [], "the dead worker's commands");
        const later = await Promise.all([1, 2, 3].map((n) => own.command("echo", { args: [`${n}`] }).output()));
        assert.deepEqual(later.map((out) => text(out.stdout)), ["1\n", "2\n", "3\n"]);
        assert.equal(own.stats().started, 2, "one replacement worker");
        await own.close();
      },
    );
  }

  it(
    "a native worker sent SIGINT (a terminal's Ctrl-C reaches the host's group): its commands get it, it serves on",
    { skip: (workers.runtime !== "native" || workers.remote) && "the native worker's (JavaScript workers die of it)" },
    async () => {
      const own = new Pool({ size: 1, runtime });
      try {
        const sleeper = own.command("sleep", { args: ["30"] }).spawn();
        const trapper = own.command("sh", { args: ["-c", "trap 'echo caught' INT; sleep 1 & wait; sleep 0.2"] })
          .output();
        await sleeper.spawned;
        await new Promise((resolve) => setTimeout(resolve, 100)); // the shell's trap is set
        process.kill(own.stats().workers[0].pid, "SIGINT");
        assert.deepEqual(await sleeper.status, { success: false, code: 130, signal: "SIGINT" });
        const trapped = await trapper;
        assert.equal(text(trapped.stdout), "caught\n", "a command that handles SIGINT goes on");
        assert.equal(trapped.code, 0);
        const later = await own.command("echo", { args: ["after"] }).output();
        assert.equal(text(later.stdout), "after\n");
        assert.equal(own.stats().started, 1, "the same worker");
      } finally {
        await own.close();
      }
    },
  );

  it("a command that signals its own process group (kill 0)", async () => {
    const own = workers.newPool(1);
    try {
      const sibling = own.command("sleep", { args: ["30"], stdout: "null", stderr: "null" }).spawn();
      const siblingPid = await sibling.spawned;
      const worker = own.stats().workers[0].pid;
      const outcome = await own.command("sh", { args: ["-c", "kill 0; sleep 5"] }).output()
        .then((out) => out.signal, (error: SpawnPoolError) => error.code);
      // An agent runs every command in a process group of its own, whatever its workers' runtime; a remote pool's
      // entry in stats() is the agent.
      if (runtime === "deno" && !workers.remote) {
        // Deno workers share their process group with such commands (README, "Differences from the native
        // APIs"): the signal ends the worker too, and the pool starts another.
        assert.deepEqual(await survivors([worker]), [], "the worker went with its group");
        await sibling.status.catch(() => {});
        // A request sent before the host sees the channel close would fail with ERR_WORKER_DIED.
        for (let i = 0; i < 300 && own.stats().workers.some((w) => w.pid === worker); i++) {
          await new Promise((r) => setTimeout(r, 10));
        }
        assert.ok(!own.stats().workers.some((w) => w.pid === worker), "the pool let go of the dead worker");
        const after = await own.command("echo", { args: ["after"] }).output();
        assert.equal(text(after.stdout), "after\n");
        assert.equal(own.stats().started, 2, "one replacement worker");
      } else {
        assert.equal(outcome, "SIGTERM", "the command's own group got the signal");
        assert.equal(alive(siblingPid), true, "the other command runs on");
        assert.deepEqual(own.stats().workers.map((w) => w.pid), [worker], "the worker runs on");
        sibling.kill("SIGKILL");
        assert.equal((await sibling.status).signal, "SIGKILL");
      }
    } finally {
      await own.close({ drain: false });
    }
  });

  it("maxBuffer: output() past the limit kills the command and rejects with ERR_MAX_BUFFER", async () => {
    // `yes` never ends: only the limit stops it.
    await assert.rejects(
      pool.command("yes", { maxBuffer: 100_000 }).output(),
      (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_MAX_BUFFER" && /maxBuffer/.test(e.message),
    );
  });

  it("maxBuffer: output past the limit after the command exited (its background job's) still rejects", async () => {
    // sh exits at once; the job it left writes 2000 bytes on the stdout it holds as soon as it sees sh gone (its
    // parent changes at sh's exit; not its reaping, which a worker may hold back), with a builtin: well within the
    // grace a worker gives such a stream after the exit (200 ms), even on a loaded machine. The output is not cut
    // short silently: output() rejects as for a command that is still running.
    const late = (bytes: number) =>
      `(while read -r _ _ _ ppid _ < /proc/self/stat && [ "$ppid" = $$ ]; do sleep 0.01; done; printf "%${bytes}s" "")` +
      " & exit 0";
    await assert.rejects(
      pool.command("sh", { args: ["-c", late(2000)], maxBuffer: 1000 }).output(),
      (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_MAX_BUFFER",
    );
    // Under the limit, the late output is all there.
    const under = await pool.command("sh", { args: ["-c", late(900)], maxBuffer: 1000 }).output();
    assert.equal(under.stdout.byteLength, 900);
  });

  it("flow control: a stalled reader of endless output holds memory to the window, and reading resumes", async () => {
    const stall = Number(process.env.SPAWNPOOL_TEST_STALL_MS ?? 1500);
    await pool.ready();
    const workers = pool.stats().workers.map((w) => w.pid);
    const worker = (pid: number) => workers.includes(pid) ? rssBytes(pid) : 0;
    const child = pool.command("yes", { stdout: "piped", stderr: "null" }).spawn();
    const reader = child.stdout.getReader();
    let read = (await reader.read()).value!.byteLength;
    await new Promise((r) => setTimeout(r, 200)); // the window fills
    const before = { host: process.memoryUsage().rss, worker: workers.reduce((sum, pid) => sum + worker(pid), 0) };
    await new Promise((r) => setTimeout(r, stall));
    const after = { host: process.memoryUsage().rss, worker: workers.reduce((sum, pid) => sum + worker(pid), 0) };
    const growth = { host: after.host - before.host, worker: after.worker - before.worker };
    assert.ok(growth.host < 16 * 2 ** 20 && growth.worker < 16 * 2 ** 20, `grew ${JSON.stringify(growth)} bytes`);
    while (read < 20 * 2 ** 20) {
      const { value } = await reader.read();
      assert.ok(value && value.every((b, i) => b === ((read + i) % 2 === 0 ? 0x79 : 0x0a)), "y\\n, in order");
      read += value!.byteLength;
    }
    await reader.cancel();
    await child.status;
    if (process.env.SPAWNPOOL_TEST_STALL_MS) console.log(`stalled ${stall} ms: ${JSON.stringify({ before, after })}`);
  });

  it("kill(signal) on a running command, by name and number", async () => {
    const child = pool.command("sleep", { args: ["30"] }).spawn();
    const pid = await child.spawned;
    assert.equal(child.pid, pid);
    child.kill("SIGUSR1");
    assert.deepEqual(await child.status, { success: false, code: 138, signal: "SIGUSR1" });
    const proc = pool.spawn(["sleep", "30"]);
    await proc.spawned;
    proc.kill(9);
    assert.equal(await proc.exited, 137);
    assert.equal(proc.killed, true);
    assert.equal(proc.signalCode, "SIGKILL");
  });

  it("kill() before the pid is known still reaches the command", async () => {
    const proc = pool.spawn(["sleep", "30"]);
    proc.kill();
    assert.equal(await proc.exited, 143);
  });

  it("Bun shape: `await using` kills a running command with SIGTERM and waits for its exit; after exit it does nothing", async () => {
    let proc: ReturnType<typeof pool.spawn>;
    let pid = 0;
    {
      await using running = pool.spawn(["sleep", "30"]);
      proc = running;
      pid = await running.spawned;
    }
    assert.deepEqual([proc.exitCode, proc.signalCode, proc.killed], [null, "SIGTERM", true]);
    assert.deepEqual(await survivors([pid]), []);
    let done: ReturnType<typeof pool.spawn>;
    {
      await using finished = pool.spawn(["sh", "-c", "exit 4"]);
      done = finished;
      assert.equal(await finished.exited, 4);
    }
    assert.deepEqual([done.exitCode, done.signalCode, done.killed], [4, null, false]);
    {
      // A command that could not start: disposal neither throws nor waits.
      await using missing = pool.spawn(["./spawnpool-no-such-command"], { cwd: scratch });
      await assert.rejects(missing.exited);
    }
  });

  it("status (Deno shape) and exited (Bun shape) never settle before the pid is known", async () => {
    const child = pool.command("true").spawn();
    const pidAtStatus = await child.status.then(() => child.pid);
    assert.ok(typeof pidAtStatus === "number" && pidAtStatus > 0, `pid at status: ${pidAtStatus}`);
    const proc = pool.spawn(["true"]);
    const pidAtExited = await proc.exited.then(() => proc.pid);
    assert.ok(typeof pidAtExited === "number" && pidAtExited > 0, `pid at exited: ${pidAtExited}`);
  });

  it("AbortSignal kills the command with SIGTERM", async () => {
    const controller = new AbortController();
    const child = pool.command("sleep", { args: ["30"], signal: controller.signal }).spawn();
    await child.spawned;
    controller.abort();
    assert.equal((await child.status).signal, "SIGTERM");
    const aborted = AbortSignal.abort();
    await assert.rejects(pool.command("echo", { signal: aborted }).output(), (e: Error) => e === aborted.reason);
  });

  it("timeout kills the command: Deno shape rejects with ERR_TIMEOUT", async () => {
    await assert.rejects(
      pool.command("sleep", { args: ["30"], timeout: 100 }).output(),
      (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_TIMEOUT" && e.command === "sleep",
    );
  });

  it("timeout escalates to SIGKILL for a command that ignores SIGTERM, and kills its group", async () => {
    // The timeout leaves a loaded machine time to start the script and set its trap.
    const proc = pool.spawn([fixture("ignore_term.sh")], { timeout: 1000, forceKillAfterDelay: 200 });
    const reader = proc.stdout!.getReader();
    const { value } = await reader.read();
    assert.equal(text(value!), "ready\n");
    while (!(await reader.read()).done);
    assert.equal(await proc.exited, 137);
    assert.equal(proc.signalCode, "SIGKILL");
  });

  it("the forced SIGKILL is not dropped when the quiet period lets go of a stream a silent grandchild holds", async () => {
    // The shell exits on the timeout's SIGTERM; its child ignores it and holds stdout without writing, so 200 ms
    // later the stream is let go and the request ends; the forced SIGKILL, due 5 s after the timeout, goes then.
    const script = `(trap '' TERM; exec sleep 30) & echo "pid $!"; wait`;
    const proc = pool.spawn(["sh", "-c", script], { timeout: 1000 });
    const reader = proc.stdout!.getReader();
    const grandchild = await pidLine(reader);
    try {
      while (!(await withTimeout(reader.read(), 5000, "stdout did not end")).done);
      assert.equal(await withTimeout(proc.exited, 5000, "no exit"), 143);
      // Well before the forced SIGKILL's own time (5 s after the timeout).
      assert.deepEqual(await survivors([grandchild], 3000), [], "the grandchild outlived the request");
    } finally {
      try {
        process.kill(grandchild, "SIGKILL");
      } catch {
        // Gone.
      }
    }
  });

  it("the forced SIGKILL reaches the group after the command exited: a grandchild ignoring SIGTERM holding stdout dies", async () => {
    // The shell exits on the timeout's SIGTERM; its child ignores it and keeps writing to the stdout it holds (so
    // the quiet period that would release the stream never comes) until the group's SIGKILL.
    const script = `(trap '' TERM; while :; do echo tick; sleep 0.05; done) & echo "pid $!"; wait`;
    const proc = pool.spawn(["sh", "-c", script], { timeout: 1000, forceKillAfterDelay: 200 });
    const reader = proc.stdout!.getReader();
    const grandchild = await pidLine(reader);
    const drained = (async () => {
      while (!(await reader.read()).done);
    })();
    try {
      assert.equal(await withTimeout(proc.exited, 5000, "no exit"), 143);
      const deadline = Date.now() + 3000;
      while (alive(grandchild) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.ok(!alive(grandchild), "the grandchild outlived the forced SIGKILL");
      await withTimeout(drained, 5000, "stdout did not end");
    } finally {
      try {
        process.kill(grandchild, "SIGKILL");
      } catch {
        // Gone.
      }
    }
  });

  itWorkers(
    "a worker stopped (SIGSTOP) cannot hang a command with a timeout: ERR_TIMEOUT, the command and the worker killed, a new worker serves",
    async () => {
      const own = new Pool({ size: 1, runtime });
      await own.ready();
      const [{ pid: worker }] = own.stats().workers;
      try {
        // Time for this host to stop the worker before the worker's own timeout ends the command.
        const proc = own.spawn(["sleep", "30"], { timeout: 2000, forceKillAfterDelay: 100 });
        const pid = await proc.spawned;
        process.kill(worker, "SIGSTOP");
        const error = await withTimeout(proc.exited.then(() => null, (e) => e), 10_000, "exited never settled");
        assert.ok(error instanceof SpawnPoolError && error.code === "ERR_TIMEOUT", String(error));
        assert.deepEqual(await survivors([pid, worker]), [], "the host killed the command and the worker");
        assert.equal(text((await own.command("echo", { args: ["back"] }).output()).stdout), "back\n");
        assert.equal(own.stats().started, 2, "a new worker took its place");
      } finally {
        try {
          process.kill(worker, "SIGCONT");
        } catch {
          // killed already, as it should be
        }
        await own.close();
      }
    },
  );

  it("Bun shape: timeout resolves exited with the kill signal", async () => {
    const proc = pool.spawn(["sleep", "30"], { timeout: 100, killSignal: "SIGINT" });
    assert.equal(await proc.exited, 130);
    assert.equal(proc.signalCode, "SIGINT");
  });
}, { closePool: true });

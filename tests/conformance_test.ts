/**
 * The conformance suite: every behaviour of both API shapes, against real processes, for each worker
 * runtime under the host runtime that runs this file (`deno test`, `bun test`, `node --test`).
 *
 * Worker runtimes come from SPAWNPOOL_TEST_WORKERS (comma-separated), default all three and the native worker; one that
 * is missing fails the suite rather than being skipped.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { spawn as nodeSpawn, spawnSync } from "node:child_process";
import {
  chmodSync,
  closeSync,
  cpSync,
  mkdtempSync,
  openSync,
  readFileSync,
  realpathSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { currentPlatform } from "../adapters/runtime.ts";
import { PoolCommand } from "../shapes/command.ts";
import { PoolCore } from "../core/pool_core.ts";
import { Command, Pool, type RuntimeName, spawn, SpawnError, SpawnPoolError, type WorkerRuntime } from "../mod.ts";
import {
  alive,
  childPids,
  fixture,
  HOST,
  hostArgv,
  rssAnonBytes,
  rssBytes,
  survivors,
  withTimeout,
} from "./_helpers.ts";
import { cancelledYes } from "../support/soak.ts";

const WORKERS = (process.env.SPAWNPOOL_TEST_WORKERS ?? "node,bun,deno,native").split(",") as WorkerRuntime[];
const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);
const bytes = (s: string) => new TextEncoder().encode(s);
const scratch = mkdtempSync(join(tmpdir(), "spawnpool-test-"));
const root = fileURLToPath(new URL("..", import.meta.url).href);

/** A process's descendants, from /proc. */
function descendants(pid: number): number[] {
  return childPids(pid).flatMap((child) => [child, ...descendants(child)]);
}

async function readAll(stream: ReadableStream<Uint8Array> | undefined): Promise<string> {
  assert.ok(stream, "stream is piped");
  return await new Response(stream).text();
}

for (const runtime of WORKERS) {
  describe(`${HOST} host, ${runtime} workers`, () => {
    const pool = new Pool({ size: 2, runtime });

    it("starts every worker on ready()", async () => {
      await pool.ready();
      const stats = pool.stats();
      assert.equal(stats.runtime, runtime);
      assert.equal(stats.workers.length, 2);
      assert.ok(stats.workers.every((w) => w.ready && w.pid > 0));
    });

    it("output() returns Deno.Command's result shape", async () => {
      const out = await pool.command("echo", { args: ["hi"] }).output();
      assert.deepEqual(
        { code: out.code, success: out.success, signal: out.signal, stdout: text(out.stdout), stderr: out.stderr },
        { code: 0, success: true, signal: null, stdout: "hi\n", stderr: new Uint8Array(0) },
      );
    });

    it("passes arguments exactly: spaces, quotes, unicode, empty strings", async () => {
      const args = ["a b", "", "'single'", '"double"', "ünï😀", "$HOME", "--flag=x y", "\\back", "new\nline"];
      const out = await pool.command(fixture("print_args.sh"), { args }).output();
      assert.equal(text(out.stdout), args.map((a) => `[${a}]\n`).join(""));
    });

    it("a request larger than a frame fails alone with E2BIG; the commands on its worker go on", async () => {
      const own = new Pool({ size: 1, runtime });
      try {
        const running = own.command("sh", { args: ["-c", "sleep 0.3; echo still here"] }).output();
        const huge = "x".repeat(65 * 1024 * 1024);
        const error = await own.spawn(["echo", huge]).exited.then(() => null, (e) => e);
        assert.ok(error instanceof SpawnError, String(error));
        assert.equal(error.code, "E2BIG");
        await assert.rejects(own.command("echo", { env: { HUGE: huge } }).output(), { code: "E2BIG" });
        assert.equal(text((await running).stdout), "still here\n");
        assert.equal(own.stats().started, 1, "no worker was lost");
      } finally {
        await own.close();
      }
    });

    it("passes 5,000 arguments", async () => {
      const args = Array.from({ length: 5000 }, (_, i) => `arg-${i}`);
      const out = await pool.command("sh", { args: ["-c", 'echo "$#:$1:${5000}"', "sh", ...args] }).output();
      assert.equal(text(out.stdout), "5000:arg-0:arg-4999\n");
    });

    it("runs in cwd (string and file URL)", async () => {
      const expected = realpathSync(scratch);
      for (const cwd of [scratch, new URL(`file://${scratch}`)]) {
        const out = await pool.command("pwd", { cwd }).output();
        assert.equal(realpathSync(text(out.stdout).trim()), expected);
      }
    });

    it("inherits the environment, merges env into it, and clearEnv starts empty", async () => {
      const inherited = await pool.command("sh", { args: ["-c", 'echo "${PATH:+has-path}"'] }).output();
      assert.equal(text(inherited.stdout), "has-path\n");
      const merged = await pool.command("sh", { args: ["-c", 'echo "$SP_A:${PATH:+has-path}"'], env: { SP_A: "1" } })
        .output();
      assert.equal(text(merged.stdout), "1:has-path\n");
      const cleared = await pool.command("/usr/bin/env", { clearEnv: true, env: { ONLY: "this" } }).output();
      assert.equal(text(cleared.stdout), "ONLY=this\n");
      // An own "__proto__" key (JSON.parse makes one) is a variable like any other, as natively.
      const proto = await pool.command("/usr/bin/env", { clearEnv: true, env: JSON.parse('{"__proto__": "x"}') })
        .output();
      assert.equal(text(proto.stdout), "__proto__=x\n");
    });

    it("Bun shape: env replaces the environment", async () => {
      const proc = pool.spawn(["/usr/bin/env"], { env: { ONLY: "bun" } });
      assert.equal(await readAll(proc.stdout), "ONLY=bun\n");
      assert.equal(await proc.exited, 0);
    });

    it("stdin as bytes, string, stream, Blob and null", async () => {
      const input = new Uint8Array(300_000).map((_, i) => (i * 7) & 0xff);
      const fromBytes = pool.spawn(["cat"], { stdin: input });
      assert.deepEqual(new Uint8Array(await new Response(fromBytes.stdout).arrayBuffer()), input);
      assert.equal(await readAll(pool.spawn(["cat"], { stdin: "a string" }).stdout), "a string");
      const stream = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(bytes("one "));
          c.enqueue(bytes("two"));
          c.close();
        },
      });
      assert.equal(await readAll(pool.spawn(["cat"], { stdin: stream }).stdout), "one two");
      assert.equal(await readAll(pool.spawn(["cat"], { stdin: new Blob(["blob"]) }).stdout), "blob");
      assert.equal(await readAll(pool.spawn(["cat"], { stdin: null }).stdout), "");
      const inherited = await pool.command("cat", { stdin: "inherit" }).output();
      assert.equal(text(inherited.stdout), "", "stdin 'inherit' reads nothing in a pool");
    });

    it("stdin as a WritableStream (Deno shape) and a FileSink (Bun shape)", async () => {
      const child = pool.command("cat", { stdin: "piped", stdout: "piped" }).spawn();
      const writer = child.stdin.getWriter();
      await writer.write(bytes("streamed "));
      await writer.write(bytes("input"));
      await writer.close();
      const out = await child.output();
      assert.equal(text(out.stdout), "streamed input");
      const proc = pool.spawn(["cat"], { stdin: "pipe" });
      proc.stdin!.write("sink ");
      proc.stdin!.write(bytes("bytes"));
      await proc.stdin!.end();
      assert.equal(await readAll(proc.stdout), "sink bytes");
    });

    it("stdout and stderr piped or null", async () => {
      const both = await pool.command("sh", { args: ["-c", "echo out; echo err >&2"] }).output();
      assert.equal(text(both.stdout), "out\n");
      assert.equal(text(both.stderr), "err\n");
      const none = await pool.command("sh", { args: ["-c", "echo out; echo err >&2"], stdout: "null", stderr: "null" })
        .output();
      assert.equal(none.code, 0);
      assert.throws(() => none.stdout, TypeError);
      assert.throws(() => none.stderr, TypeError);
      const proc = pool.spawn(["sh", "-c", "echo out; echo err >&2"], { stdout: "ignore", stderr: "pipe" });
      assert.equal(proc.stdout, undefined);
      assert.equal(await readAll(proc.stderr), "err\n");
    });

    it("stdout and stderr inherit reach the host's own stdout and stderr", async () => {
      const [exe, ...args] = hostArgv(fixture("inherit_host.ts"), runtime);
      const out = await pool.command(exe, { args }).output();
      assert.equal(text(out.stdout), "to-stdout\nstatus 0\n");
      assert.equal(text(out.stderr), "to-stderr\n");
    });

    it("reports exit codes and terminating signals in both shapes", async () => {
      const failed = await pool.command("sh", { args: ["-c", "exit 7"] }).output();
      assert.deepEqual([failed.code, failed.success, failed.signal], [7, false, null]);
      const killed = await pool.command("sh", { args: ["-c", "kill -KILL $$"] }).output();
      assert.deepEqual([killed.code, killed.success, killed.signal], [137, false, "SIGKILL"]);
      const proc = pool.spawn(["sh", "-c", "kill -SEGV $$"]);
      assert.equal(await proc.exited, 139);
      assert.deepEqual([proc.exitCode, proc.signalCode], [null, "SIGSEGV"]);
      const ok = pool.spawn(["sh", "-c", "exit 3"]);
      assert.equal(await ok.exited, 3);
      assert.deepEqual([ok.exitCode, ok.signalCode], [3, null]);
    });

    it("cancelling stdout closes the pipe in the worker: the command gets SIGPIPE", async () => {
      // Without the release `yes` would run forever. How it notices depends on the pipe: SIGPIPE on a
      // pipe, or ECONNRESET (exit 1) on the socketpairs node and bun use for stdio when bytes were unread.
      assert.equal(await withTimeout(cancelledYes(pool), 5000, "yes is still running"), undefined);
    });

    it("the host killed with SIGKILL: within 1 s its worker, the command and the command's children are gone", async () => {
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
    });

    for (const signal of ["SIGKILL", "SIGTERM"] as const) {
      it(`a worker ended by ${signal} mid-stream: its requests fail with ERR_WORKER_DIED, its commands die, the pool goes on`, async () => {
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
      });
    }

    it("a command that signals its own process group (kill 0)", async () => {
      const own = new Pool({ size: 1, runtime });
      try {
        const sibling = own.command("sleep", { args: ["30"], stdout: "null", stderr: "null" }).spawn();
        const siblingPid = await sibling.spawned;
        const worker = own.stats().workers[0].pid;
        const outcome = await own.command("sh", { args: ["-c", "kill 0; sleep 5"] }).output()
          .then((out) => out.signal, (error: SpawnPoolError) => error.code);
        if (runtime === "deno") {
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
      const proc = pool.spawn([fixture("ignore_term.sh")], { timeout: 200, forceKillAfterDelay: 200 });
      const reader = proc.stdout!.getReader();
      const { value } = await reader.read();
      assert.equal(text(value!), "ready\n");
      while (!(await reader.read()).done);
      assert.equal(await proc.exited, 137);
      assert.equal(proc.signalCode, "SIGKILL");
    });

    it("the forced SIGKILL reaches the group after the command exited: a grandchild ignoring SIGTERM holding stdout dies", async () => {
      // The shell exits on the timeout's SIGTERM; its child ignores it and keeps writing to the stdout it holds (so
      // the quiet period that would release the stream never comes) until the group's SIGKILL.
      const script = `(trap '' TERM; while :; do echo tick; sleep 0.05; done) & echo "pid $!"; wait`;
      const proc = pool.spawn(["sh", "-c", script], { timeout: 100, forceKillAfterDelay: 200 });
      const reader = proc.stdout!.getReader();
      let seen = "";
      while (!/pid \d+\n/.test(seen)) {
        const { value, done } = await reader.read();
        assert.ok(!done, `stdout ended early: ${seen}`);
        seen += text(value!);
      }
      const grandchild = Number(/pid (\d+)\n/.exec(seen)![1]);
      const drained = (async () => {
        while (!(await reader.read()).done);
      })();
      try {
        assert.equal(await withTimeout(proc.exited, 5000, "no exit"), 143);
        const deadline = Date.now() + 1000;
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

    it("a worker stopped (SIGSTOP) cannot hang a command with a timeout: ERR_TIMEOUT, the command and the worker killed, a new worker serves", async () => {
      const own = new Pool({ size: 1, runtime });
      await own.ready();
      const [{ pid: worker }] = own.stats().workers;
      try {
        const proc = own.spawn(["sleep", "30"], { timeout: 300, forceKillAfterDelay: 100 });
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
    });

    it("Bun shape: timeout resolves exited with the kill signal", async () => {
      const proc = pool.spawn(["sleep", "30"], { timeout: 100, killSignal: "SIGINT" });
      assert.equal(await proc.exited, 130);
      assert.equal(proc.signalCode, "SIGINT");
    });

    it("binary output is byte-exact (all 256 byte values)", async () => {
      const all = new Uint8Array(256 * 64).map((_, i) => i & 0xff);
      const file = join(scratch, "all-bytes.bin");
      writeFileSync(file, all);
      const out = await pool.command("cat", { args: [file] }).output();
      assert.deepEqual(out.stdout, all);
      const proc = pool.spawn(["cat", file]);
      assert.deepEqual(new Uint8Array(await new Response(proc.stdout).arrayBuffer()), all);
    });

    it("streams 100 MB of output through, in order", async () => {
      const total = 100 * 1024 * 1024;
      const line = "0123456789abcde\n"; // 16 bytes
      const proc = pool.spawn(["sh", "-c", `yes 0123456789abcde | head -c ${total}`]);
      let seen = 0;
      let mismatch = -1;
      for await (const chunk of proc.stdout!) {
        for (let i = 0; i < chunk.byteLength && mismatch < 0; i += 997) {
          if (chunk[i] !== line.charCodeAt((seen + i) % 16)) mismatch = seen + i;
        }
        seen += chunk.byteLength;
      }
      assert.equal(mismatch, -1, "every sampled byte is where the pattern puts it");
      assert.equal(seen, total);
      assert.equal(await proc.exited, 0);
    });

    it("8 MB of stdin in one write, more than a socket takes at once, comes back through cat intact", async () => {
      const input = new Uint8Array(8 * 1024 * 1024).map((_, i) => (i * 7 + (i >> 11)) & 0xff);
      const proc = pool.spawn(["cat"], { stdin: "pipe" });
      proc.stdin!.write(input);
      const echoed = new Response(proc.stdout).arrayBuffer();
      await proc.stdin!.end();
      assert.ok(Buffer.from(await echoed).equals(input), "the bytes come back unchanged and in order");
      assert.equal(await proc.exited, 0);
    });

    it("a missing program throws at the call, as natively: NotFound (Deno shape), ENOENT (Bun shape)", () => {
      const notFound = (e: Error & { code?: string }) => {
        assert.deepEqual([e.name, e.code, e.message], [
          "NotFound",
          "ENOENT",
          "Failed to spawn 'spawnpool-no-such-program': entity not found",
        ]);
        if (HOST === "deno") assert.ok(e instanceof Deno.errors.NotFound);
        return true;
      };
      assert.throws(() => pool.command("spawnpool-no-such-program").output(), notFound);
      assert.throws(() => pool.command("spawnpool-no-such-program").spawn(), notFound);
      assert.throws(() => pool.command("sh", { env: { PATH: scratch } }).output(), /'sh': entity not found/);
      assert.throws(() => pool.spawn(["spawnpool-no-such-program", "x"]), (e: unknown) => {
        assert.ok(e instanceof SpawnError);
        assert.deepEqual([e.code, e.errno, e.path, e.spawnargs], ["ENOENT", -2, "spawnpool-no-such-program", ["x"]]);
        return true;
      });
    });

    it("a missing program the host leaves to the worker (a relative path) fails later, the same way", async () => {
      const error = await pool.command("./spawnpool-no-such-program", { cwd: scratch }).output().then(
        () => null,
        (e) => e,
      );
      assert.equal(error.name, "NotFound");
      assert.equal(error.code, "ENOENT");
      if (HOST === "deno") assert.ok(error instanceof Deno.errors.NotFound);
      const proc = pool.spawn(["./spawnpool-no-such-program", "x"], { cwd: scratch });
      const bunError = await proc.exited.then(() => null, (e) => e);
      assert.ok(bunError instanceof SpawnError);
      assert.deepEqual([bunError.code, bunError.path, bunError.spawnargs], ["ENOENT", "./spawnpool-no-such-program", [
        "x",
      ]]);
      await assert.rejects(proc.spawned, SpawnError);
    });

    it("a program that is not executable fails with PermissionDenied / EACCES: at the call, or later from its worker", async () => {
      const file = join(scratch, "not-executable.sh");
      writeFileSync(file, "#!/bin/sh\necho no\n");
      chmodSync(file, 0o644);
      const denied = (e: Error & { code?: string }) => e.name === "PermissionDenied" && e.code === "EACCES";
      assert.throws(() => pool.command(file).output(), denied);
      assert.throws(() => pool.spawn([file]), (e: unknown) => e instanceof SpawnError && e.code === "EACCES");
      const error = await pool.command("./not-executable.sh", { cwd: scratch }).output().then(() => null, (e) => e);
      assert.ok(denied(error), String(error));
      const bunError = await pool.spawn(["./not-executable.sh"], { cwd: scratch }).exited.then(() => null, (e) => e);
      assert.equal(bunError.code, "EACCES");
    });

    it("other spawn failures keep their errno name (ENOTDIR), from the host's check or from the worker", async () => {
      // Node throws these from spawn() rather than emitting them; every worker reports the code all the same.
      assert.throws(
        () => pool.spawn(["/etc/passwd/x"]),
        (e: unknown) => e instanceof SpawnError && e.code === "ENOTDIR",
      );
      const bunError = await pool.spawn(["passwd/x"], { cwd: "/etc" }).exited.then(() => null, (e) => e);
      assert.equal(bunError?.code, "ENOTDIR");
    });

    it("a stdin write acknowledged after its command completed does not break the channel", async () => {
      // The background sleep holds stdin unread while the shell exits at once: the worker finishes writing the
      // input after the request completed. The other command on the same worker must not notice.
      const own = new Pool({ size: 1, runtime });
      try {
        const bystander = own.command("sleep", { args: ["1"] }).output();
        for (let i = 0; i < 3; i++) {
          const proc = own.spawn(["sh", "-c", "sleep 0.3 <&0 & exit 0"], {
            stdin: new Uint8Array(1024 * 1024),
            stdout: "ignore",
          });
          assert.equal(await proc.exited, 0);
        }
        assert.equal((await bystander).code, 0);
      } finally {
        await own.close();
      }
    });

    it("a grandchild holding stdout open does not hold the request", async () => {
      const out = await pool.command("sh", { args: ["-c", "sleep 30 & echo $!"] }).output();
      const grandchild = Number(text(out.stdout).trim());
      assert.ok(grandchild > 0);
      assert.ok(alive(grandchild), "completed while the grandchild still holds the pipe");
      process.kill(grandchild, "SIGKILL");
    });

    it("status (Deno shape) and exited (Bun shape) come with the exit, before output a grandchild holds ends", async () => {
      // The grandchild keeps stdout open for 30 s; the pool lets go of it once it is quiet after the exit.
      const script = "sleep 30 & echo $!";
      const order = async (exit: Promise<unknown>, stdout: ReadableStream<Uint8Array>) => {
        const seen: string[] = [];
        let output = "";
        await Promise.all([
          exit.then(() => seen.push("exit")),
          (async () => {
            for await (const chunk of stdout) output += text(chunk);
            seen.push("stdout ended");
          })(),
        ]);
        process.kill(Number(output.trim()), "SIGKILL");
        return seen;
      };
      const deno = pool.command("sh", { args: ["-c", script], stdout: "piped" }).spawn();
      assert.deepEqual(await order(deno.status, deno.stdout), ["exit", "stdout ended"]);
      const bun = pool.spawn(["sh", "-c", script]);
      assert.deepEqual(await order(bun.exited, bun.stdout!), ["exit", "stdout ended"]);
      assert.equal(bun.exitCode, 0);
    });

    it("commands see neither the channel, nor its secret, nor the worker's variables", async () => {
      const child = pool.command("sleep", { args: ["30"], stdout: "null", stderr: "null" }).spawn();
      const pid = await child.spawned;
      // A shell lists its own fds through `ls` (`; :` keeps it from exec-ing ls), so the listing is stable: a
      // process that is still starting, like `sleep` above, briefly has its loader's files open.
      const listFds = ["-c", "ls -l /proc/$$/fd; :"];
      const fdsOf = (listing: string) =>
        listing.split("\n").flatMap((line) => {
          const match = / (\d+) -> (.*)$/.exec(line);
          return match ? [{ fd: Number(match[1]), target: match[2] }] : [];
        });
      const pooled = fdsOf(text((await pool.command("sh", { args: listFds }).output()).stdout));
      assert.ok(pooled.length >= 3, "the listing has the shell's own fds");
      // Its stdout and stderr are the pool's pipes (socketpairs under a Node worker); nothing else may be a socket.
      const sockets = pooled.filter(({ fd, target }) => fd !== 1 && fd !== 2 && target.startsWith("socket:"));
      assert.deepEqual(sockets, [], "no socket is inherited by a command");
      assert.equal(pooled.find(({ fd }) => fd === 0)?.target, "/dev/null", "stdin reads nothing");
      // Whatever a native spawn from this process would pass on too (fds the test runner's own parent left
      // open, without close-on-exec) is not the pool's; anything beyond that would be.
      const native = spawnSync("sh", listFds, { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
      const inherited = new Set(fdsOf(native.stdout).map(({ fd }) => fd));
      const extra = pooled.filter(({ fd }) => fd > 2 && !inherited.has(fd));
      assert.deepEqual(extra, [], "no fd of the host or the worker");
      const environ = await pool.command("cat", { args: [`/proc/${pid}/environ`] }).output();
      assert.doesNotMatch(text(environ.stdout), /SPAWNPOOL_CHANNEL|NODE_CHANNEL_FD/);
      for (const worker of pool.stats().workers) {
        const cmdline = await pool.command("cat", { args: [`/proc/${worker.pid}/cmdline`] }).output();
        assert.doesNotMatch(text(cmdline.stdout), /[0-9a-f]{32}/, "no secret in a worker's arguments");
      }
      child.kill("SIGKILL");
      await child.status;
    });

    it("rejects bad arguments synchronously", () => {
      assert.throws(() => pool.command(42 as unknown as string), TypeError);
      assert.throws(() => pool.command(""), TypeError);
      assert.throws(() => pool.command("echo", { args: ["a\0b"] }), TypeError);
      assert.throws(() => pool.command("echo", { env: { A: 1 as unknown as string } }), TypeError);
      assert.throws(() => pool.command("echo", { stdout: "pipe" as "piped" }), TypeError);
      assert.throws(() => pool.command("echo", { timeout: -1 }), RangeError);
      assert.throws(() => pool.command("echo", { killSignal: "SIGNOPE" }), RangeError);
      assert.throws(() => pool.command("echo", { killSignal: "constructor" }), RangeError);
      assert.throws(() => pool.command("echo", { timeout: 2 ** 31 }), RangeError); // a timer would fire at once
      assert.throws(() => pool.command("echo", { forceKillAfterDelay: Number.MAX_SAFE_INTEGER }), RangeError);
      assert.throws(() => pool.spawn([]), TypeError);
      assert.throws(() => pool.spawn("echo" as unknown as string[]), TypeError);
      assert.throws(() => pool.spawn(["sleep", "1"], { stdin: 5.5 as unknown as "pipe" }), TypeError);
      assert.throws(() => pool.command("echo").outputSync(), TypeError);
      assert.throws(() => new Pool({ size: 0 }), RangeError);
      assert.throws(() => new Pool({ runtime: "python" as RuntimeName }), TypeError);
      assert.throws(() => pool.command("echo", { env: { A: "a\0b" } }), TypeError);
      assert.throws(() => pool.command("echo", { env: { "A\0": "a" } }), TypeError);
      assert.throws(() => pool.command("echo", { cwd: "/tm\0p" }), TypeError);
      assert.throws(() => pool.command("echo", { maxBuffer: -1 }), RangeError);
      assert.throws(() => pool.command("echo", { forceKillAfterDelay: -5 }), RangeError);
      assert.throws(() => pool.spawn(["echo"], { timeout: 1.5 }), RangeError);
      assert.throws(() => new Pool({ maxQueue: -1 }), RangeError);
      assert.throws(() => new Pool({ size: 2.5 }), RangeError);
    });

    it("a cwd that does not exist, or is not a directory, throws at the call; a relative one fails from its worker", async () => {
      const missing = join(scratch, "no-such-dir");
      const file = join(scratch, "a-file");
      writeFileSync(file, "");
      const deno = (name: string, message: string) => (e: Error & { code?: string }) => {
        assert.deepEqual([e.name, e.message], [name, `Failed to spawn 'pwd': ${message}`]);
        return true;
      };
      assert.throws(() => pool.command("pwd", { cwd: missing }).output(), deno("NotFound", `No such cwd '${missing}'`));
      assert.throws(
        () => pool.command("pwd", { cwd: file }).spawn(),
        deno("NotFound", `cwd is not a directory '${file}'`),
      );
      assert.throws(
        () => pool.spawn(["pwd"], { cwd: missing }),
        (e: unknown) => e instanceof SpawnError && e.code === "ENOENT",
      );
      assert.throws(
        () => pool.spawn(["pwd"], { cwd: file }),
        (e: unknown) => e instanceof SpawnError && e.code === "ENOTDIR",
      );
      await assert.rejects(pool.command("pwd", { cwd: "spawnpool-no-such-dir" }).output(), (e: unknown) => {
        return (e as { code?: string }).code === "ENOENT";
      });
      await assert.rejects(pool.spawn(["pwd"], { cwd: "spawnpool-no-such-dir" }).exited, (e: unknown) => {
        return e instanceof SpawnError && e.code === "ENOENT";
      });
      assert.equal(text((await pool.command("echo", { args: ["fine"] }).output()).stdout), "fine\n");
    });

    it("Deno shape: piped stdin with output() and an unknown signal are TypeErrors at the call; kill() after exit throws", async () => {
      assert.throws(() => pool.command("cat", { stdin: "piped" }).output(), {
        name: "TypeError",
        message: "Piped stdin is not supported for this function, use 'Deno.Command.spawn()' instead",
      });
      const child = pool.command("sleep", { args: ["30"] }).spawn();
      assert.throws(() => child.kill("SIGFOO"), { name: "TypeError", message: "Invalid signal: SIGFOO" });
      child.kill("SIGKILL");
      assert.equal((await child.status).signal, "SIGKILL");
      assert.throws(() => child.kill(), { name: "TypeError", message: "Child process has already terminated" });
    });

    it("Deno shape: stdin takes any ArrayBuffer or view; anything else errors the stream and closes stdin, as Deno's", async () => {
      const child = pool.command("cat", { stdin: "piped", stdout: "piped" }).spawn();
      const writer = child.stdin.getWriter();
      await writer.write(new TextEncoder().encode("a").buffer as unknown as Uint8Array);
      await writer.write(new DataView(new TextEncoder().encode("b").buffer) as unknown as Uint8Array);
      await assert.rejects(writer.write("text" as unknown as Uint8Array), {
        name: "TypeError",
        message: "Expected ArrayBuffer or ArrayBufferView for write chunk",
      });
      const out = await withTimeout(child.output(), 5000, "cat never saw its stdin close");
      assert.deepEqual([out.code, text(out.stdout)], [0, "ab"]);
    });

    it("output streams have the reading helpers of Deno's and Bun's: text(), json(), bytes(), arrayBuffer()", async () => {
      const json = pool.command("echo", { args: ['{"a":1}'], stdout: "piped" }).spawn();
      assert.deepEqual(await json.stdout.json(), { a: 1 });
      const bytes = pool.spawn(["printf", "ab"]);
      assert.deepEqual(await bytes.stdout!.bytes(), new TextEncoder().encode("ab"));
      const textOut = pool.command("echo", { args: ["t"], stdout: "piped", stderr: "piped" }).spawn();
      assert.equal(await textOut.stdout.text(), "t\n");
      assert.equal((await textOut.stderr.arrayBuffer()).byteLength, 0);
    });

    it("Deno shape: kill(0) sends nothing while the command runs, and throws once it has terminated", async () => {
      const child = pool.command("sleep", { args: ["30"] }).spawn();
      child.kill(0);
      child.kill("SIGTERM");
      assert.deepEqual(await child.status, { success: false, code: 143, signal: "SIGTERM" });
      assert.throws(() => child.kill(0), { name: "TypeError", message: "Child process has already terminated" });
    });

    it("request building ignores a tampered Array iterator and options planted on Object.prototype", async () => {
      const iterator = Array.prototype[Symbol.iterator];
      const proto = Object.prototype as Record<string, unknown>;
      let command;
      try {
        Array.prototype[Symbol.iterator] = () => {
          throw new Error("iterated");
        };
        proto.cwd = "/spawnpool-planted-cwd";
        proto.uid = 12345;
        command = pool.command("sh", { args: ["-c", "echo $A; pwd"], env: { A: "own" }, cwd: scratch });
      } finally {
        Array.prototype[Symbol.iterator] = iterator;
        delete proto.cwd;
        delete proto.uid;
      }
      assert.equal(text((await command.output()).stdout), `own\n${realpathSync(scratch)}\n`);
    });

    it("Bun shape: the stdio array wins over stdin/stdout/stderr; slots past stderr may only be empty, as Bun checks them", async () => {
      const proc = pool.spawn(["sh", "-c", "echo out; echo err >&2"], {
        stdout: "ignore",
        stdio: ["ignore", "pipe", "pipe", undefined, "ignore", null, new Blob([])],
      });
      assert.deepEqual(proc.stdio, [null, null, null, null, null, null, null]);
      assert.deepEqual([await proc.stdout!.text(), await proc.stderr!.text(), await proc.exited], [
        "out\n",
        "err\n",
        0,
      ]);
      const spawnWith = (stdio: unknown) => () => pool.spawn(["true"], { stdio: stdio as unknown[] });
      assert.throws(spawnWith("pipe"), { name: "TypeError", message: "stdio must be an array" });
      assert.throws(spawnWith(["socket-fd", "pipe", "pipe"]), /'socket-fd' is only supported at indices >= 3/);
      assert.throws(spawnWith(["ignore", "pipe", "pipe", new Blob(["x"])]), /Blob cannot be used for stdio\[3\] yet/);
      assert.throws(spawnWith(["ignore", "pipe", "pipe", new Response("x")]), /Blob cannot be used for stdio\[3\] yet/);
      assert.throws(
        spawnWith(["ignore", "pipe", "pipe", "ignore", new ReadableStream()]),
        /ReadableStream cannot be used for stdio\[4\] yet/,
      );
      assert.throws(spawnWith(["ignore", "pipe", "pipe", "pipe"]), /stdio\[3\] cannot be given to a command in a pool/);
    });

    it("Bun shape: a slot's own descriptor (numbers, Bun.stdout) inherits; another, or a Bun.file(), is relayed in Bun", async () => {
      const proc = pool.spawn(["sh", "-c", "exit 3"], { stdin: 0, stdout: 1, stderr: 2 });
      assert.deepEqual([proc.stdin, proc.stdout, proc.stderr], [undefined, undefined, undefined]);
      assert.equal(await proc.exited, 3);
      const echoed = pool.spawn(["cat"], { stdin: new Request("http://localhost/", { method: "POST", body: "req" }) });
      assert.equal(await new Response(echoed.stdout).text(), "req");
      if (HOST !== "bun") {
        // No Bun.file() to relay through: a descriptor of the host's cannot be given to a command in a pool.
        assert.throws(() => pool.spawn(["true"], { stdout: 2 }), /stdout cannot be the host's file descriptor 2/);
        assert.throws(() => pool.spawn(["true"], { stdin: 7 as 0 }), /stdin cannot be the host's file descriptor 7/);
        return;
      }
      const Bun = (globalThis as unknown as { Bun: { file(pathOrFd: string | number): Blob } }).Bun;
      const input = join(scratch, "relay-in");
      const output = join(scratch, "relay-out");
      writeFileSync(input, "from a file descriptor\n");
      const fd = openSync(input, "r");
      try {
        // stdin from a descriptor of the host's, stdout to a Bun.file(path), stderr to another descriptor.
        const errFd = openSync(join(scratch, "relay-err"), "w");
        const relayed = pool.spawn(["sh", "-c", "cat; echo to-stderr >&2"], {
          stdin: fd as 0,
          stdout: Bun.file(output) as unknown as "pipe",
          stderr: errFd as 2,
        });
        assert.equal(await relayed.exited, 0);
        assert.equal(readFileSync(output, "utf8"), "from a file descriptor\n", "written before exited resolved");
        closeSync(errFd);
        assert.equal(readFileSync(join(scratch, "relay-err"), "utf8"), "to-stderr\n");
      } finally {
        closeSync(fd);
      }
    });

    it("balances requests across workers", async () => {
      const before = pool.stats().workers.map((w) => w.completed);
      await Promise.all(Array.from({ length: 20 }, () => pool.command("true").output()));
      const after = pool.stats().workers.map((w) => w.completed);
      assert.ok(after.every((n, i) => n > before[i]), `every worker ran some: ${before} -> ${after}`);
    });

    it("close() drains, then rejects new work with ERR_POOL_CLOSED", async () => {
      const running = pool.command("sh", { args: ["-c", "sleep 0.2; echo late"] }).output();
      await pool.close();
      assert.equal(text((await running).stdout), "late\n");
      assert.equal(pool.stats().workers.length, 0);
      await assert.rejects(
        pool.command("echo").output(),
        (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_POOL_CLOSED",
      );
    });
  });
}

// These pools run the host's own workers, as they did when that was the default (the default is tested below).
describe(`${HOST} host, pool lifecycle`, () => {
  it("close({ drain: false }) fails running commands with ERR_POOL_CLOSED and kills them", async () => {
    const pool = new Pool({ size: 1, runtime: HOST });
    const child = pool.command("sleep", { args: ["30"] }).spawn();
    const pid = await child.spawned;
    await pool.close({ drain: false });
    await assert.rejects(child.status, (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_POOL_CLOSED");
    assert.deepEqual(await survivors([pid]), [], "the worker killed the command's group on its way out");
  });

  it("close() runs the commands submitted while the workers were starting, then waits for the workers to exit", async () => {
    const before = new Set(childPids(process.pid));
    const pool = new Pool({ size: 2, runtime: HOST });
    const deno = pool.command("echo", { args: ["a"] }).output();
    const bun = pool.spawn(["echo", "b"]);
    await pool.close();
    assert.equal(text((await deno).stdout), "a\n");
    assert.equal(await bun.exited, 0);
    const left = childPids(process.pid).filter((pid) => !before.has(pid) && alive(pid));
    assert.deepEqual(left, [], "no worker outlives close()");
  });

  it("a worker that exits before its hello fails the queued command (no endless restarts)", async () => {
    const pool = new Pool({ size: 1, runtime: HOST, execPath: "/bin/false" });
    try {
      await withTimeout(
        assert.rejects(
          pool.command("echo").output(),
          (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_WORKER_START",
        ),
        15_000,
        "the command hangs",
      );
      assert.ok(pool.stats().started <= 1, `one start, not a restart loop (${pool.stats().started})`);
    } finally {
      await pool.close();
    }
  });

  it("ready() rejects when a worker cannot start, and the pool goes on with the others", async () => {
    process.env.FAIL_LATER_EXEC = process.execPath;
    process.env.FAIL_LATER_DIR = mkdtempSync(join(scratch, "fail-later-"));
    const pool = new Pool({ size: 2, runtime: HOST, execPath: fixture("fail_later_starts.sh") });
    try {
      await withTimeout(
        assert.rejects(pool.ready(), (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_WORKER_START"),
        15_000,
        "ready() hangs",
      );
      const out = await pool.command("echo", { args: ["still here"] }).output();
      assert.equal(text(out.stdout), "still here\n");
    } finally {
      delete process.env.FAIL_LATER_EXEC;
      delete process.env.FAIL_LATER_DIR;
      await pool.close();
    }
  });

  it("close() kills a worker that does not exit once its channel closed (node stuck in process.exit())", async () => {
    process.env.STUCK_NODE = HOST === "node" ? process.execPath : "node";
    const pool = new Pool({ size: 1, runtime: "node", execPath: fixture("node_stuck_at_exit.sh") });
    await pool.ready();
    const [{ pid }] = pool.stats().workers;
    try {
      assert.equal(text((await pool.command("echo", { args: ["hi"] }).output()).stdout), "hi\n");
      await withTimeout(pool.close(), 15_000, "close() waits for a stuck worker");
      assert.equal(alive(pid), false);
    } finally {
      delete process.env.STUCK_NODE;
      if (alive(pid)) process.kill(pid, "SIGKILL");
    }
  });

  it("a node worker stays small while output runs through it (it forks every command)", {
    skip: process.platform !== "linux" && "reads /proc",
  }, async () => {
    const file = join(scratch, "one-mb");
    writeFileSync(file, new Uint8Array(2 ** 20).fill(7));
    const pool = new Pool({ size: 1, runtime: "node" });
    try {
      const cat = () => pool.command("cat", { args: [file] }).output().then((o) => o.stdout.byteLength);
      const run = (count: number) => Promise.all(Array.from({ length: count }, cat));
      await run(4);
      const [{ pid }] = pool.stats().workers;
      const before = rssAnonBytes(pid);
      let largest = before;
      for (let i = 0; i < 40; i++) {
        assert.deepEqual(await run(4), Array(4).fill(2 ** 20));
        largest = Math.max(largest, rssAnonBytes(pid));
      }
      // 160 MB went through; the worker's garbage buffers are collected every few MB (adapters/node.ts).
      const grewMB = (largest - before) / 2 ** 20;
      assert.ok(grewMB < 24, `the worker grew by ${grewMB.toFixed(0)} MB`);
    } finally {
      await pool.close();
    }
  });

  it("await using closes the pool", async () => {
    let stats;
    {
      await using pool = new Pool({ size: 1, runtime: HOST });
      await pool.command("true").output();
      stats = pool;
    }
    await assert.rejects(stats.command("true").output(), SpawnPoolError);
  });

  it("a worker runtime that cannot be found fails requests with ERR_WORKER_START", async () => {
    const pool = new Pool({ size: 1, runtime: HOST, execPath: join(scratch, "no-such-runtime") });
    await assert.rejects(
      pool.command("echo").output(),
      (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_WORKER_START",
    );
    await pool.close();
  });

  it("a worker runtime found neither in node_modules/.bin nor on PATH fails ready() and requests with ERR_WORKER_START, and the host exits", async () => {
    const pool = new Pool({ size: 1 });
    const other = HOST === "bun" ? "node" : "bun";
    // A copy of the sources outside the checkout, run from a directory with no node_modules above it: nothing to
    // find but PATH, which is emptied.
    const copy = join(scratch, "no-runtimes");
    for (
      const entry of ["mod.ts", "pool.ts", "package.json", "core", "shapes", "adapters", "worker", "tests/fixtures"]
    ) {
      cpSync(join(root, entry), join(copy, entry), { recursive: true });
    }
    const [exe, ...args] = hostArgv(join(copy, "tests", "fixtures", "runtime_not_on_path.ts"), other);
    // The lookup fails before the start's first await; if the pool started it again at once, for ever, the script
    // would spin without end (it takes well under a second otherwise) and the timeout would fail this test with
    // ERR_TIMEOUT.
    const out = await pool.command(exe, { args, cwd: copy, env: { PATH: scratch }, timeout: 10_000 }).output();
    const lines = text(out.stdout).trim().split("\n");
    assert.equal(lines.length, 2, text(out.stdout) + text(out.stderr));
    for (const line of lines) {
      assert.match(line, new RegExp(`^ERR_WORKER_START Cannot find "${other}" .*in node_modules/\\.bin .* or on PATH`));
    }
    assert.equal(out.code, 0);
    await pool.close();
  });

  it("a worker runtime installed from npm (node_modules/.bin) is found without PATH", async () => {
    const pool = new Pool({ size: 1 });
    const other = HOST === "bun" ? "node" : "bun";
    const [exe, ...args] = hostArgv(fixture("runtime_not_on_path.ts"), other);
    const out = await pool.command(exe, { args, cwd: scratch, env: { PATH: scratch }, timeout: 20_000 }).output();
    assert.deepEqual(text(out.stdout).trim().split("\n"), ["started", "started"], text(out.stderr));
    assert.equal(out.code, 0);
    await pool.close();
  });

  it("maxQueue rejects beyond the queue with ERR_QUEUE_FULL", async () => {
    const pool = new Pool({ size: 1, runtime: HOST, maxQueue: 1 });
    const first = pool.command("echo", { args: ["queued"] }).output();
    await assert.rejects(
      pool.command("echo").output(),
      (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_QUEUE_FULL",
    );
    assert.equal(text((await first).stdout), "queued\n");
    await pool.close();
  });

  it("drop-ins on the default pool: new Command(), spawn([...]) and spawn({ cmd })", async () => {
    const out = await new Command("echo", { args: ["deno-shaped"] }).output();
    assert.equal(text(out.stdout), "deno-shaped\n");
    assert.equal(await readAll(spawn(["echo", "bun-shaped"]).stdout), "bun-shaped\n");
    const proc = spawn({ cmd: ["sh", "-c", "exit 4"] });
    assert.equal(await proc.exited, 4);
  });

  it("without runtime, a pool runs native workers where the binary is present (a checkout's native/build/)", async () => {
    await using pool = new Pool({ size: 1 });
    assert.equal(pool.stats().runtime, "native");
    assert.equal(text((await pool.command("echo", { args: ["default"] }).output()).stdout), "default\n");
    const [{ pid }] = pool.stats().workers;
    assert.equal(
      realpathSync(`/proc/${pid}/exe`),
      realpathSync(fileURLToPath(new URL("../native/build/spawnpool-worker", import.meta.url).href)),
    );
    assert.equal(pool.stats().runtime, "native");
  });

  it("without runtime, a native worker that does not say hello leaves the pool on the host's runtime", async () => {
    const platform = currentPlatform();
    const pool = new PoolCore({
      ...platform,
      nativeAvailable: () => true,
      // A native worker that exits before its hello.
      launch: (runtime, execPath) => platform.launch(runtime, runtime === "native" ? "/bin/false" : execPath),
    }, { size: 2 });
    try {
      assert.equal(pool.stats().runtime, "native");
      await withTimeout(pool.ready(), 15_000, "ready() hangs");
      assert.equal(pool.stats().runtime, HOST);
      assert.equal(pool.stats().workers.length, 2);
      const out = await new PoolCommand(pool, "echo", { args: ["fallback"] }).output();
      assert.equal(text(out.stdout), "fallback\n");
    } finally {
      await pool.close();
    }
  });

  it("with execPath and no runtime, a pool runs the host's runtime from that executable", async () => {
    await using pool = new Pool({ size: 1, execPath: process.execPath });
    assert.equal(text((await pool.command("echo", { args: ["host"] }).output()).stdout), "host\n");
    assert.equal(pool.stats().runtime, HOST);
  });

  it("a script using the default pool exits on its own", async () => {
    const pool = new Pool({ size: 1 });
    const [exe, ...args] = hostArgv(fixture("default_pool_once.ts"));
    // If the script hung, the timeout would fail this test with ERR_TIMEOUT.
    const out = await pool.command(exe, { args, timeout: 30_000 }).output();
    assert.equal(text(out.stdout), "once\n");
    assert.equal(out.code, 0);
    await pool.close();
  });
});

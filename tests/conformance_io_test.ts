/**
 * The conformance suite, stdio, arguments, environment and output, in both API shapes, byte for byte: for each
 * worker runtime (SPAWNPOOL_TEST_WORKERS, see tests/_conformance.ts) under the host runtime that runs this file
 * (`deno test`, `bun test`, `node --test`), against real processes.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { promisify } from "node:util";
import { SpawnError, SpawnPoolError } from "../mod.ts";
import { childProcessFor } from "../node.ts";
import { fixture, hostArgv } from "./_helpers.ts";
import { bytes, forEachWorker, itUnlessRemote, readAll, scratch, text } from "./_conformance.ts";

await forEachWorker("stdio, arguments, environment and output", (pool, runtime, workers) => {
  const itWorkers = itUnlessRemote(
    workers,
    'stats() lists the agents that ran its commands (runtime "remote", none before the first), not workers ready() starts',
  );
  itWorkers("starts every worker on ready()", async () => {
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
    const own = workers.newPool(1);
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

  // The fixture's host would test only a local pool of its own.
  const itInherit = itUnlessRemote(
    workers,
    `stdout and stderr "inherit" are the agent's, on its machine, not the caller's`,
  );
  itInherit("stdout and stderr inherit reach the host's own stdout and stderr", async () => {
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

  it("a signal without a name (real-time) ends the command as code 128 + its number; the worker goes on", async () => {
    // Node's own child_process reports such a child as exit code 0 with no signal, and so do Node workers (they see
    // only what Node tells them); the other workers report it as a shell does.
    // Under qemu-user the worker sees the signal renumbered: qemu maps the host's SIGRTMIN (glibc's 34) to the emulated
    // kernel's first real-time signal (32), so the host's 36 reaches the worker as 34 (qemu's linux-user/signal.c).
    const expected = runtime === "node" ? [0, true, null] : [128 + (workers.emulated ? 34 : 36), false, null];
    const out = await pool.command("sh", { args: ["-c", "kill -36 $$"] }).output();
    assert.deepEqual([out.code, out.success, out.signal], expected);
    const proc = pool.spawn(["sh", "-c", "kill -36 $$"]);
    assert.equal(await proc.exited, expected[0]);
    assert.deepEqual([proc.exitCode, proc.signalCode], [expected[0], null]);
    assert.equal(text((await pool.command("echo", { args: ["after"] }).output()).stdout), "after\n");
  });

  it("piped output is the kind each shape's runtime gives: sockets for the drop-in and the Bun shape, a pipe for the Deno shape", async () => {
    // Node's child_process and Bun.spawn give a child socketpairs, Deno.Command pipes (a writer whose reader went away
    // gets ECONNRESET from a socket, SIGPIPE from a pipe). The native worker gives each shape its own runtime's kind;
    // a JS worker gives what its runtime gives for every shape.
    const kinds = { native: ["socket", "socket", "fifo"], deno: ["fifo", "fifo", "fifo"] }[runtime as string] ??
      ["socket", "socket", "socket"];
    const statArgs = ["-L", "-c", "%F", "/proc/self/fd/1"];
    const { execFile } = childProcessFor(pool);
    const dropIn = await promisify(execFile)("stat", statArgs);
    const bunShape = await readAll(pool.spawn(["stat", ...statArgs]).stdout);
    const denoShape = text((await pool.command("stat", { args: statArgs }).output()).stdout);
    assert.deepEqual([dropIn.stdout, bunShape, denoShape], kinds.map((kind) => `${kind}\n`));
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

  it("output() collects 3 MB on stdout and on stderr byte for byte, and one command after another alike", async () => {
    // Past the worker's 1 MB piece of collected output, which goes ahead of the exit; the same file on both outputs.
    const data = new Uint8Array(3 * 1024 * 1024 + 4321).map((_, i) => (i * 31 + (i >> 13)) & 0xff);
    const file = join(scratch, "three-mb.bin");
    writeFileSync(file, data);
    for (let round = 0; round < 3; round++) {
      const out = await pool.command("sh", { args: ["-c", 'cat "$1"; cat "$1" >&2', "sh", file] }).output();
      assert.equal(out.code, 0);
      assert.ok(Buffer.from(out.stdout).equals(data), `stdout, round ${round}`);
      assert.ok(Buffer.from(out.stderr).equals(data), `stderr, round ${round}`);
      const small = await pool.command("echo", { args: ["small"] }).output();
      assert.equal(text(small.stdout), "small\n");
    }
  });

  it("30 outputs of 200 KB at once arrive intact, each in memory of its own", async () => {
    // Larger than a channel read's buffer in parts: frames that span reads, read in part straight into their payloads.
    const data = new Uint8Array(200 * 1024 + 77).map((_, i) => (i * 13 + (i >> 9)) & 0xff);
    const file = join(scratch, "two-hundred-kb.bin");
    writeFileSync(file, data);
    const outs = await Promise.all(Array.from({ length: 30 }, () => pool.command("cat", { args: [file] }).output()));
    for (const [i, out] of outs.entries()) assert.ok(Buffer.from(out.stdout).equals(data), `output ${i}`);
    for (const out of outs) out.stdout.fill(0); // no output shares bytes with another
    assert.ok(outs.every((out) => out.stdout.byteLength === data.byteLength && out.stdout.every((b) => b === 0)));
    const again = await pool.command("cat", { args: [file] }).output();
    assert.ok(Buffer.from(again.stdout).equals(data), "nor with the channel's buffer or a later output");
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

  const itBalance = itUnlessRemote(workers, "stats() has an entry per agent (one here), not per worker of the agent's");
  itBalance("balances requests across workers", async () => {
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

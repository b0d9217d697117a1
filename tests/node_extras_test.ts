/**
 * The `./node` drop-in beyond what node:child_process offers: pools of its own, detached commands and the pool's
 * life, against real processes under `node --test`, `bun test` and `deno test`.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import * as native from "node:child_process";
import nativeDefault from "node:child_process";
import { EventEmitter } from "node:events";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { promisify } from "node:util";
import { configureDefaultPool, Pool } from "../mod.ts";
import * as pooled from "../node.ts";
import pooledDefault from "../node.ts";
import { childProcessFor } from "../node.ts";
import { alive, HOST, hostArgv, survivors } from "./_helpers.ts";
import { COMPAT_WORKERS, scratch, thrownError } from "./_node_compat.ts";

const spawned = (child: native.ChildProcess) =>
  new Promise<number>((resolve, reject) => {
    child.once("spawn", () => resolve(child.pid!));
    child.once("error", reject);
  });

describe(`spawnpool/node beyond node:child_process (${HOST})`, () => {
  it("detached commands outlive the pool; the others are killed with it", async () => {
    const pool = new Pool({ size: 1, runtime: COMPAT_WORKERS ?? HOST });
    const cp = childProcessFor(pool);
    const kept = await spawned(cp.spawn("sleep", ["30"], { detached: true, stdio: "ignore" }));
    const killed = await spawned(cp.spawn("sleep", ["30"], { stdio: "ignore" }));
    await pool.close({ drain: false });
    try {
      assert.equal(alive(kept), true, "the detached command still runs");
      assert.deepEqual(await survivors([killed]), [], "the attached command was killed with its worker");
    } finally {
      process.kill(kept, "SIGKILL");
    }
  });

  it("execFile's timeout ends the command's process group, its children too", async () => {
    // Node signals only the command; the pool signals its group, as its own `timeout` does, so a shell's
    // background child does not outlive it. The child's pid is the first line of output.
    const { stdout, error } = await new Promise<{ stdout: string; error: Error | null }>((resolve) => {
      // 1 s for the shell to start the child and print its pid before the timeout, on a loaded runner.
      pooled.execFile("sh", ["-c", "sleep 30 & echo $!; wait"], { timeout: 1000 }, (error, stdout) => {
        resolve({ stdout: String(stdout), error });
      });
    });
    const child = Number(stdout.split("\n")[0]);
    assert.ok(child > 0, `the background child's pid: ${JSON.stringify(stdout)}`);
    assert.equal((error as { killed?: boolean } | null)?.killed, true);
    assert.deepEqual(await survivors([child]), [], "the background child was signalled with its parent");
  });

  it("'exit' comes when the command exits, before a grandchild lets go of stdout", async () => {
    // The grandchild holds stdout for 3 s; its pid comes first, so the test can end it.
    const child = pooled.spawn("sh", ["-c", "sleep 3 & echo $!; echo early"]);
    let output = "";
    const events: string[] = [];
    child.stdout!.on("data", (chunk) => (output += chunk));
    const closed = new Promise<void>((resolve) => child.on("close", () => resolve(void events.push("close"))));
    await new Promise<void>((resolve) => child.on("exit", () => resolve(void events.push("exit"))));
    assert.equal(child.exitCode, 0);
    assert.equal(child.kill(), false, "nothing to kill after 'exit'");
    await closed;
    const [grandchild, ...rest] = output.split("\n");
    // The pool lets go of a stream the grandchild keeps open once it has been quiet after the exit.
    const stillHolding = alive(Number(grandchild));
    process.kill(Number(grandchild), "SIGKILL");
    assert.equal(stillHolding, true, "'close' came while the grandchild still held stdout");
    assert.deepEqual(events, ["exit", "close"]);
    assert.deepEqual(rest, ["early", ""]);
  });

  it("a stdio the pool cannot give runs natively, with one warning", async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => warnings.push(String(warning.code));
    process.on("warning", onWarning);
    try {
      for (let i = 0; i < 2; i++) {
        const child = pooled.spawn("true", [], { stdio: ["pipe", "pipe", "pipe", "ignore", "pipe"] });
        assert.ok(child instanceof native.ChildProcess, "the runtime's own ChildProcess");
        await new Promise((resolve) => child.on("close", resolve));
      }
      await new Promise((resolve) => setTimeout(resolve, 10)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", onWarning);
    }
    assert.deepEqual(warnings.filter((code) => code === "SPAWNPOOL_NATIVE_FALLBACK"), ["SPAWNPOOL_NATIVE_FALLBACK"]);
  });

  it("another pooled command's streams as stdio run in the pool, without a warning", async () => {
    const warnings: string[] = [];
    const onWarning = (warning: Error & { code?: string }) => warnings.push(String(warning.code));
    process.on("warning", onWarning);
    try {
      const cat = pooled.spawn("cat");
      const echo = pooled.spawn("echo", ["via the host"], { stdio: ["ignore", cat.stdin!, "inherit"] });
      const upper = pooled.spawn("tr", ["a-z", "A-Z"], { stdio: [cat.stdout!, "pipe", "inherit"] });
      for (const child of [cat, echo, upper]) assert.ok(!(child instanceof native.ChildProcess), "a pooled child");
      const out: Buffer[] = [];
      upper.stdout!.on("data", (chunk: Buffer) => out.push(chunk));
      await new Promise((resolve) => echo.on("close", resolve));
      cat.stdin!.end("and the parent\n");
      await new Promise((resolve) => upper.on("close", resolve));
      assert.equal(Buffer.concat(out).toString(), "VIA THE HOST\nAND THE PARENT\n");
      await new Promise((resolve) => setTimeout(resolve, 10)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", onWarning);
    }
    assert.deepEqual(warnings.filter((code) => code === "SPAWNPOOL_NATIVE_FALLBACK"), []);
  });

  it("reads options from the object itself, never from Object.prototype", async () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.cwd = "/not/existing";
    proto.shell = true;
    proto.uid = 12345; // read, it would run the command as another user (or fail with EPERM)
    proto.argv0 = "tampered";
    try {
      const { stdout } = await promisify(pooled.execFile)("sh", ["-c", "pwd; id -u; echo $0"]);
      const [cwd, uid, argv0] = stdout.split("\n");
      assert.deepEqual([cwd, uid], [process.cwd(), String(process.getuid!())]);
      assert.notEqual(argv0, "tampered");
      const child = pooled.spawn("pwd");
      const [code] = await new Promise<unknown[]>((resolve) => child.on("close", (...a) => resolve(a)));
      assert.equal(code, 0);
    } finally {
      delete proto.cwd;
      delete proto.shell;
      delete proto.uid;
      delete proto.argv0;
    }
  });

  it("shows an error's code as Node does, in String(error) and its stack", () => {
    const error = thrownError(() => pooled.spawn("echo", [], { timeout: -1 }));
    assert.equal(error.name, "RangeError");
    assert.match(String(error), /^RangeError \[ERR_OUT_OF_RANGE\]: The value of "timeout" is out of range\./);
    assert.match(error.stack!, /^RangeError \[ERR_OUT_OF_RANGE\]: /);
    assert.equal(
      thrownError(() => pooled.spawn("echo", [], { serialization: "x" as "json" })).message,
      "The property 'options.serialization' must be one of: undefined, 'json', 'advanced'. Received 'x'",
    );
  });

  it("new ChildProcess() is a child with no command, as in Node; its spawn() is not implemented", () => {
    // execa builds one to report a command that failed before it started, and emits its events itself.
    const observe = (Class: new () => native.ChildProcess) => {
      const child = new Class();
      const seen: unknown[] = [];
      child.on("error", (error) => seen.push(error.message));
      child.emit("error", new Error("early"));
      return {
        emitter: child instanceof EventEmitter,
        // Left out, held to Node's below: `connected` (Bun's getter throws on a child with no command) and
        // `spawnfile` (Node's null, Deno's "", Bun's undefined).
        fields: [child.pid, child.exitCode, child.signalCode, child.killed],
        seen,
      };
    };
    assert.deepEqual(
      observe(pooled.ChildProcess as unknown as new () => native.ChildProcess),
      observe(native.ChildProcess),
    );
    const child = new (pooled.ChildProcess as unknown as new () => {
      connected: boolean;
      spawnfile: string | null;
      spawn(o: unknown): void;
    })();
    assert.equal(child.connected, false);
    assert.equal(child.spawnfile, null);
    const error = thrownError(() => child.spawn({ file: "echo", args: ["echo"], envPairs: [] }));
    assert.equal((error as Error & { code?: string }).code, "ERR_METHOD_NOT_IMPLEMENTED");
    assert.match(error.message, /use spawn\(\), execFile\(\) or exec\(\)/);
  });

  it("output across stdout and stderr comes in the order the worker read it, also when it arrives at once", async () => {
    // 50 ms between writes: the worker reads each on its own; the host is busy while they arrive, so they
    // reach it together and only the host can reorder them.
    const child = pooled.spawn("sh", [
      "-c",
      "for i in 1 2 3 4; do echo o$i; sleep 0.05; echo e$i >&2; sleep 0.05; done",
    ]);
    const seen: string[] = [];
    for (const stream of [child.stdout!, child.stderr!]) {
      stream.setEncoding("utf8");
      stream.on("data", (chunk: string) => seen.push(...chunk.trim().split("\n")));
    }
    child.on("spawn", () => {
      const until = Date.now() + 600;
      while (Date.now() < until); // busy: the output queues up
    });
    await new Promise((resolve) => child.on("close", resolve));
    assert.deepEqual(seen, ["o1", "e1", "o2", "e2", "o3", "e3", "o4", "e4"]);
  });

  it("native workers: a writer whose socket is destroyed mid-stream ends as under Node (ECONNRESET), not by SIGPIPE", async () => {
    // `yes` writes without end; its reader destroys stdout after the first chunk. Node has stopped reading by then, so
    // `yes` is blocked on the full socket and the close fails its write with ECONNRESET: exit 1. A worker that closed
    // the socket it had just emptied would give EPIPE and SIGPIPE instead (4 of 40 before the worker waited for the
    // writer to stop: docs/differences.md).
    await using pool = new Pool({ size: 1, runtime: "native" });
    const cp = childProcessFor(pool);
    const endings: string[] = [];
    for (let i = 0; i < 20; i++) {
      endings.push(
        await new Promise<string>((resolve, reject) => {
          const child = cp.spawn("yes", [], { stdio: ["ignore", "pipe", "pipe"] });
          let stderr = "";
          child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
          child.stdout!.once("data", () => child.stdout!.destroy());
          child.on("error", reject);
          child.on("close", (code, signal) => resolve(`${code} ${signal} ${stderr.trim()}`));
        }),
      );
    }
    assert.deepEqual(
      endings.filter((ending) => ending !== "1 null yes: standard output: Connection reset by peer"),
      [],
    );
  });

  it("an output read only after the other one ended still holds its bytes (tinyexec reads stderr, then stdout)", async () => {
    // Native Node loses the bytes now and then here too (2 of 30 runs when measured): its exit flush can resume the
    // unread stdout before the reader reaches it. The pool delivers the exit a macrotask later, so it never does.
    const lost: number[] = [];
    for (let i = 0; i < 20; i++) {
      const child = pooled.spawn("sh", ["-c", "echo out"]);
      let stdout = "";
      for await (const _ of child.stderr!) { /* to its end */ }
      for await (const chunk of child.stdout!) stdout += chunk;
      if (stdout !== "out\n") lost.push(i);
    }
    assert.deepEqual(lost, []);
  });

  it("stdin is a write-only stream, as Node's pipe socket", async () => {
    const child = pooled.spawn("cat");
    assert.equal((child.stdin as { readable?: unknown }).readable, false);
    assert.equal(child.stdin!.writable, true);
    child.stdin!.end();
    await new Promise((resolve) => child.on("close", resolve));
  });

  it("warns once per process (DEP0190) about args with shell: true", () => {
    const script = join(scratch, "dep0190.mjs");
    writeFileSync(
      script,
      [
        'import process from "node:process";',
        'import { execFileSync } from "node:child_process";',
        `import { spawn } from ${JSON.stringify(new URL("../node.ts", import.meta.url).href)};`,
        "let warnings = 0;",
        'process.on("warning", (warning) => warning.code === "DEP0190" && warnings++);',
        "for (const args of [[], ['a'], ['b']]) {",
        '  await new Promise((resolve) => spawn("echo", args, { shell: true }).on("close", resolve));',
        "}",
        "await new Promise((resolve) => setTimeout(resolve, 10));",
        "const pooledOnly = warnings;",
        'execFileSync("echo", ["c"], { shell: true, stdio: "ignore" }); // the runtime\'s own module',
        "await new Promise((resolve) => setTimeout(resolve, 10));",
        "console.log(pooledOnly, warnings);",
        "process.exit(0);",
      ].join("\n"),
    );
    const [exe, ...args] = hostArgv(script);
    const [pooledOnly, withNative] = native.execFileSync(exe, args, {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
    })
      .trim().split(" ");
    assert.equal(pooledOnly, "1");
    // On Node both modules share Node's once-per-process flag, as a program using only Node's would warn once.
    if (HOST === "node") assert.equal(withNative, "1");
  });

  it("the default export holds every public name of node:child_process's, as `import cp from` meets them", () => {
    const ours = pooledDefault as unknown as Record<string, unknown>;
    const theirs = nativeDefault as unknown as Record<string, unknown>;
    const missing = Object.keys(theirs).filter((name) => !name.startsWith("_") && typeof ours[name] !== "function");
    assert.deepEqual(missing, []);
    assert.equal(ours.ChildProcess, pooled.ChildProcess);
  });

  it("configureDefaultPool refuses once the default pool has started", async () => {
    await promisify(pooled.execFile)("true");
    assert.throws(() => configureDefaultPool({ size: 1 }), /already started/);
  });

  for (const runtime of ["node", "bun", "deno", "native"] as const) {
    it(`childProcessFor(pool) runs on that pool (${runtime} workers)`, async () => {
      await using pool = new Pool({ size: 1, runtime });
      const { execFile } = childProcessFor(pool);
      const { stdout } = await promisify(execFile)("sh", ["-c", "echo $0 $1", "a", "b"]);
      assert.equal(stdout, "a b\n");
      assert.equal(pool.stats().workers[0].completed, 1);
    });
  }
});

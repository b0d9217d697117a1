/**
 * The conformance suite, spawn failures, bad arguments, and what a command can and cannot see: for each worker
 * runtime (SPAWNPOOL_TEST_WORKERS, see tests/_conformance.ts) under the host runtime that runs this file (`deno
 * test`, `bun test`, `node --test`), against real processes.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { it } from "node:test";
import { Pool, type RuntimeName, SpawnError } from "../mod.ts";
import { alive, HOST, withTimeout } from "./_helpers.ts";
import { forEachWorker, itUnlessRemote, scratch, text } from "./_conformance.ts";

const title = "spawn failures, bad arguments, and what a command can and cannot see";

await forEachWorker(title, (pool, _runtime, workers) => {
  // The program, its mode and the cwd are the agent machine's: a remote pool sends the command unchecked, and the
  // same errors come back later, from the agent.
  const itChecked = itUnlessRemote(workers, "nothing is checked at the call: the program and the cwd are the agent's");
  itChecked("a missing program throws at the call, as natively: NotFound (Deno shape), ENOENT (Bun shape)", () => {
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

  itChecked(
    "a program on any entry of the call's PATH starts, whichever entry holds it and whatever the others hold",
    async () => {
      // The host's check tries the entries from the last; the worker searches from the first, as execvp does. The host
      // remembers a program it found on a PATH (for the whole process): each step below uses a name of its own, in
      // directories of this test's own, so that every step's call is checked afresh.
      const base = mkdtempSync(join(scratch, "path-"));
      const dirs = ["first", "middle", "last"].map((name) => join(base, name));
      for (const dir of dirs) mkdirSync(dir);
      const env = { PATH: dirs.join(":") };
      const put = (dir: string, program: string, mode: number, says: string) => {
        writeFileSync(join(dir, program), `#!/bin/sh\necho ${says}\n`);
        chmodSync(join(dir, program), mode);
      };
      const run = async (program: string) =>
        text((await pool.command(program, { env, stderr: "null" }).output()).stdout);
      try {
        put(dirs[0], "probe-a", 0o755, "first");
        put(dirs[2], "probe-a", 0o644, "last"); // met first by the host's check: no verdict, the worker runs "first"
        assert.equal(await run("probe-a"), "first\n");
        put(dirs[1], "probe-b", 0o755, "middle");
        assert.equal(await run("probe-b"), "middle\n");
        // Every entry is tried at the call, and none holds it.
        assert.throws(() => pool.command("probe-c", { env }).output(), /'probe-c': entity not found/);
        // Found on this PATH before, so no longer checked at the call: the worker's own search fails.
        rmSync(join(dirs[1], "probe-b"));
        const lost = await Promise.resolve().then(() => pool.command("probe-b", { env }).output())
          .then(() => null, (e) => e);
        assert.equal(lost?.name, "NotFound", String(lost));
      } finally {
        rmSync(base, { recursive: true, force: true });
      }
    },
  );

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

  itChecked(
    "a program that is not executable fails with PermissionDenied / EACCES: at the call, or later from its worker",
    async () => {
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
    },
  );

  itChecked(
    "other spawn failures keep their errno name (ENOTDIR), from the host's check or from the worker",
    async () => {
      // Node throws these from spawn() rather than emitting them; every worker reports the code all the same.
      assert.throws(
        () => pool.spawn(["/etc/passwd/x"]),
        (e: unknown) => e instanceof SpawnError && e.code === "ENOTDIR",
      );
      const bunError = await pool.spawn(["passwd/x"], { cwd: "/etc" }).exited.then(() => null, (e) => e);
      assert.equal(bunError?.code, "ENOTDIR");
    },
  );

  it("a stdin write acknowledged after its command completed does not break the channel", async () => {
    // The background sleep holds stdin unread while the shell exits at once: the worker finishes writing the
    // input after the request completed. The other command on the same worker must not notice.
    const own = workers.newPool(1);
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
    assert.doesNotMatch(text(environ.stdout), /SPAWNPOOL_CHANNEL|SPAWNPOOL_BOOTSTRAP|NODE_CHANNEL_FD/);
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

  itChecked(
    "a cwd that does not exist, or is not a directory, throws at the call; a relative one fails from its worker",
    async () => {
      const missing = join(scratch, "no-such-dir");
      const file = join(scratch, "a-file");
      writeFileSync(file, "");
      // As Deno.Command's output() and spawn(): a cwd that is a file is NotFound, code ENOENT, like a missing one.
      const deno = (name: string, message: string) => (e: Error & { code?: string }) => {
        assert.deepEqual([e.name, e.code, e.message], [name, "ENOENT", `Failed to spawn 'pwd': ${message}`]);
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
    },
  );

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
}, { closePool: true });

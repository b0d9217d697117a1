/**
 * The conformance suite, the Deno and Bun shapes' finer points: the Bun stdio array, file descriptors, tampered
 * prototypes: for each worker runtime (SPAWNPOOL_TEST_WORKERS, see tests/_conformance.ts) under the host runtime
 * that runs this file (`deno test`, `bun test`, `node --test`), against real processes.
 */

import assert from "node:assert/strict";
import { closeSync, openSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { HOST } from "./_helpers.ts";
import { forEachWorker, scratch, text } from "./_conformance.ts";

await forEachWorker("the Deno and Bun shapes' finer points", (pool) => {
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
}, { closePool: true });

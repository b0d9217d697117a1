/**
 * A pool's life: starting, closing, workers that fail to start or stop, the default pool and its runtime, under
 * the host runtime that runs this file, against real processes.
 */

import assert from "node:assert/strict";
import { cpSync, mkdtempSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { currentPlatform } from "../adapters/platform.ts";
import { PoolCommand } from "../shapes/command.ts";
import { PoolCore } from "../core/pool_core.ts";
import { Command, Pool, spawn, SpawnPoolError } from "../mod.ts";
import { alive, childPids, fixture, HOST, hostArgv, rssAnonBytes, survivors, withTimeout } from "./_helpers.ts";
import { readAll, root, scratch, text } from "./_conformance.ts";

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

  // A Node host's first worker reads its channel as libuv made it (a socketpair for an extra "pipe"), the others
  // through a connected pair read into one reused buffer: both must carry a large output whole.
  for (const runtime of [HOST, "native"] as const) {
    it(`every worker carries a large output whole, the pool's first and the others (${runtime} workers)`, async () => {
      await using pool = new Pool({ size: 2, runtime });
      await pool.ready();
      const expected = Array.from({ length: 200_000 }, (_, i) => `${i + 1}\n`).join("");
      const outputs = await Promise.all(
        [0, 1].map(async () => text((await pool.command("seq", { args: ["200000"] }).output()).stdout)),
      );
      for (const output of outputs) {
        assert.equal(output.length, expected.length);
        assert.ok(output === expected, "the output is seq's, byte for byte");
      }
      assert.deepEqual(pool.stats().workers.map((worker) => worker.completed), [1, 1], "one command on each worker");
    });
  }

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
      const entry of [
        "mod.ts",
        "pool.ts",
        "package.json",
        "core",
        "shapes",
        "adapters",
        "worker",
        "remote",
        "tests/fixtures",
      ]
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

  it("a script that ends commands and never reads their output exits on its own, soon after the last", async () => {
    const pool = new Pool({ size: 1 });
    const [exe, ...args] = hostArgv(fixture("walk_away.ts"));
    const out = await pool.command(exe, { args, timeout: 30_000 }).output();
    const exitedAt = Date.now();
    assert.equal(out.code, 0, text(out.stderr));
    // Within a second on a quiet machine (the runtime's own exit included); the margin is for a loaded one. Before
    // the fix it never exited.
    const lastCommandAt = Number(text(out.stdout).trim());
    assert.ok(exitedAt - lastCommandAt < 3000, `exited ${exitedAt - lastCommandAt} ms after its last command`);
    await pool.close();
  });
});

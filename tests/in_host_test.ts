/**
 * `startInHost`: a pool that runs its commands from the host itself (the default pool's way) until a worker is ready,
 * which it starts once two commands run at once.
 * Where a command ran is told by its parent's pid (`$PPID`): the host's, or a worker's. The drop-in's differential
 * suite also runs on such pools (`SPAWNPOOL_COMPAT_WORKERS=in-host`, tools/test.mjs), and tests/cold_start_test.ts's
 * scripts run their command in the host through the default pool.
 */

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { Pool } from "../mod.ts";
import { childProcessFor } from "../node.ts";
import { HOST, survivors, withTimeout } from "./_helpers.ts";

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes).trim();

/** The pid of the process that ran `sh -c 'echo $PPID'` through `pool`, with `options`. */
async function parentOf(pool: Pool, options: { timeout?: number; delay?: number } = {}): Promise<number> {
  const script = options.delay === undefined ? "echo $PPID" : `sleep ${options.delay}; echo $PPID`;
  const out = await pool.command("sh", { args: ["-c", script], timeout: options.timeout }).output();
  assert.equal(out.code, 0);
  return Number(text(out.stdout));
}

/** The process group of a process, from /proc (Linux). */
function groupOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
}

describe(`startInHost (${HOST} host)`, () => {
  it("runs one command after another in the host, and starts no worker", async () => {
    await using pool = new Pool({ startInHost: true });
    for (let i = 0; i < 3; i++) assert.equal(await parentOf(pool), process.pid);
    assert.equal(pool.stats().started, 0);
    assert.deepEqual(pool.stats().workers, []);
  });

  it("a second command at once starts the workers; the host runs commands until one is ready, then none", async () => {
    await using pool = new Pool({ startInHost: true, size: 2 });
    const first = parentOf(pool, { delay: 0.3 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(pool.stats().inFlight, 1, "the host's command is counted in flight");
    assert.equal(pool.stats().started, 0);
    // Nobody waits for a worker to boot: the second runs in the host too, and a worker starts.
    assert.equal(await parentOf(pool), process.pid, "the second ran in the host while a worker started");
    assert.equal(await first, process.pid, "the first ran in the host");
    const deadline = performance.now() + 10_000;
    while (!pool.stats().workers.some((worker) => worker.ready) && performance.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    const workers = pool.stats().workers.filter((worker) => worker.ready).map((worker) => worker.pid);
    assert.ok(workers.length > 0, "a worker started and is ready");
    for (let i = 0; i < 3; i++) {
      const parent = await parentOf(pool);
      assert.ok(
        pool.stats().workers.some((worker) => worker.pid === parent),
        `${parent} is a worker: later commands run there`,
      );
    }
  });

  it("commands that need a process group of their own (timeout, detached) go to a worker", async () => {
    await using pool = new Pool({ startInHost: true, size: 1 });
    const withTimeout = await parentOf(pool, { timeout: 10_000 });
    assert.notEqual(withTimeout, process.pid);
    assert.deepEqual(pool.stats().workers.map((worker) => worker.pid), [withTimeout]);
    await using other = new Pool({ startInHost: true, size: 1 });
    const child = childProcessFor(other).spawn("sh", ["-c", "echo $PPID"], { detached: true });
    let out = "";
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    await new Promise((resolve) => child.on("close", resolve));
    assert.notEqual(Number(out.trim()), process.pid);
  });

  it("a command run in the host stays in the host's process group, as the runtime's own spawn leaves it", async () => {
    await using pool = new Pool({ startInHost: true });
    const out = await pool.command("sh", { args: ["-c", "echo $PPID; cut -d' ' -f5 /proc/$$/stat"] }).output();
    const [parent, group] = text(out.stdout).split("\n").map(Number);
    assert.equal(parent, process.pid);
    assert.equal(group, groupOf(process.pid));
  });

  it("argv0 runs in the host where the host's runtime has it (not Deno's Deno.Command)", async () => {
    await using pool = new Pool({ startInHost: true, size: 1 });
    const child = childProcessFor(pool).spawn("sh", ["-c", "echo $PPID $0"], { argv0: "custom-argv0" });
    let out = "";
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
    const code = await new Promise((resolve) => child.on("close", resolve));
    assert.equal(code, 0);
    const [parent, argv0] = out.trim().split(" ");
    assert.equal(argv0, "custom-argv0");
    if (HOST === "deno") assert.notEqual(Number(parent), process.pid);
    else assert.equal(Number(parent), process.pid);
  });

  it("close({ drain: false }) kills a command running in the host and fails it with ERR_POOL_CLOSED", async () => {
    const pool = new Pool({ startInHost: true });
    const child = pool.command("sh", { args: ["-c", "echo $PPID; exec sleep 30"], stdout: "piped" }).spawn();
    const reader = child.stdout.getReader();
    const first = text((await reader.read()).value!);
    assert.equal(Number(first), process.pid);
    const pid = child.pid!;
    await pool.close({ drain: false });
    await assert.rejects(child.status, { code: "ERR_POOL_CLOSED" });
    await reader.cancel().catch(() => {});
    assert.deepEqual(await survivors([pid]), [], "the command was killed with the pool");
  });

  it("close() lets a command running in the host finish", async () => {
    const pool = new Pool({ startInHost: true });
    const output = pool.command("sh", { args: ["-c", "sleep 0.2; echo done $PPID"] }).output();
    await new Promise((resolve) => setTimeout(resolve, 50));
    await withTimeout(pool.close(), 10_000, "close() did not resolve");
    assert.equal(text((await output).stdout), `done ${process.pid}`);
  });

  it("output that reached a pipe while the host was busy past the stream grace is read, not released unread", async () => {
    // The command exits at once; its background job holds the output open and writes 0.1 s later, while the host
    // is held by synchronous work well past the 200 ms grace that follows an exit. The loop must read what is
    // waiting in the pipe before it lets the stream go: on Node, a due timer runs before the loop polls.
    await using pool = new Pool({ startInHost: true });
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-in-host-"));
    try {
      for (let round = 0; round < 3; round++) {
        // The job marks when it has written, so the busy host waits for that however slow the machine.
        const written = join(scratch, `written-${round}`);
        const child = pool.command("sh", {
          args: ["-c", '(sleep 0.1; echo late; : > "$1") & echo early $PPID', "sh", written],
          stdout: "piped",
        }).spawn();
        const stdout = new Response(child.stdout).text();
        assert.equal((await child.status).code, 0);
        const busy = performance.now();
        while (performance.now() - busy < 500 || (!existsSync(written) && performance.now() - busy < 10_000)) {
          // the host is busy: no event-loop turn until the grace and the background job's write are long past
        }
        assert.ok(existsSync(written), "the background job wrote within 10 s");
        assert.equal(await stdout, `early ${process.pid}\nlate\n`, `round ${round}`);
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("a failed spawn in the host fails that command alone, as on a worker", async () => {
    await using pool = new Pool({ startInHost: true });
    // A relative path: left to the spawn (the host's early check looks up only names and absolute paths).
    await assert.rejects(
      async () => await pool.command("./no-such-command-here").output(),
      (error: Error & { code?: string }) => /ENOENT|NotFound|No such file/.test(`${error.code} ${error.message}`),
    );
    assert.equal(await parentOf(pool), process.pid, "the host still runs the next command");
  });

  it("refuses a startInHost that is not a boolean, and startInHost with remote", () => {
    assert.throws(() => new Pool({ startInHost: "yes" as unknown as boolean }), TypeError);
    assert.throws(
      () => new Pool({ startInHost: true, remote: { servers: "nats://127.0.0.1:4222", subject: "s" } }),
      /startInHost/,
    );
  });
});

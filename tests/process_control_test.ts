/**
 * Process control on native workers, on every shape: `killTree` (nothing a command started outlives it, daemons that
 * left its tree with setsid or a double fork included, whichever way it is ended), and `limits` (rlimits set before
 * the exec; the limit that ended a command named where the kernel says so; the worker serving on). Every process is
 * found by a marker in its command line, from /proc.
 */

import assert from "node:assert/strict";
import { spawn as nodeSpawn, type SpawnOptions } from "node:child_process";
import { randomInt } from "node:crypto";
import { mkdirSync, readdirSync, rmdirSync, statfsSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { after, describe, it } from "node:test";
import { type ChildProcess, childProcessFor } from "../node.ts";
import { Pool } from "../mod.ts";
import { fixture, HOST, hostArgv, markedProcesses, survivors, withTimeout } from "./_helpers.ts";
import { scratch } from "./_conformance.ts";

/** A number no other process's command line holds. */
const newMarker = (): string => String(randomInt(10_000_000, 99_999_999));

/**
 * A command that starts two daemons that leave its tree (`setsid sleep`, and `sleep` in a subshell that exits at
 * once), prints "ready" and sleeps: three processes that hold `marker`.
 */
const daemonizing = (marker: string, tail = `sleep ${marker}3`): [string, string[]] => [
  "sh",
  ["-c", `setsid sleep ${marker}1 & (sleep ${marker}2 &); echo ready; ${tail}`],
];

/** Waits until `count` processes hold `marker`. */
async function running(marker: string, count = 3): Promise<number[]> {
  const deadline = performance.now() + 5000;
  for (;;) {
    const found = markedProcesses(marker);
    if (found.length >= count) return found;
    assert.ok(performance.now() < deadline, `only ${found.length} of ${count} processes with ${marker} started`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Asserts that nothing holding `marker` is left (within the time a kill takes to land), and ends what is. */
async function noneLeft(marker: string, what: string): Promise<void> {
  const left = await survivors(markedProcesses(marker), 3000);
  for (const pid of left) process.kill(pid, "SIGKILL");
  assert.deepEqual(left, [], `${what}: processes with ${marker} outlived their command`);
}

/** A pool's next command still runs on the same worker. */
async function stillServes(pool: Pool, started: number): Promise<void> {
  const out = await pool.command("echo", { args: ["ok"] }).output();
  assert.equal(new TextDecoder().decode(out.stdout), "ok\n");
  assert.equal(pool.stats().started, started, "no worker was replaced");
}

describe(`${HOST} host, native workers: killTree`, () => {
  const pool = new Pool({ size: 1, runtime: "native" });
  const dropIn = childProcessFor(pool);
  after(() => pool.close({ drain: false }));

  for (const [scope, option] of [["the killTree option and kill()", true], ["killTree()", false]] as const) {
    it(`${scope} ends the whole tree, on the Bun shape`, async () => {
      const marker = newMarker();
      const [cmd, args] = daemonizing(marker);
      const proc = pool.spawn([cmd, ...args], { stdout: "pipe", killTree: option || undefined });
      await running(marker);
      if (option) proc.kill();
      else proc.killTree();
      assert.equal(await proc.exited, 143);
      assert.equal(proc.signalCode, "SIGTERM");
      await noneLeft(marker, "Bun shape");
    });

    it(`${scope} ends the whole tree, on the Deno shape`, async () => {
      const marker = newMarker();
      const [cmd, args] = daemonizing(marker);
      const child = pool.command(cmd, { args, stdout: "null", killTree: option || undefined }).spawn();
      await running(marker);
      if (option) child.kill("SIGKILL");
      else child.killTree("SIGKILL");
      assert.equal((await child.status).signal, "SIGKILL");
      await noneLeft(marker, "Deno shape");
    });

    it(`${scope} ends the whole tree, on the drop-in`, async () => {
      const marker = newMarker();
      const [cmd, args] = daemonizing(marker);
      const child = dropIn.spawn(cmd, args, {
        stdio: "ignore",
        ...(option ? { killTree: true } : {}),
      }) as unknown as ChildProcess;
      const closed = new Promise((resolve) => child.on("close", (_code, signal) => resolve(signal)));
      await running(marker);
      assert.equal(option ? child.kill() : child.killTree(), true);
      assert.equal(await closed, "SIGTERM");
      await noneLeft(marker, "drop-in");
    });
  }
});

describe(`${HOST} host, native workers: killTree beside plain commands`, () => {
  const pool = new Pool({ size: 1, runtime: "native" });
  after(() => pool.close({ drain: false }));

  it("a whole-tree kill delivers the signal once to each process", async () => {
    const count = "import signal, time\n" +
      "got = [0]\n" +
      "signal.signal(signal.SIGTERM, lambda s, f: got.__setitem__(0, got[0] + 1))\n" +
      "print('ready', flush=True)\n" +
      "time.sleep(0.5)\n" +
      "print(got[0])";
    const proc = pool.spawn(["python3", "-c", count], { killTree: true });
    const reader = proc.stdout!.getReader();
    await reader.read(); // "ready"
    proc.kill();
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    assert.equal(await proc.exited, 0);
    assert.equal(rest.trim(), "1", "SIGTERMs received");
  });

  it("a plain command's daemons are left alone when killTree commands end beside it", async () => {
    const marker = newMarker();
    const plain = pool.spawn(["sh", "-c", `(setsid sleep ${marker}1 &); sleep ${marker}2`]);
    await running(marker, 2);
    // killTree commands that exit, and one that is killed, while the plain one runs, and after it has gone.
    assert.equal(await pool.spawn(["sh", "-c", "(sleep 0.1 &); true"], { killTree: true }).exited, 0);
    const killed = pool.spawn(["sleep", "10"], { killTree: true });
    killed.kill();
    await killed.exited;
    plain.kill();
    await plain.exited;
    assert.equal(await pool.spawn(["sh", "-c", "(sleep 0.1 &); true"], { killTree: true }).exited, 0);
    const left = markedProcesses(`${marker}1`);
    for (const pid of left) process.kill(pid, "SIGKILL");
    assert.equal(left.length, 1, "the plain command's daemon runs on, as without spawnpool");
  });
});

describe(`${HOST} host, native workers: every way a killTree command ends ends its tree`, () => {
  const pool = new Pool({ size: 1, runtime: "native", killTree: true });
  after(() => pool.close({ drain: false }));

  it("a timeout", async () => {
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker);
    const proc = pool.spawn([cmd, ...args], { timeout: 400 });
    await running(marker);
    await proc.exited;
    assert.equal(proc.signalCode, "SIGTERM");
    await noneLeft(marker, "timeout");
  });

  it("an AbortSignal", async () => {
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker);
    const abort = new AbortController();
    const child = pool.command(cmd, { args, signal: abort.signal }).spawn();
    await running(marker);
    abort.abort();
    await child.status;
    await noneLeft(marker, "AbortSignal");
  });

  it("maxBuffer", async () => {
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker, `sleep 0.3; head -c 100000 /dev/zero; sleep ${marker}3`);
    await assert.rejects(pool.command(cmd, { args, maxBuffer: 1000 }).output(), { code: "ERR_MAX_BUFFER" });
    await noneLeft(marker, "maxBuffer");
  });

  it("its own exit: what it left is ended with it", async () => {
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker, "sleep 0.3");
    const proc = pool.spawn([cmd, ...args]);
    await running(marker, 2);
    assert.equal(await proc.exited, 0);
    await noneLeft(marker, "exit");
  });

  it("the worker's death (the host ends what the worker left)", async () => {
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker);
    // Its output not piped: a command writing to the dead worker's pipe could die of SIGPIPE before the host walks its
    // tree, and its daemons that left its group would go to init (docs/process-control.md).
    const proc = pool.spawn([cmd, ...args], { stdout: "ignore" });
    await proc.spawned; // a command the host knows of: one its worker reported
    await running(marker);
    process.kill(pool.stats().workers[0].pid, "SIGKILL");
    await assert.rejects(proc.exited, { code: "ERR_WORKER_DIED" });
    await noneLeft(marker, "worker death");
  });

  it("close({ drain: false })", async () => {
    const marker = newMarker();
    const own = new Pool({ size: 1, runtime: "native", killTree: true });
    const [cmd, args] = daemonizing(marker);
    const proc = own.spawn([cmd, ...args]);
    await running(marker);
    await own.close({ drain: false });
    await proc.exited.catch(() => {});
    await noneLeft(marker, "close");
  });

  it("the host's death", async () => {
    const marker = newMarker();
    const [exe, ...argv] = hostArgv(fixture("tree_host.ts"), marker);
    const host = nodeSpawn(exe, argv, { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const line = await withTimeout(
        new Promise<string>((resolve) => host.stdout.once("data", (chunk) => resolve(String(chunk)))),
        20_000,
        "the host did not start its command",
      );
      const { worker } = JSON.parse(line) as { worker: number };
      await running(marker);
      host.kill("SIGKILL");
      assert.deepEqual(await survivors([worker], 5000), [], "the worker outlived its host");
      await noneLeft(marker, "host death");
    } finally {
      host.kill("SIGKILL");
    }
  });
});

/** Prints the six rlimits a command runs with, soft and hard, as JSON. */
const PRINT_LIMITS = [
  "python3",
  "-c",
  "import json, resource as r\n" +
  "names = {'cpu': r.RLIMIT_CPU, 'as': r.RLIMIT_AS, 'nproc': r.RLIMIT_NPROC, 'nofile': r.RLIMIT_NOFILE, " +
  "'fsize': r.RLIMIT_FSIZE, 'core': r.RLIMIT_CORE}\n" +
  "print(json.dumps({k: r.getrlimit(v) for k, v in names.items()}))",
];

describe(`${HOST} host, native workers: limits`, () => {
  const pool = new Pool({ size: 1, runtime: "native" });
  const dropIn = childProcessFor(pool);
  after(() => pool.close({ drain: false }));

  it("each limit is the command's soft and hard rlimit (CPU time's hard one a second later)", async () => {
    const limits = {
      cpuSeconds: 7,
      memoryBytes: 512 * 1024 * 1024,
      processes: 100,
      openFiles: 64,
      fileSizeBytes: 1_000_000,
      coreBytes: 0,
    };
    const out = await pool.command(PRINT_LIMITS[0], { args: PRINT_LIMITS.slice(1), limits }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.deepEqual(JSON.parse(new TextDecoder().decode(out.stdout)), {
      cpu: [7, 8],
      as: [limits.memoryBytes, limits.memoryBytes],
      nproc: [100, 100],
      nofile: [64, 64],
      fsize: [1_000_000, 1_000_000],
      core: [0, 0],
    });
  });

  it('a CPU loop past cpuSeconds ends with SIGXCPU and limit "cpu", on every shape; the worker serves on', async () => {
    const started = pool.stats().started;
    const loop = ["sh", "-c", "while :; do :; done"];
    const limits = { cpuSeconds: 1 };
    const proc = pool.spawn(loop, { limits });
    await proc.exited;
    assert.equal(proc.signalCode, "SIGXCPU");
    assert.equal(proc.limit, "cpu");
    const status = await pool.command(loop[0], { args: loop.slice(1), limits }).spawn().status;
    assert.equal(status.signal, "SIGXCPU");
    assert.equal(status.limit, "cpu");
    const child = dropIn.spawn(loop[0], loop.slice(1), { limits } as SpawnOptions) as unknown as ChildProcess;
    assert.equal(await new Promise((resolve) => child.on("exit", (_code, signal) => resolve(signal))), "SIGXCPU");
    assert.equal(child.limit, "cpu");
    await stillServes(pool, started);
  });

  it('a write past fileSizeBytes ends with SIGXFSZ and limit "fileSize"', async () => {
    const started = pool.stats().started;
    const file = join(scratch, `fsize-${newMarker()}`);
    const out = await pool.command("dd", {
      args: ["if=/dev/zero", `of=${file}`, "bs=1M", "count=4"],
      limits: { fileSizeBytes: 1_000_000 },
    }).output();
    assert.equal(out.signal, "SIGXFSZ");
    assert.equal(out.limit, "fileSize");
    await stillServes(pool, started);
  });

  it("an allocation past memoryBytes fails in the command (no limit named: the program chose how to end)", async () => {
    const started = pool.stats().started;
    const out = await pool.command("python3", {
      args: ["-c", "b = bytearray(400 * 1024 * 1024)"],
      limits: { memoryBytes: 200 * 1024 * 1024 },
    }).output();
    assert.equal(out.code, 1);
    assert.match(new TextDecoder().decode(out.stderr), /MemoryError/);
    assert.equal(out.limit, undefined);
    await stillServes(pool, started);
  });

  it(
    "a fork bomb is capped by processes (as uid nobody: root passes RLIMIT_NPROC)",
    { skip: process.getuid?.() !== 0 && "setting uid needs root" },
    async () => {
      const started = pool.stats().started;
      const marker = newMarker();
      // The drop-in: the Deno shape has no uid.
      const child = dropIn.spawn(
        "sh",
        ["-c", `i=0; while [ $i -lt 30 ]; do sleep ${marker} & i=$((i+1)); done; wait`],
        {
          uid: 65534,
          gid: 65534,
          stdio: ["ignore", "ignore", "pipe"],
          limits: { processes: 5 },
          killTree: true,
        } as SpawnOptions,
      );
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const code = await new Promise((resolve) => child.on("close", resolve));
      assert.notEqual(code, 0);
      assert.match(stderr, /fork/i);
      await noneLeft(marker, "fork bomb");
      await stillServes(pool, started);
    },
  );
});

/** A fresh cgroup v2 directory this process may write, or why there is none (a user's cgroups are not delegated). */
function scratchCgroup(): { path?: string; why?: string } {
  for (const mount of ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]) {
    try {
      if (statfsSync(mount).type !== 0x63677270) continue; // CGROUP2_SUPER_MAGIC
      const path = `${mount}/spawnpool-test-${process.pid}-${newMarker()}`;
      mkdirSync(path);
      return { path };
    } catch {
      // not there, or not ours to write
    }
  }
  return { why: "no writable cgroup v2 directory here" };
}

describe(`${HOST} host, native workers: a pool cgroup`, () => {
  const cgroup = scratchCgroup();
  const pool = cgroup.path === undefined ? undefined : new Pool({ size: 1, runtime: "native", cgroup: cgroup.path });
  const inCgroup = (name: string, fn: (pool: Pool, root: string) => Promise<void>) =>
    it(name, { skip: cgroup.why ?? false }, () => fn(pool!, cgroup.path!));
  after(async () => {
    await pool?.close({ drain: false });
    if (cgroup.path !== undefined) {
      assert.deepEqual(readdirSync(cgroup.path).filter((name) => name.startsWith("spawnpool-")), [], "leaves left");
      rmdirSync(cgroup.path);
    }
  });

  inCgroup("each command starts in a leaf of its own under the pool's cgroup", async (pool, root) => {
    const leaves = new Set<string>();
    const running = Array.from(
      { length: 3 },
      () => pool.command("sh", { args: ["-c", "cat /proc/self/cgroup; sleep 0.2"] }).output(),
    );
    for (const out of await Promise.all(running)) {
      const line = new TextDecoder().decode(out.stdout).split("\n").find((l) => l.startsWith("0::"));
      assert.ok(line !== undefined && root.endsWith(line.slice(3).split("/").slice(0, -1).join("/")), String(line));
      leaves.add(line!);
    }
    assert.equal(leaves.size, 3, "one leaf per command running at once");
  });

  inCgroup("killTree ends everything in the leaf (cgroup.kill): kill, and the command's own exit", async (pool) => {
    let marker = newMarker();
    let [cmd, args] = daemonizing(marker);
    const proc = pool.spawn([cmd, ...args], { killTree: true });
    await running(marker);
    proc.kill();
    await proc.exited;
    await noneLeft(marker, "cgroup kill");
    marker = newMarker();
    [cmd, args] = daemonizing(marker, "sleep 0.2");
    assert.equal(await pool.spawn([cmd, ...args], { killTree: true }).exited, 0);
    await noneLeft(marker, "cgroup exit");
  });

  inCgroup("a command cannot make cgroups in its leaf (it could never be removed)", async (pool, root) => {
    const mount = root.slice(0, root.indexOf("/spawnpool-test-"));
    const out = await pool.command("sh", {
      args: ["-c", 'mkdir "$MOUNT$(grep ^0:: /proc/self/cgroup | cut -d: -f3)/sub"'],
      env: { MOUNT: mount },
    }).output();
    assert.notEqual(out.code, 0, "mkdir succeeded");
  });

  inCgroup("the worker's death: the host kills what is in its leaves and removes them", async (_pool, root) => {
    const own = new Pool({ size: 1, runtime: "native", cgroup: root });
    const marker = newMarker();
    const [cmd, args] = daemonizing(marker);
    const proc = own.spawn([cmd, ...args], { stdout: "ignore" });
    await proc.spawned;
    await running(marker);
    const worker = own.stats().workers[0].pid;
    process.kill(worker, "SIGKILL");
    await assert.rejects(proc.exited, { code: "ERR_WORKER_DIED" });
    await noneLeft(marker, "cgroup worker death");
    const deadline = performance.now() + 3000;
    while (readdirSync(root).some((name) => name.startsWith(`spawnpool-${worker}-`))) {
      assert.ok(performance.now() < deadline, "the dead worker's leaves are still there");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await own.close();
  });

  inCgroup("usage counts the whole tree: CPU of a child the command never waited for", async (pool) => {
    const busy = "import resource\nwhile resource.getrusage(resource.RUSAGE_SELF).ru_utime < 0.3: pass";
    const out = await pool.command("sh", { args: ["-c", `python3 -c '${busy}' & sleep 1`] }).output();
    assert.equal(out.code, 0);
    assert.ok(out.resourceUsage!.cpuTime.user >= 250_000n, `user CPU ${out.resourceUsage!.cpuTime.user} µs`);
  });

  it("a directory that is not a cgroup v2 one fails the pool's start, saying why", async () => {
    await using bad = new Pool({ size: 1, runtime: "native", cgroup: scratch });
    await assert.rejects(bad.command("true").output(), (error: Error & { code?: string }) => {
      assert.equal(error.code, "ERR_WORKER_START");
      assert.match(error.message, /is not a cgroup v2 directory/);
      return true;
    });
  });
});

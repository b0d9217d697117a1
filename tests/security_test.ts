/**
 * The channel as a local attacker sees it: a pool with Deno workers (which always use the unix-socket
 * channel) starts a worker that takes 0.5 s to connect; meanwhile the test finds the host's abstract
 * socket in /proc/net/unix, connects, and tries to pass for the worker: with a wrong secret, with a
 * spawn request, with a hello, and by holding a connection open without a word. Every attempt is refused, the listener is gone once the worker is in, and
 * the pool runs commands as before. Runs the host's own listener (Deno.listen in Deno, node:net elsewhere).
 */

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { encodeJson, Frame, PROTOCOL_VERSION } from "../core/frame.ts";
import { Pool } from "../mod.ts";
import { fixture, frame, HOST, openFds, withTimeout } from "./_helpers.ts";

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-security-"));

/** This process's own spawnpool listeners (not those of other test files' hosts running meanwhile). */
function listeners(): string[] {
  const own = new Set(openFds().map(([, target]) => target));
  return readFileSync("/proc/net/unix", "utf8").split("\n")
    .map((line) => line.trim().split(/\s+/))
    // Flags 00010000 (__SO_ACCEPTCON) marks a listening socket; accepted connections show the name too.
    .filter((fields) =>
      fields[3] === "00010000" && /^@spawnpool-|\/spawnpool-[^/]+\/s$/.test(fields[7] ?? "") &&
      own.has(`socket:[${fields[6]}]`)
    )
    .map((fields) => (fields[7].startsWith("@") ? `\0${fields[7].slice(1)}` : fields[7]));
}

type Outcome = "refused" | "cannot connect" | "kept open";

/** Connects to `path`, sends `bytes`, and reports whether the host closed the connection within 2 s. */
function attempt(path: string, bytes: Uint8Array): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect({ path });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve("kept open");
    }, 2000);
    socket.on("connect", () => socket.write(bytes));
    socket.on("data", () => {}); // anything the host would send a worker
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(socket.bytesWritten > 0 ? "refused" : "cannot connect");
    });
  });
}

describe("a local attacker on the unix-socket channel", () => {
  it("finds the listener, cannot pass for the worker, and the pool works", async () => {
    const marker = join(scratch, "attacker-was-here");
    const spawnRequest = frame(
      Frame.Spawn,
      1,
      encodeJson({ cmd: "touch", args: [marker], stdin: "null", stdout: "null", stderr: "null", buffered: true }),
    );
    const hello = frame(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime: "deno", pid: 1 }));
    const payloads = [
      new Uint8Array(32).fill(7), // a wrong secret
      spawnRequest, // a request, as if the listener were a worker
      new Uint8Array([...new Uint8Array(32), ...hello]), // a hello after a guessed secret
    ];
    process.env.SLOW_START_EXEC = execFileSync("sh", ["-c", "command -v deno"], { encoding: "utf8" }).trim();
    const pool = new Pool({ size: 1, runtime: "deno", execPath: fixture("slow_start.sh") });
    const ready = pool.ready();
    let found: string | undefined;
    for (let i = 0; i < 400 && found === undefined; i++) {
      found = listeners()[0];
      if (found === undefined) await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(found, "the listener is visible in /proc/net/unix while the worker starts");
    // One connection says nothing at all: it must not hold up the worker's, and is closed once that is in.
    const silent = connect({ path: found });
    silent.on("error", () => {});
    const silentClosed = new Promise<void>((resolve) => silent.on("close", () => resolve()));
    const outcomes = await Promise.all(payloads.map((bytes) => attempt(found!, bytes)));
    await ready;
    await silentClosed;
    assert.deepEqual(outcomes, ["refused", "refused", "refused"]);
    assert.equal(listeners().includes(found), false, "the listener closed once its worker connected");
    assert.equal(await attempt(found, payloads[0]), "cannot connect");
    const cmdline = readFileSync(`/proc/${pool.stats().workers[0].pid}/cmdline`, "utf8").split("\0");
    assert.deepEqual(
      cmdline.filter((arg) => arg.startsWith("--allow") || arg === "-A"),
      [
        "--allow-run",
        "--allow-net",
        "--allow-env=SPAWNPOOL_CHANNEL,SPAWNPOOL_BOOTSTRAP,NODE_CHANNEL_FD",
        "--allow-read=/proc",
        ...(found.startsWith("\0") ? [] : [`--allow-read=${found}`, `--allow-write=${found}`]),
      ],
      "the Deno worker's permissions are the least it needs (a socket file: that one path)",
    );
    const out = await pool.command("echo", { args: ["still ours"] }).output();
    assert.equal(new TextDecoder().decode(out.stdout), "still ours\n");
    assert.equal(existsSync(marker), false, "the attacker's request ran nowhere");
    await pool.close();
  });
});

describe("a local attacker flooding the listener with connections that never authenticate", () => {
  const asRoot = process.getuid?.() === 0;
  // This user: the one who can reach the listener whatever it is (another user cannot reach a socket file in the host's
  // 0700 directory at all: below).
  it("300 silent connections from this user cost the host at most 16 descriptors; the worker still gets in, within 1.5 s of its start", async () => {
    process.env.SLOW_START_EXEC = execFileSync("sh", ["-c", "command -v deno"], { encoding: "utf8" }).trim();
    const pool = new Pool({ size: 1, runtime: "deno", execPath: fixture("slow_start.sh") });
    const before = openFds().length;
    const started = performance.now();
    const ready = pool.ready();
    ready.catch(() => {}); // awaited below; a failure before that must not hide behind it
    // When the worker got in, not when this test looked (the flooder's own start can take seconds on a loaded machine).
    const readyAt = ready.then(() => performance.now());
    readyAt.catch(() => {});
    let found: string | undefined;
    for (let i = 0; i < 400 && found === undefined; i++) {
      found = listeners()[0];
      if (found === undefined) await new Promise((r) => setTimeout(r, 5));
    }
    assert.ok(found, "the listener is visible in /proc/net/unix while the worker starts");
    const FLOOD = 300;
    const node = execFileSync("sh", ["-c", "command -v node"], { encoding: "utf8" }).trim();
    const flooder = spawn(node, [fixture("flood_listener.mjs"), found.replace("\0", "@"), String(FLOOD)], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    let said = "";
    flooder.stdout!.setEncoding("utf8").on("data", (chunk: string) => (said += chunk));
    const saying = (what: RegExp) =>
      withTimeout(
        (async () => {
          while (!what.test(said)) await new Promise((r) => setTimeout(r, 10));
        })(),
        20_000, // a hang guard: a node process starting on a loaded machine can take seconds
        `the flooder never said ${what}: ${said}`,
      );
    try {
      await saying(/flooding 300/);
      await new Promise((r) => setTimeout(r, 100)); // the host accepts them, before the worker (0.5 s) connects
      // At most 8 connections waiting for the secret; the rest is the listener and the pipes to the starting worker
      // and to the flooder.
      const hostSide = openFds().length - before;
      assert.ok(hostSide <= 16, `the host holds ${hostSide} descriptors for ${FLOOD} connections`);
      // slow_start.sh waits 0.5 s before the worker runtime starts; the rest is the start itself. A worker kept out
      // by the flood would wait for a waiting connection's deadline (2 s) to free a slot.
      const startMs = (await readyAt) - started - 500;
      assert.ok(startMs < 1500, `the worker started ${startMs.toFixed(0)} ms after its runtime did`);
      assert.equal(
        new TextDecoder().decode((await pool.command("echo", { args: ["in"] }).output()).stdout),
        "in\n",
      );
      await saying(/closed 300/);
    } finally {
      flooder.stdin!.end();
      await pool.close();
    }
  });

  // What a flood from another user does to a start: nothing, where the listener is a socket file in the host's 0700
  // directory (every Node and Bun host, and a Deno host that may write files); tests run as root, so "another user" is
  // nobody. The flood goes on without end while the worker starts: attempts as fast as the flooder can make them.
  for (const runtime of ["native", "deno"] as const) {
    it(
      `a continuous flood from another uid (nobody) while a ${runtime} worker starts: ready within 2 s of its start, 20 commands run`,
      {
        skip: !asRoot && "needs root to flood as another uid",
      },
      async () => {
        process.env.SLOW_START_EXEC = runtime === "native"
          ? join(fileURLToPath(new URL("..", import.meta.url).href), "native", "build", "spawnpool-worker")
          : execFileSync("sh", ["-c", "command -v deno"], { encoding: "utf8" }).trim();
        const pool = new Pool({ size: 1, runtime, execPath: fixture("slow_start.sh") });
        const started = performance.now();
        const ready = pool.ready();
        ready.catch(() => {});
        const readyAt = ready.then(() => performance.now());
        readyAt.catch(() => {});
        let found: string | undefined;
        for (let i = 0; i < 400 && found === undefined && performance.now() - started < 400; i++) {
          found = listeners()[0];
          if (found === undefined) await new Promise((r) => setTimeout(r, 5));
        }
        // A Node or Bun host hands a native worker an inherited socketpair: there is no listener to flood at all.
        const listens = runtime === "deno" || HOST === "deno";
        assert.equal(found !== undefined, listens, `a listener while the worker starts: ${found}`);
        if (found === undefined) found = join(scratch, "no-listener");
        const node = execFileSync("sh", ["-c", "command -v node"], { encoding: "utf8" }).trim();
        const flooder = spawn(node, [fixture("flood_loop.mjs"), found.replace("\0", "@"), "200"], {
          stdio: ["pipe", "pipe", "inherit"],
          uid: 65534,
          gid: 65534,
        });
        let said = "";
        flooder.stdout!.setEncoding("utf8").on("data", (chunk: string) => (said += chunk));
        const flooderExited = new Promise((resolve) => flooder.on("exit", resolve));
        try {
          await withTimeout(readyAt, 20_000, "the pool never became ready");
          // slow_start.sh waits 0.5 s before the worker starts; the rest is the start itself, flood or not.
          const startMs = (await readyAt) - started - 500;
          assert.ok(startMs < 2000, `the worker started ${startMs.toFixed(0)} ms after its runtime did`);
          const outs = await Promise.all(
            Array.from({ length: 20 }, (_, i) => pool.command("echo", { args: [`in ${i}`] }).output()),
          );
          assert.deepEqual(outs.map((out) => new TextDecoder().decode(out.stdout)), outs.map((_, i) => `in ${i}\n`));
        } finally {
          flooder.stdin!.end();
          await withTimeout(flooderExited, 10_000, "the flooder did not stop");
          await pool.close();
        }
        const counts = /attempts (\d+) connected (\d+)/.exec(said);
        assert.ok(counts, `the flooder reported: ${said}`);
        assert.ok(Number(counts[1]) > 0, "the flood ran");
        if (!found.startsWith("\0")) assert.equal(Number(counts[2]), 0, "another user reached the socket file");
      },
    );
  }
});

describe("a worker that exits without connecting", () => {
  it("fails to start with ERR_WORKER_START; the host neither crashes nor hangs", async () => {
    const pool = new Pool({ size: 1, runtime: "deno", execPath: fixture("never_connects.sh") });
    await assert.rejects(pool.ready(), { code: "ERR_WORKER_START" });
    await pool.close();
  });
});

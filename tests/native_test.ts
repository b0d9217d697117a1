/**
 * The native worker (native/*.c) under AddressSanitizer and UndefinedBehaviorSanitizer
 * (native/build/spawnpool-worker-asan, built by support/build_native.mjs), one behaviour at a time over a channel the
 * test holds as a host would: what it inherits, limits on fds and memory, program lookup, environments, signals and
 * grandchildren. A sanitizer report, a leak (LeakSanitizer runs at exit), a crash or a hang fails the test.
 * tests/native_fuzz_test.ts fuzzes its frames; tests/native_pool_test.ts runs pools of it.
 *
 * @module
 */

import assert from "node:assert/strict";
import { execFileSync, spawn as nodeSpawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { decodeExit, decodeJson, Frame, FrameDecoder, type SpawnRequest } from "../core/frame.ts";
import { alive, childPids, frame, HOST, survivors, withTimeout } from "./_helpers.ts";
import { cpuMillis } from "../support/proc.ts";
import {
  ASAN_WORKER,
  creditOutput,
  exitCode,
  expectExit,
  peakMemory,
  POLL_WORKER,
  RELEASE_WORKER,
  settled,
  spawnFrame,
  startWorker,
  text,
  withWorker,
} from "./_native.ts";

describe(`${HOST} host, native worker under ASan and UBSan`, () => {
  it("a spawn with NUL in an argument fails with EINVAL, and the worker goes on", async () => {
    const worker = await startWorker();
    const answers = new Promise<void>((resolve) => {
      worker.onFrame = ({ id, type }) => {
        if (id === 2 && type === Frame.Exit) resolve();
      };
    });
    worker.channel.write([spawnFrame(1, { args: ["a\0b"] }), spawnFrame(2, { cmd: "echo", args: ["after"] })]);
    await withTimeout(answers, 10_000, "no answer");
    const [error] = worker.received.filter((f) => f.type === Frame.SpawnError);
    assert.deepEqual(decodeJson(error.payload), { code: "EINVAL", errno: -22, message: "spawn true EINVAL" });
    const exit = decodeExit(worker.received.find((f) => f.type === Frame.Exit)!.payload);
    const { usage, ...status } = exit.info;
    assert.deepEqual([status, text(exit.stdout)], [{ code: 0, signal: null, reason: null }, "after\n"]);
    assert.ok(usage !== undefined && usage.maxRSS > 0, "the exit carries what the command used");
    worker.channel.close();
    await expectExit(worker, [0], "after EINVAL");
  });
  it("a buffered command's Spawned goes out with its Exit when it ends soon, on its own within ms when it does not (epoll and poll builds)", async () => {
    for (const command of [undefined, [POLL_WORKER]]) {
      await withWorker("held Spawned", command, async (worker) => {
        const at = new Map<string, number>();
        const t0 = performance.now();
        worker.onFrame = ({ type, id }) => void at.set(`${type}:${id}`, performance.now() - t0);
        worker.channel.write([
          spawnFrame(1, { cmd: "true" }),
          spawnFrame(2, { cmd: "sleep", args: ["0.5"] }),
          // stdin from the host: its acks follow the Spawned, which is not held
          spawnFrame(3, { cmd: "cat", stdin: "piped" }),
          frame(Frame.StdinEnd, 3, new Uint8Array(0)),
        ]);
        const done = await settled(worker, [1, 2, 3], 10_000, "held Spawned");
        assert.deepEqual([1, 2, 3].map((id) => done.get(id)?.type), [Frame.Exit, Frame.Exit, Frame.Exit]);
        const order = (id: number) => worker.received.filter((f) => f.id === id).map((f) => f.type);
        // Every request hears of its spawn first; `true`'s Spawned comes right before its Exit.
        assert.deepEqual(order(1), [Frame.Spawned, Frame.Exit]);
        assert.deepEqual(order(2), [Frame.Spawned, Frame.Exit]);
        assert.equal(order(3)[0], Frame.Spawned);
        // `sleep 0.5` is told of within the hold (50 ms on Linux) and a loop turn, long before its end, under ASan on a busy machine.
        const spawned = at.get(`${Frame.Spawned}:2`)!, exited = at.get(`${Frame.Exit}:2`)!;
        assert.ok(spawned < 250 && exited - spawned > 250, `Spawned at ${spawned} ms, Exit at ${exited} ms`);
      });
    }
  });
  const onLinux = { skip: process.platform !== "linux" && "PR_SET_PDEATHSIG is Linux's" };
  it(
    "a dead worker's commands die with it, before the host knew of them, but no detached or killTree one",
    onLinux,
    async () => {
      const worker = await startWorker();
      const started: number[] = [];
      try {
        worker.channel.write([
          // Buffered: the worker holds its Spawned (SPAWNED_HOLD_DIES_WITH_WORKER_US), so no host knows its pid yet.
          spawnFrame(1, { cmd: "sleep", args: ["30"] }),
          spawnFrame(2, { cmd: "sleep", args: ["31"], detached: true }),
          // The host walks a killTree command's tree once its worker is gone: it must still be there.
          spawnFrame(3, { cmd: "sleep", args: ["32"], killTree: true }),
        ]);
        const deadline = performance.now() + 10_000;
        const byArgument = new Map<string, number>();
        while (byArgument.size < 3) {
          assert.ok(performance.now() < deadline, "the worker's three commands did not start");
          for (const pid of childPids(worker.pid)) {
            const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
            if (argv[0] === "sleep") byArgument.set(argv[1], pid);
          }
          await new Promise((resolve) => setTimeout(resolve, 1));
        }
        const [held, detached, tree] = ["30", "31", "32"].map((argument) => byArgument.get(argument)!);
        started.push(held, detached, tree);
        worker.kill();
        await worker.exited;
        assert.deepEqual(await survivors([held], 5000), [], "the command outlived its worker");
        assert.ok(alive(detached), "the detached command died with its worker");
        assert.ok(alive(tree), "the killTree command died with its worker, before the host could walk its tree");
      } finally {
        worker.kill();
        for (const pid of started) if (alive(pid)) process.kill(pid, "SIGKILL");
      }
    },
  );
  it("SIGINT to the worker (a terminal's Ctrl-C) reaches its commands' groups but a detached one's; it serves on", async () => {
    await withWorker("SIGINT passed on", undefined, async (worker) => {
      worker.channel.write([
        spawnFrame(1, { cmd: "sh", args: ["-c", "sleep 30 & wait"] }),
        spawnFrame(2, { cmd: "sleep", args: ["31"], detached: true, stdout: "null", stderr: "null" }),
      ]);
      const deadline = performance.now() + 10_000;
      const sleeps = () => childPids(worker.pid).flatMap((pid) => [pid, ...childPids(pid)]);
      let detached: number | undefined;
      while (detached === undefined || childPids(worker.pid).length < 2) {
        assert.ok(performance.now() < deadline, "the worker's commands did not start");
        detached = sleeps().find((pid) => readFileSync(`/proc/${pid}/cmdline`, "utf8") === "sleep\x0031\x00");
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      process.kill(worker.pid, "SIGINT");
      const done = await settled(worker, [1], 10_000, "SIGINT passed on");
      const exit = decodeExit(done.get(1)!.payload);
      assert.equal(exit.info.signal, "SIGINT", "the shell (its group) was interrupted");
      assert.ok(alive(detached), "the detached command was interrupted");
      worker.channel.write([spawnFrame(3, { cmd: "echo", args: ["after"] })]);
      const after = await settled(worker, [3], 10_000, "a command after SIGINT");
      assert.equal(text(decodeExit(after.get(3)!.payload).stdout), "after\n");
      process.kill(detached, "SIGKILL");
    });
  });
  it("with too few fds for a pidfd each (EMFILE), every command is still reaped: SIGCHLD is the backstop", async () => {
    await withWorker(
      "60 commands at 40 fds",
      ["sh", "-c", 'ulimit -n 40 && exec "$0"', ASAN_WORKER],
      async (worker) => {
        const ids = Array.from({ length: 60 }, (_, i) => i + 1);
        const null3 = { stdin: "null", stdout: "null", stderr: "null" } as const;
        worker.channel.write(ids.map((id) => spawnFrame(id, { cmd: "sleep", args: ["0.3"], ...null3 })));
        const answers = await settled(worker, ids, 20_000, "60 commands at 40 fds");
        for (const id of ids) assert.equal(exitCode(answers.get(id), `request ${id}`), 0);
      },
    );
  });

  it("a low soft limit on fds is raised to the hard one", async () => {
    await withWorker("raised fd limit", ["sh", "-c", 'ulimit -S -n 40 && exec "$0"', ASAN_WORKER], (worker) => {
      const [soft, hard] = /Max open files\s+(\d+)\s+(\d+)/.exec(readFileSync(`/proc/${worker.pid}/limits`, "utf8"))!
        .slice(1);
      assert.equal(soft, hard);
    });
  });

  it("an inherited ignored SIGCHLD and blocked signals lose no exit code (epoll and poll builds)", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-sigchld-"));
    try {
      // What a careless parent can leave: SIGCHLD ignored (the kernel would reap the commands), signals blocked.
      const wrapper = join(scratch, "ignore-sigchld");
      writeFileSync(
        `${wrapper}.c`,
        `#include <signal.h>
#include <unistd.h>
int main(int argc, char **argv) {
  (void)argc;
  signal(SIGCHLD, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigprocmask(SIG_BLOCK, &set, 0);
  execv(argv[1], argv + 1);
  return 127;
}
`,
      );
      execFileSync(process.env.CC || "cc", ["-o", wrapper, `${wrapper}.c`]);
      for (const path of [ASAN_WORKER, POLL_WORKER]) {
        await withWorker(path, [wrapper, path], async (worker) => {
          worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", "exit 3"] })]);
          const answers = await settled(worker, [1], 10_000, path);
          assert.equal(exitCode(answers.get(1), path), 3, path);
        });
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("relative PATH entries (an empty one too) are looked up in the request's cwd, where the command runs", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-path-"));
    try {
      await withWorker("relative PATH", undefined, async (worker) => {
        mkdirSync(join(scratch, "bin"));
        writeFileSync(join(scratch, "bin", "in-bin"), "#!/bin/sh\necho in-bin\n", { mode: 0o755 });
        writeFileSync(join(scratch, "in-cwd"), "#!/bin/sh\necho in-cwd\n", { mode: 0o755 });
        const env = { PATH: "bin::/usr/bin:/bin" };
        worker.channel.write([
          spawnFrame(1, { cmd: "in-bin", cwd: scratch, env }),
          spawnFrame(2, { cmd: "in-cwd", cwd: scratch, env }),
        ]);
        const answers = await settled(worker, [1, 2], 10_000, "relative PATH");
        assert.equal(exitCode(answers.get(1), "in-bin"), 0);
        assert.equal(text(decodeExit(answers.get(1)!.payload).stdout), "in-bin\n");
        assert.equal(exitCode(answers.get(2), "in-cwd"), 0);
        assert.equal(text(decodeExit(answers.get(2)!.payload).stdout), "in-cwd\n");
      });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("a SpawnError quotes a few KiB of the program's name at most, with short escapes", async () => {
    await withWorker("long names", undefined, async (worker) => {
      worker.channel.write([
        spawnFrame(1, { cmd: "\u0001".repeat(1_000_000) }),
        spawnFrame(2, { cmd: `${"\n".repeat(100)}x` }),
      ]);
      const answers = await settled(worker, [1, 2], 20_000, "long names");
      const long = answers.get(1)!;
      assert.equal(long.type, Frame.SpawnError);
      assert.ok(long.payload.byteLength < 32 * 1024, `${long.payload.byteLength} bytes`);
      assert.equal((decodeJson(long.payload) as { code: string }).code, "ENOENT");
      const lines = answers.get(2)!;
      assert.equal(lines.type, Frame.SpawnError);
      assert.ok(lines.payload.byteLength < 300, `${lines.payload.byteLength} bytes`);
      assert.equal((decodeJson(lines.payload) as { message: string }).message, `spawn ${"\n".repeat(100)}x ENOENT`);
    });
  });

  it("60,000 variables in env merge into the environment in linear time", async () => {
    const env = Object.fromEntries(Array.from({ length: 60_000 }, (_, i) => [`V${i}`, `${i}`]));
    await withWorker("60,000 variables", undefined, async (worker) => {
      const before = cpuMillis(worker.pid);
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", 'echo "$V0 $V59999"'], env })]);
      const answers = await settled(worker, [1], 30_000, "60,000 variables");
      const used = cpuMillis(worker.pid) - before;
      assert.equal(exitCode(answers.get(1), "60,000 variables"), 0);
      assert.equal(text(decodeExit(answers.get(1)!.payload).stdout), "0 59999\n");
      // The worker's own CPU, not wall time (a loaded machine stretches that): a merge that compared every variable
      // with every other (1.8e9 comparisons) would take tens of seconds of it even without the sanitizers.
      assert.ok(used < 5000, `${used} ms of the worker's CPU`);
    });
  });

  it("a request of millions of values fails alone with E2BIG, parsed in memory bounded by the exec limit", async () => {
    await withWorker("millions of values", [RELEASE_WORKER], async (worker) => {
      worker.channel.write([
        spawnFrame(1, { args: new Array(3_000_000).fill("") }),
        spawnFrame(2, { cmd: "echo", args: ["after"] }),
      ]);
      const answers = await settled(worker, [1, 2], 30_000, "millions of values");
      assert.equal(answers.get(1)!.type, Frame.SpawnError);
      assert.equal((decodeJson(answers.get(1)!.payload) as { code: string }).code, "E2BIG");
      assert.equal(text(decodeExit(answers.get(2)!.payload).stdout), "after\n");
      const peak = peakMemory(worker.pid);
      assert.ok(peak < 80 * 1024 * 1024, `peak ${peak} bytes`);
    });
  });

  it("buffered output is not read while the host does not read the channel: the worker stays small", async () => {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-unread-"));
    // A host that reads nothing: the connection stays paused (pauseOnConnect) until the output is measured.
    const server = createServer({ pauseOnConnect: true });
    const path = join(scratch, "channel");
    await new Promise<void>((resolve) => server.listen(path, resolve));
    const connected = new Promise<Socket>((resolve) => server.once("connection", resolve));
    const child = nodeSpawn(RELEASE_WORKER, [], {
      stdio: ["ignore", "ignore", "inherit"],
      env: { ...process.env, SPAWNPOOL_CHANNEL: "unix", SPAWNPOOL_BOOTSTRAP: JSON.stringify({ path, secret: "00" }) },
    });
    try {
      const socket = await withTimeout(connected, 10_000, "the worker did not connect");
      server.close();
      const bytes = 100_000_000;
      socket.write(spawnFrame(1, { cmd: "head", args: ["-c", `${bytes}`, "/dev/zero"], stderr: "null" }));
      await new Promise((resolve) => setTimeout(resolve, 2000));
      const peak = peakMemory(child.pid!);
      // Then read: every byte arrives, and the command exits 0.
      let received = 0;
      const exited = new Promise<number | null>((resolve) => {
        let secret = true;
        const decoder = new FrameDecoder((type, _id, payload) => {
          if (type === Frame.Stdout) received += payload.byteLength;
          if (type === Frame.Exit) {
            const exit = decodeExit(payload);
            received += exit.stdout.byteLength;
            resolve(exit.info.code);
          }
        });
        socket.on("data", (chunk: Uint8Array) => {
          if (secret) {
            secret = false;
            chunk = chunk.subarray(1);
          }
          decoder.push(chunk);
        });
        socket.resume();
      });
      assert.equal(await withTimeout(exited, 30_000, "no exit"), 0);
      assert.equal(received, bytes);
      assert.ok(peak < 48 * 1024 * 1024, `peak ${peak} bytes while the channel was not read`);
      socket.end();
    } finally {
      child.kill("SIGKILL");
      server.close();
      rmSync(scratch, { recursive: true, force: true });
    }
  });
  it("output that came while the loop was held past a grace's end is read, not dropped with the stream", async () => {
    // The command exits at once; its background job writes 0.12 s later, within the 200 ms grace. The test hook
    // (SPAWNPOOL_TEST_LOOP_STALL_MS, in the sanitized build only) holds the loop 1 s after the poll that armed the
    // grace, so that the write lands while the loop is held and the grace is past its end when the timers run: a
    // worker left off the CPU between its poll and its timers. The grace must not end a stream with output waiting.
    await withWorker("after the stalled grace", undefined, async (worker) => {
      const command = { cmd: "sh", args: ["-c", "echo early; (sleep 0.12; echo late) & exit 0"] };
      worker.channel.write([spawnFrame(1, command)]);
      const exit = (await settled(worker, [1], 10_000, "the command's exit")).get(1)!;
      assert.equal(exit.type, Frame.Exit);
      assert.equal(text(decodeExit(exit.payload).stdout), "early\nlate\n");
    }, { SPAWNPOOL_TEST_LOOP_STALL_MS: "1000" });
  });

  it("closing the channel kills the group of a command that exited while a grandchild holds its stdout", async () => {
    const worker = await startWorker();
    let grandchild = 0;
    try {
      creditOutput(worker);
      // The grandchild keeps writing, so the quiet period that would release the stream never comes; it ignores
      // SIGPIPE, so the worker's end of the pipe closing does not end it.
      const script = `(trap '' PIPE; while :; do echo tick; sleep 0.05; done) & echo "pid $!"`;
      const exited = new Promise<void>((resolve) => {
        const credit = worker.onFrame;
        worker.onFrame = (f) => {
          credit(f);
          if (f.type === Frame.Exited) resolve();
        };
      });
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", script], buffered: false, group: true })]);
      await withTimeout(exited, 10_000, "no Exited");
      const output = worker.received.filter((f) => f.type === Frame.Stdout).map((f) => text(f.payload)).join("");
      grandchild = Number(/pid (\d+)\n/.exec(output)![1]);
      assert.ok(alive(grandchild));
      worker.channel.close();
      await expectExit(worker, [0], "closed with a grandchild writing");
      const deadline = Date.now() + 5000;
      while (alive(grandchild) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      assert.ok(!alive(grandchild), "the grandchild outlived the worker");
    } finally {
      worker.kill();
      if (grandchild > 0 && alive(grandchild)) process.kill(grandchild, "SIGKILL");
    }
  });
  it("commands get only fds 0-2: not the worker's inherited fds, nor /dev/null's on the vfork path", async () => {
    // The wrapper leaves fds 7 and 9 open, not close-on-exec, as a careless parent could. The poll build marks them
    // one by one, as a system without close_range (or a C library without its macro: musl) does.
    for (const path of [ASAN_WORKER, POLL_WORKER]) {
      await withWorker(path, ["sh", "-c", 'exec 7</dev/null 9</dev/null; exec "$0"', path], async (worker) => {
        // The shell's fds, listed by its child (a glob or a $(...) would open one in the shell).
        const list: Partial<SpawnRequest> = { cmd: "sh", args: ["-c", "ls /proc/$$/fd"], stdin: "null" };
        // A uid (its own) takes the vfork path, as a cwd does where posix_spawn cannot change directory.
        worker.channel.write([spawnFrame(1, list), spawnFrame(2, { ...list, uid: process.getuid!() })]);
        const answers = await settled(worker, [1, 2], 10_000, path);
        for (const id of [1, 2]) {
          assert.equal(exitCode(answers.get(id), `${path}: request ${id}`), 0);
          assert.equal(text(decodeExit(answers.get(id)!.payload).stdout), "0\n1\n2\n", `${path}: request ${id}`);
        }
      });
    }
  });

  it("a start that fails in the child comes back with its errno, where vfork shares memory and where it copies it", async () => {
    // The poll build's vfork is a fork, as under qemu-user and valgrind: there the child's errno comes back through a
    // pipe. A script without "#!" is the ENOEXEC the worker answers by running it with /bin/sh.
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-child-errors-"));
    try {
      const script = join(scratch, "no-shebang");
      writeFileSync(script, "echo ran by sh\n", { mode: 0o755 });
      const plain = join(scratch, "plain");
      writeFileSync(plain, "");
      for (const path of [ASAN_WORKER, POLL_WORKER]) {
        await withWorker(path, [path], async (worker) => {
          // Twice over: the first start finds out how vfork behaves, the later ones rely on it.
          const round = (base: number) => [
            spawnFrame(base + 1, { cmd: "true", cwd: join(scratch, "missing") }),
            spawnFrame(base + 2, { cmd: "true", cwd: plain }),
            spawnFrame(base + 3, { cmd: script }),
            spawnFrame(base + 4, { cmd: "echo", args: ["after"] }),
          ];
          const ids = [1, 2, 3, 4, 11, 12, 13, 14];
          worker.channel.write([...round(0), ...round(10)]);
          const answers = await settled(worker, ids, 10_000, path);
          for (const base of [0, 10]) {
            const what = (n: number) => `${path}: request ${base + n}`;
            const codeOf = (n: number) => {
              const answer = answers.get(base + n)!;
              assert.equal(answer.type, Frame.SpawnError, what(n));
              return (decodeJson(answer.payload) as { code: string }).code;
            };
            assert.equal(codeOf(1), "ENOENT", what(1));
            assert.equal(codeOf(2), "ENOTDIR", what(2));
            assert.equal(exitCode(answers.get(base + 3), what(3)), 0);
            assert.equal(text(decodeExit(answers.get(base + 3)!.payload).stdout), "ran by sh\n", what(3));
            assert.equal(text(decodeExit(answers.get(base + 4)!.payload).stdout), "after\n", what(4));
          }
        });
      }
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });

  it("a command ended by a real-time signal exits with 128 + its number, as in a shell", async () => {
    await withWorker("real-time signal", undefined, async (worker) => {
      worker.channel.write([spawnFrame(1, { cmd: "sh", args: ["-c", "kill -36 $$"] })]);
      const answers = await settled(worker, [1], 10_000, "real-time signal");
      const { usage: _usage, ...status } = decodeExit(answers.get(1)!.payload).info;
      assert.deepEqual(status, { code: 128 + 36, signal: null, reason: null });
    });
  });
});

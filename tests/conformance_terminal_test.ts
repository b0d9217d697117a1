/**
 * Terminals: commands on a pseudo-terminal of their own through every shape (the Bun shape's `terminal`, the Deno
 * shape's, `spawnpool/pty`'s node-pty API), with real PTYs opened by native workers: the device, its size and SIGWINCH,
 * echo and ^C, raw mode, colours, flow control through a reader that pauses, the last output before the end, the
 * hang-up at close, a tree killed, and no descriptor left behind after 1,000 terminals. Workers that cannot open one
 * (Deno, Bun and Node workers, and remote agents running them) fail each command with ENOTSUP.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomInt } from "node:crypto";
import { readdirSync, readlinkSync } from "node:fs";
import { it } from "node:test";
import { SpawnError, Terminal, type TerminalOptions } from "../mod.ts";
import { ptyFor } from "../pty.ts";
import { forEachWorker, text, WORKERS } from "./_conformance.ts";
import { alive, fixture, hostArgv, markedProcesses, openFds, survivors, withTimeout } from "./_helpers.ts";

/** What a terminal showed, as text, and a way to wait for some of it. */
function screen(options: TerminalOptions = {}) {
  let shown = "";
  let waiter: { pattern: RegExp | string; resolve: () => void } | undefined;
  const check = () => {
    if (waiter === undefined) return;
    const found = typeof waiter.pattern === "string" ? shown.includes(waiter.pattern) : waiter.pattern.test(shown);
    if (found) {
      waiter.resolve();
      waiter = undefined;
    }
  };
  const exits: Array<[number, string | null]> = [];
  let closed: () => void;
  const closedYet = new Promise<void>((resolve) => (closed = resolve));
  const terminal: TerminalOptions = {
    ...options,
    data(_terminal, bytes) {
      shown += text(bytes);
      check();
    },
    exit(_terminal, code, signal) {
      exits.push([code, signal]);
      closed();
    },
  };
  return {
    terminal,
    exits,
    get shown() {
      return shown;
    },
    /** Resolves once the terminal closed: its `exit` callback (after its command's last output). */
    closed(): Promise<void> {
      return withTimeout(closedYet, 10_000, "the terminal never closed");
    },
    /** Resolves once the terminal has shown `pattern`. */
    until(pattern: RegExp | string, ms = 10_000): Promise<void> {
      const shownYet = new Promise<void>((resolve) => (waiter = { pattern, resolve }));
      check();
      return withTimeout(shownYet, ms, `the terminal never showed ${pattern}; it showed ${JSON.stringify(shown)}`);
    },
  };
}

/** The worker's open descriptors and how many are terminals' controlling sides (/dev/ptmx). */
function workerFds(pid: number): { count: number; ptmx: number } {
  const fds = readdirSync(`/proc/${pid}/fd`);
  let ptmx = 0;
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === "/dev/ptmx") ptmx++;
    } catch {
      // closed while listing
    }
  }
  return { count: fds.length, ptmx };
}

await forEachWorker("terminals", (pool, runtime, workers) => {
  if (runtime !== "native") {
    it("every shape's command on a terminal fails with ENOTSUP, naming the native worker", async () => {
      const proc = pool.spawn(["true"], { terminal: {} });
      await assert.rejects(proc.exited, (error: unknown) => {
        assert.ok(error instanceof SpawnError, String(error));
        assert.equal(error.code, "ENOTSUP");
        assert.match(error.message, /terminal.*native worker/);
        return true;
      });
      await assert.rejects(pool.command("true", { terminal: {} }).output(), { code: "ENOTSUP" });
      const pty = ptyFor(pool).spawn("true", []);
      const output: string[] = [];
      pty.onData((data) => output.push(String(data)));
      const exit = await new Promise((resolve) => pty.onExit(resolve));
      assert.deepEqual(exit, { exitCode: 1, signal: 0 });
      assert.match(output.join(""), /terminal.*native worker/);
    });
    return;
  }

  it("Bun shape: the command's stdin, stdout and stderr are a /dev/pts terminal of the size asked", async () => {
    const s = screen({ cols: 91, rows: 27 });
    const script = "tty; stty size; [ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo all-three-ttys; exit 3";
    const proc = pool.spawn(["sh", "-c", script], { terminal: s.terminal });
    assert.equal(proc.stdin, null);
    assert.equal(proc.stdout, null);
    assert.equal(proc.stderr, null);
    assert.ok(proc.terminal instanceof Terminal);
    assert.equal(await proc.exited, 3);
    // On a terminal, `exited` comes after the terminal's last output (Bun's can come before it).
    assert.match(s.shown, /^\/dev\/pts\/\d+\r\n27 91\r\nall-three-ttys\r\n$/);
    assert.equal(proc.terminal.closed, true, "a terminal made for one spawn closes with its command's output");
    assert.deepEqual(s.exits, [[0, null]]);
    assert.throws(() => proc.terminal!.write("x"), /Terminal is closed/);
  });

  it("resize() sets the size the command reads, and its foreground process group gets SIGWINCH", async () => {
    const s = screen({ cols: 80, rows: 24 });
    const proc = pool.spawn(
      ["bash", "-c", 'trap "stty size; exit 0" WINCH; echo ready; while :; do sleep 0.02; done'],
      { terminal: s.terminal },
    );
    await s.until("ready\r\n");
    proc.terminal!.resize(132, 43);
    assert.equal(await proc.exited, 0);
    await s.closed();
    assert.match(s.shown, /43 132\r\n$/);
    assert.equal(proc.terminal!.cols, 132);
    assert.equal(proc.terminal!.rows, 43);
  });

  it("what is written is echoed and read; ^C interrupts the foreground job; ^D ends input", async () => {
    const s = screen();
    const cat = pool.spawn(["cat"], { terminal: s.terminal });
    cat.terminal!.write("hello\n");
    await s.until("hello\r\nhello\r\n"); // the terminal's echo, then cat's copy
    cat.terminal!.write("\x04");
    assert.equal(await cat.exited, 0);

    // One process that says it sleeps once it does (a shell between its echo and its fork can take a ^C and leave it
    // pending until its child ends); Python ends by SIGINT on an uncaught KeyboardInterrupt.
    const t = screen();
    const sleep = "import time; print('sleeping', flush=True); time.sleep(100)";
    const sleeper = pool.spawn(["python3", "-c", sleep], { terminal: t.terminal });
    await t.until("sleeping");
    sleeper.terminal!.write("\x03");
    assert.equal(await withTimeout(sleeper.exited, 10_000, "^C did not end the foreground job"), 130);
    assert.equal(sleeper.signalCode, "SIGINT");
  });

  it("raw mode: no echo, no line editing, ^C is a byte; set before a spawn or while it runs", async () => {
    const s = screen();
    const terminal = new Terminal(s.terminal);
    terminal.setRawMode(true);
    const read = 'import sys, os; print("raw" if not os.isatty(0) else "ready", flush=True); ' +
      "print(repr(sys.stdin.buffer.read(2)), flush=True)";
    const proc = pool.spawn(["python3", "-c", read], { terminal });
    await s.until("ready");
    terminal.write("\x03z");
    assert.equal(await proc.exited, 0);
    await s.until("b'\\x03z'");
    assert.doesNotMatch(s.shown, /\^C/, "no echo in raw mode");

    // Raw mode off again: the terminal is cooked for the next command (^C interrupts).
    terminal.setRawMode(false);
    const stty = screen();
    const settings = pool.spawn(["stty", "-a"], { terminal: stty.terminal });
    assert.equal(await settings.exited, 0);
    await stty.closed();
    assert.match(stty.shown, /(?:^|\s)icanon(?:\s|$)/);
    await terminal.close();
  });

  it("a program that checks for a terminal colours its output; the Deno shape's output() collects it", async () => {
    const onTerminal = await pool.command("ls", { args: ["--color=auto", "/"], terminal: { cols: 200 } }).output();
    assert.equal(onTerminal.code, 0);
    const escape = new RegExp(String.fromCharCode(27) + "\\[[0-9;]*m");
    assert.match(text(onTerminal.stdout), escape, "colours on a terminal");
    assert.equal(onTerminal.stderr.byteLength, 0);
    const piped = await pool.command("ls", { args: ["--color=auto", "/"] }).output();
    assert.doesNotMatch(text(piped.stdout), escape, "none through a pipe");
    assert.throws(
      () => pool.command("ls", { terminal: { data() {} } }).output(),
      /output\(\) collects what the terminal shows/,
    );
  });

  it("Deno shape: spawn() gives child.terminal; the child's stdio getters say the terminal has them", async () => {
    const s = screen();
    const child = pool.command("sh", { args: ["-c", "read line; echo got-$line"], terminal: s.terminal }).spawn();
    assert.throws(() => child.stdout, /'stdout' is the terminal \(child.terminal\)/);
    assert.throws(() => child.stdin, /'stdin' is the terminal/);
    child.terminal!.write("abc\r");
    const status = await child.status;
    assert.deepEqual(status, { success: true, code: 0, signal: null });
    await s.closed();
    assert.match(s.shown, /got-abc\r\n$/);
  });

  it("a paused reader pauses the program; on resume 4 MiB arrive whole, then the exit", async () => {
    const bytes = 4 * 1024 * 1024;
    const pty = ptyFor(pool).spawn("python3", ["-c", `import sys; sys.stdout.write("x" * ${bytes})`], {
      encoding: null,
    });
    let received = 0;
    let exited = false;
    pty.onData((data) => (received += (data as Uint8Array).byteLength));
    const exit = new Promise<{ exitCode: number }>((resolve) =>
      pty.onExit((e) => {
        exited = true;
        resolve(e);
      })
    );
    pty.pause();
    const pid = await pty.spawned;
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(received, 0, "nothing is delivered while paused");
    assert.ok(alive(pid) && !exited, "the program is held, not finished");
    pty.resume();
    assert.deepEqual(await exit, { exitCode: 0, signal: 0 });
    assert.equal(received, bytes);
  });

  it("a reader that stays paused does not hold the exit: it comes 200 ms after, as node-pty's", async () => {
    const pty = ptyFor(pool).spawn("yes", []);
    pty.pause();
    await pty.spawned;
    await new Promise((resolve) => setTimeout(resolve, 100));
    pty.kill("SIGKILL");
    const exit = await withTimeout(new Promise((resolve) => pty.onExit(resolve)), 5000, "no exit while paused");
    assert.deepEqual(exit, { exitCode: 0, signal: 9 });
  });

  it("the last output before the exit is never lost", async () => {
    for (let i = 0; i < 20; i++) {
      const s = screen();
      const proc = pool.spawn(["python3", "-c", `import sys; sys.stdout.write("y" * 200000 + "end${i}")`], {
        terminal: s.terminal,
      });
      assert.equal(await proc.exited, 0);
      await s.until(`end${i}`, 5000);
      assert.equal(s.shown.length, 200000 + `end${i}`.length);
    }
  });

  it("close() hangs the terminal up: its command gets SIGHUP; a closed terminal takes no command", async () => {
    const s = screen();
    const terminal = new Terminal(s.terminal);
    const proc = pool.spawn(["sh", "-c", "echo up; sleep 100"], { terminal });
    await s.until("up");
    assert.throws(() => pool.spawn(["true"], { terminal }), /terminal is in use by a running command/);
    terminal.close();
    assert.equal(await proc.exited, 129);
    assert.equal(proc.signalCode, "SIGHUP");
    assert.deepEqual(s.exits, [[0, null]]);
    assert.throws(() => terminal.write("x"), /Terminal is closed/);
    assert.throws(() => terminal.resize(10, 10), /Terminal is closed/);
    assert.throws(() => pool.spawn(["true"], { terminal }), /terminal is closed/);
  });

  it("a Terminal takes commands in turn; what is written while none runs waits for the next", async () => {
    const s = screen();
    await using terminal = new Terminal(s.terminal);
    terminal.write("early\n");
    const first = pool.spawn(["sh", "-c", "read x; echo first-$x"], { terminal });
    assert.equal(await first.exited, 0);
    const second = pool.spawn(["sh", "-c", "echo second"], { terminal });
    assert.equal(await second.exited, 0);
    await s.until(/first-early\r\n[^]*second\r\n$/);
    assert.equal(terminal.closed, false, "a Terminal outlives its commands until closed");
  });

  const noSubreaper = workers.emulated && "qemu-user refuses PR_SET_CHILD_SUBREAPER (killTree fails there with EINVAL)";
  it("killTree on a terminal ends what the command left behind", { skip: noSubreaper }, async () => {
    const marker = String(randomInt(10_000_000, 99_999_999));
    const s = screen();
    const proc = pool.spawn(["sh", "-c", `setsid sleep ${marker}1 & sleep ${marker}2 & echo ready; wait`], {
      terminal: s.terminal,
      killTree: true,
    });
    await s.until("ready");
    const deadline = performance.now() + 5000;
    while (markedProcesses(marker).length < 2) {
      assert.ok(performance.now() < deadline, "the sleeps did not start");
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    proc.killTree("SIGKILL");
    await proc.exited;
    assert.deepEqual(await survivors(markedProcesses(marker), 3000), []);
  });

  it(
    "node-pty API: utf8 text, Buffers with encoding null, base64; exec and chdir failures exit 1; destroy is SIGHUP",
    async () => {
      const pty = ptyFor(pool);
      const run = (file: string, args: string[], options = {}) => {
        const p = pty.spawn(file, args, options);
        const data: Array<string | Uint8Array> = [];
        p.onData((d) => data.push(d));
        return new Promise<{ data: Array<string | Uint8Array>; exit: unknown }>((resolve) =>
          p.onExit((exit) => resolve({ data, exit }))
        );
      };
      const utf8 = await run("printf", ["\\303\\246"]);
      assert.deepEqual(utf8.data, ["\u00e6"]);
      const raw = await run("printf", ["\\303\\246"], { encoding: null });
      assert.ok(raw.data[0] instanceof Uint8Array);
      assert.deepEqual([...raw.data[0] as Uint8Array], [0xc3, 0xa6]);
      const b64 = await run("sh", ["-c", 'echo "test æ!"'], { encoding: "base64" });
      const decoded = new TextDecoder().decode(Uint8Array.from(atob(b64.data.join("")), (c) => c.charCodeAt(0)));
      assert.equal(decoded, "test æ!\r\n");
      assert.deepEqual((await run("/bin/bogus.exe", [])).exit, { exitCode: 1, signal: 0 });
      assert.deepEqual((await run("/bin/echo", [], { cwd: "/nowhere" })).exit, { exitCode: 1, signal: 0 });
      const shell = pty.spawn("sh", ["-c", "sleep 100"]);
      await shell.spawned;
      const exit = new Promise((resolve) =>
        shell.on("exit", (code: number, signal: number) => resolve([code, signal]))
      );
      shell.destroy();
      assert.deepEqual(await exit, [0, 1]);
      assert.throws(() => pty.spawn("sh", "-c true"), /args as a string is not supported on unix/);
      assert.throws(() => pty.spawn("sh", [], { cols: "80" as unknown as number }), /cols must be a number/);
      const sized = pty.spawn("sh", ["-c", "sleep 0.2; stty size"], { cols: 50, rows: 20 });
      assert.throws(() => sized.resize(0, 10), /resizing must be done using positive cols and rows/);
      sized.resize(60, 30);
      const out: string[] = [];
      sized.onData((d) => out.push(String(d)));
      await new Promise((resolve) => sized.onExit(resolve));
      assert.equal(out.join(""), "30 60\r\n");
    },
  );

  it("node-pty API: process names the terminal's foreground program", { skip: workers.remote }, async () => {
    const shell = ptyFor(pool).spawn("sh", ["-c", "exec sleep 100"]);
    await shell.spawned;
    const deadline = performance.now() + 5000;
    while (shell.process !== "sleep") {
      assert.ok(performance.now() < deadline, `process is "${shell.process}"`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    shell.kill("SIGKILL");
    await new Promise((resolve) => shell.onExit(resolve));
  });

  it("bad terminal options are TypeErrors and RangeErrors at the call", () => {
    assert.throws(() => pool.spawn(["true"], { terminal: { cols: 0 } }), RangeError);
    assert.throws(() => pool.spawn(["true"], { terminal: { rows: 70000 } }), RangeError);
    assert.throws(() => pool.spawn(["true"], { terminal: { name: 3 as unknown as string } }), TypeError);
    assert.throws(() => pool.spawn(["true"], { terminal: { data: "x" as unknown as () => void } }), TypeError);
    const detached = { terminal: {}, detached: true } as Parameters<typeof pool.spawn>[1];
    assert.throws(() => pool.spawn(["true"], detached), /terminal cannot be used with detached/);
    assert.throws(() => pool.spawn(["true"], { terminal: 3 as unknown as TerminalOptions }), TypeError);
    assert.throws(() => new Terminal().resize(1.5, 2), RangeError);
  });

  it("1,000 terminals later the host and the worker hold no more descriptors than before", async () => {
    const local = pool.stats().workers.map((w) => w.pid);
    if (local.length === 0) await pool.spawn(["true"]).exited;
    const pids = pool.stats().workers.map((w) => w.pid);
    const before = { host: openFds().length, workers: pids.map(workerFds) };
    let next = 0;
    const runOne = async () => {
      while (next < 1000) {
        next++;
        const proc = pool.spawn(["true"], { terminal: {} });
        assert.equal(await proc.exited, 0);
      }
    };
    await Promise.all([runOne(), runOne(), runOne(), runOne()]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const after = { host: openFds().length, workers: pids.map(workerFds) };
    assert.ok(after.host <= before.host + 2, `host fds ${before.host} -> ${after.host}`);
    after.workers.forEach((fds, i) => {
      assert.equal(fds.ptmx, 0, "no terminal left open in the worker");
      assert.ok(fds.count <= before.workers[i].count, `worker fds ${before.workers[i].count} -> ${fds.count}`);
    });
  });
}, { closePool: true });

// Found running node-pty's own tests (tools/node_pty_suite.mjs), whose assertions throw from inside data listeners: a
// callback that threw while the worker's frames were read was taken for the worker breaking the protocol, which stopped
// the worker with every command on it; a drain callback that threw dropped every later write.
it(
  "a terminal callback that throws (onData, data, drain) is the host's uncaught error; the terminal and its worker go on",
  { skip: !WORKERS.includes("native") },
  async () => {
    const [exe, ...argv] = hostArgv(fixture("terminal_callbacks_throw.ts"));
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(
        exe,
        argv,
        { timeout: 30_000 },
        (error, out, err) => error ? reject(new Error(`${error}\n${err}`)) : resolve(out),
      )
    );
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!);
    assert.deepEqual(result.uncaught.sort(), ["data threw", "drain threw", "onData threw"]); // drain may come first
    assert.equal(result.ptyShown, "one\r\ntwo\r\n");
    assert.deepEqual(result.ptyExit, { exitCode: 0, signal: 0 });
    assert.match(result.shown, /got:first\r\n[^]*got:second\r\n$/);
    assert.equal(result.code, 0);
    assert.equal(result.workerAfter, result.workerBefore, "the worker served on");
  },
);

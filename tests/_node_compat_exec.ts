/**
 * The differential scenarios of execFile() and exec() (callback and util.promisify forms) and of the synchronous
 * argument errors.
 *
 * @module
 */

import assert from "node:assert/strict";
import type * as native from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { hostArgv } from "./_helpers.ts";
import {
  BIG,
  COUNT_TERMS,
  type CP,
  describeError,
  observe,
  PATTERN,
  range,
  type Scenario,
  scratch,
  thrown,
  timeoutSignal,
  viaCallback,
  viaPromise,
} from "./_node_compat.ts";

export const execScenarios: Scenario[] = [
  // --- execFile and exec, callback forms
  { name: "execFile(file, callback)", run: viaCallback((cp, cb) => cp.execFile("pwd", cb)) },
  { name: "execFile(file, args, callback)", run: viaCallback((cp, cb) => cp.execFile("echo", ["a", "b"], cb)) },
  {
    name: "execFile(file, options, callback)",
    run: viaCallback((cp, cb) => cp.execFile("pwd", { cwd: scratch }, cb)),
  },
  {
    name: "execFile(file, args, options, callback)",
    run: viaCallback((cp, cb) => cp.execFile("sh", ["-c", "echo $X"], { env: { X: "x" } }, cb)),
  },
  {
    name: "execFile without a callback still runs",
    run: (cp) =>
      observe({ ...cp, spawn: ((f: string, a: string[]) => cp.execFile(f, a)) as CP["spawn"] }, {
        file: "echo",
        args: ["x"],
        read: "none",
      }),
  },
  {
    name: "execFile failure: code, cmd, stderr",
    run: viaCallback((cp, cb) => cp.execFile("sh", ["-c", "echo o; echo e >&2; exit 7"], cb)),
  },
  {
    name: "execFile of a missing command",
    run: viaCallback((cp, cb) => cp.execFile("no-such-command-xyz", ["a"], cb)),
  },
  { name: "execFile killed by a signal", run: viaCallback((cp, cb) => cp.execFile("sh", ["-c", "kill -TERM $$"], cb)) },
  { name: "execFile timeout", run: viaCallback((cp, cb) => cp.execFile("sleep", ["5"], { timeout: 150 }, cb)) },
  {
    // The command ignores the signal and writes on: Node destroyed its output at the timeout, so the late write
    // meets a closed pipe.
    name: "execFile timeout: output after the timeout is discarded",
    run: viaCallback((cp, cb) =>
      cp.execFile("sh", ["-c", "trap '' TERM; echo early; sleep 2; echo late"], { timeout: 1000 }, cb)
    ),
    nativeDiffers: {
      deno: { fields: ["error"], why: "Deno's execFile reports SIGTERM for a command that ignores it" },
    },
    expectPooled: (r) => assert.equal((r.error as { signal?: string }).signal, "SIGPIPE"),
  },
  {
    // The command notes each SIGTERM in a file (its output is discarded after the timeout) and exits by itself
    // later. It is a script of the host's runtime, which has no child processes that a signal to its process
    // group would also end (a shell may then report them on its closed stderr and die of SIGPIPE).
    name: "execFile timeout signals the command once",
    run: async (cp) => {
      const terms = join(scratch, "terms.log");
      writeFileSync(terms, "");
      const [exe, ...args] = hostArgv(COUNT_TERMS, terms);
      // Time for the runtime to start and handle SIGTERM on a loaded machine.
      const result = await viaCallback((cp, cb) => cp.execFile(exe, args, { timeout: 3000 }, cb))(cp);
      return { ...result, signals: readFileSync(terms, "utf8") };
    },
    nativeDiffers: {
      bun: { fields: ["signals"], why: "Bun's own execFile often signals the command twice" },
      deno: { fields: ["error"], why: "Deno's execFile reports SIGTERM for a command that traps it and exits" },
    },
    expectPooled: (r) => {
      assert.equal(r.signals, "TERM\n");
      const { code, killed, signal } = r.error as Record<string, unknown>;
      assert.deepEqual({ code, killed, signal }, { code: 3, killed: true, signal: null });
    },
  },
  {
    name: "execFile timeout with a lower-case killSignal",
    run: viaCallback((cp, cb) =>
      cp.execFile("sleep", ["5"], { timeout: 150, killSignal: "sigint" as NodeJS.Signals }, cb)
    ),
    nativeDiffers: { deno: { fields: ["error"], why: "Deno's execFile takes upper-case signal names only" } },
  },
  {
    name: "execFile maxBuffer exceeded on stdout",
    run: viaCallback((cp, cb) => cp.execFile("cat", [BIG], { maxBuffer: 100_000, encoding: "buffer" }, cb)),
  },
  {
    name: "execFile maxBuffer exceeded on stderr",
    run: viaCallback((cp, cb) => cp.execFile("sh", ["-c", `cat '${BIG}' >&2`], { maxBuffer: 1000 }, cb)),
  },
  {
    name: "execFile default maxBuffer (1 MiB) exceeded",
    run: viaCallback((cp, cb) => cp.execFile("cat", [BIG], { encoding: "latin1" }, cb)),
  },
  {
    name: "execFile maxBuffer Infinity",
    run: viaCallback((cp, cb) => cp.execFile("cat", [BIG], { maxBuffer: Infinity, encoding: "buffer" }, cb)),
  },
  {
    name: "execFile encoding 'buffer'",
    run: viaCallback((cp, cb) => cp.execFile("cat", [PATTERN], { encoding: "buffer" }, cb)),
  },
  { name: "execFile encoding null", run: viaCallback((cp, cb) => cp.execFile("echo", ["x"], { encoding: null }, cb)) },
  {
    name: "execFile encoding 'hex'",
    run: viaCallback((cp, cb) => cp.execFile("echo", ["x"], { encoding: "hex" }, cb)),
  },
  {
    name: "execFile unknown encoding gives Buffers",
    run: viaCallback((cp, cb) => cp.execFile("echo", ["x"], { encoding: "nope" as BufferEncoding }, cb)),
  },
  {
    name: "execFile with an aborted signal",
    run: viaCallback((cp, cb) => cp.execFile("sleep", ["5"], { signal: timeoutSignal(150) }, cb)),
  },
  {
    name: "execFile aborted: SIGTERM, whatever its killSignal (that one is for the timeout)",
    run: (cp) =>
      new Promise((resolve) => {
        const options = { signal: timeoutSignal(150), killSignal: "SIGKILL" as NodeJS.Signals };
        let reported: unknown;
        const child: native.ChildProcess = cp.execFile("sleep", ["5"], options, (error) => (reported = error));
        // The callback comes with the abort, before the exit: the signal shows once the command is gone.
        child.on("close", () => resolve({ error: describeError(reported), signalCode: child.signalCode }));
      }),
    nativeDiffers: {
      bun: { fields: ["signalCode"], why: "Bun's execFile sends its killSignal on abort" },
      deno: { fields: ["signalCode"], why: "Deno's execFile sends its killSignal on abort" },
    },
    expectPooled: (r) => assert.equal(r.signalCode, "SIGTERM"),
  },
  {
    name: "execFile with shell: true",
    run: viaCallback((cp, cb) => cp.execFile("echo", ["$((6*7))"], { shell: true }, cb)),
    nativeDiffers: { deno: { fields: ["stdout"], why: "Deno quotes each argument for the shell" } },
    expectPooled: (r) => assert.equal(r.stdout, "42\n"),
  },
  { name: "exec(command, callback)", run: viaCallback((cp, cb) => cp.exec("echo hi | tr a-z A-Z", cb)) },
  {
    name: "exec with options",
    run: viaCallback((cp, cb) => cp.exec("pwd; echo $Y", { cwd: scratch, env: { Y: "y" } }, cb)),
  },
  { name: "exec failure", run: viaCallback((cp, cb) => cp.exec("echo out; echo err >&2; exit 9", cb)) },
  {
    name: "exec of a missing command (shell says 127)",
    run: viaCallback((cp, cb) => cp.exec("no-such-command-xyz", cb)),
  },
  {
    name: "exec with a custom shell",
    run: viaCallback((cp, cb) => cp.exec("echo ${BASH_VERSION:+bash}", { shell: "/bin/bash" }, cb)),
  },
  { name: "exec maxBuffer exceeded", run: viaCallback((cp, cb) => cp.exec(`cat '${BIG}'`, { maxBuffer: 5000 }, cb)) },
  // --- util.promisify
  {
    name: "promisify(execFile) resolves { stdout, stderr }",
    run: viaPromise((cp) => promisify(cp.execFile)("echo", ["p"])),
  },
  {
    name: "promisify(execFile) rejects with stdout and stderr on the error",
    run: viaPromise((cp) => promisify(cp.execFile)("sh", ["-c", "echo o; echo e >&2; exit 2"])),
  },
  { name: "promisify(exec) resolves", run: viaPromise((cp) => promisify(cp.exec)("echo promised")) },
  { name: "promisify(exec) rejects", run: viaPromise((cp) => promisify(cp.exec)("exit 3")) },
  {
    name: "promisify(exec) with encoding 'buffer'",
    run: viaPromise((cp) => promisify(cp.exec)("printf abc", { encoding: "buffer" })),
  },
  {
    name: "the promise carries .child",
    run: async (cp) => {
      const promise = promisify(cp.execFile)("echo", ["c"]) as Promise<unknown> & { child: native.ChildProcess };
      const child = promise.child;
      await promise;
      return { isEmitter: typeof child.on === "function", exitCode: child.exitCode, pid: typeof child.pid };
    },
  },
  {
    name: "20 concurrent execFile calls",
    run: (cp) =>
      Promise.all(
        range(20).map((i) =>
          new Promise((resolve) => cp.execFile("echo", [`n${i}`], (e, out) => resolve(`${e}:${out}`)))
        ),
      ),
  },
  // --- synchronous argument errors
  ...([
    ["spawn: file not a string", (cp: CP) => cp.spawn(42 as unknown as string)],
    ["spawn: empty file", (cp: CP) => cp.spawn("")],
    ["spawn: NUL in file", (cp: CP) => cp.spawn("ec\0ho")],
    ["spawn: args a string", (cp: CP) => cp.spawn("echo", "x" as unknown as string[])],
    ["spawn: NUL in an argument", (cp: CP) => cp.spawn("echo", ["a\0b"])],
    ["spawn: options a string", (cp: CP) => cp.spawn("echo", [], "x" as unknown as native.SpawnOptions)],
    ["spawn: cwd a number", (cp: CP) => cp.spawn("echo", [], { cwd: 5 as unknown as string })],
    ["spawn: NUL in cwd", (cp: CP) => cp.spawn("echo", [], { cwd: "/tm\0p" })],
    ["spawn: negative timeout", (cp: CP) => cp.spawn("echo", [], { timeout: -1 })],
    ["spawn: fractional timeout", (cp: CP) => cp.spawn("echo", [], { timeout: 1.5 })],
    ["spawn: unknown killSignal", (cp: CP) => cp.spawn("echo", [], { killSignal: "SIGNOPE" as NodeJS.Signals }), {
      deno: { fields: ["threw", "code"], why: "Deno does not validate killSignal" },
    }],
    ["spawn: killSignal an object", (cp: CP) => cp.spawn("echo", [], { killSignal: {} as NodeJS.Signals }), {
      deno: { fields: ["threw", "code"], why: "Deno does not validate killSignal" },
    }],
    ["kill(null)", (cp: CP) => {
      const child = cp.spawn("true");
      child.on("error", () => {});
      child.kill(null as unknown as number);
    }, { deno: { fields: ["threw", "code"], why: "Deno's kill() takes null for SIGTERM" } }],
    ["kill({})", (cp: CP) => {
      const child = cp.spawn("true");
      child.on("error", () => {});
      child.kill({} as unknown as number);
    }],
    ["spawn: shell a number", (cp: CP) => cp.spawn("echo", [], { shell: 5 as unknown as boolean })],
    ["spawn: argv0 a number", (cp: CP) => cp.spawn("echo", [], { argv0: 5 as unknown as string })],
    ["spawn: uid a string", (cp: CP) => cp.spawn("echo", [], { uid: "a" as unknown as number })],
    ["spawn: detached a string", (cp: CP) => cp.spawn("echo", [], { detached: "yes" as unknown as boolean })],
    ["spawn: signal not a signal", (cp: CP) => cp.spawn("echo", [], { signal: {} as AbortSignal })],
    ["spawn: serialization 'x'", (cp: CP) => cp.spawn("echo", [], { serialization: "x" as "json" })],
    ["spawn: stdio an unknown word", (cp: CP) => cp.spawn("echo", [], { stdio: "weird" as "pipe" }), {
      bun: { fields: ["code"], why: "Bun throws the older ERR_INVALID_OPT_VALUE" },
      deno: { fields: ["threw", "code"], why: "Deno throws ERR_NOT_IMPLEMENTED" },
    }],
    ["spawn: NUL in an env value", (cp: CP) => cp.spawn("echo", [], { env: { A: "a\0b" } })],
    [
      "execFile: callback not a function",
      (cp: CP) => (cp.execFile as (...a: unknown[]) => unknown)("echo", [], {}, "x"),
    ],
    ["execFile: negative maxBuffer", (cp: CP) => cp.execFile("echo", [], { maxBuffer: -1 })],
    ["execFile: options a number", (cp: CP) => (cp.execFile as (...a: unknown[]) => unknown)("echo", [], 5)],
    ["exec: command not a string", (cp: CP) => cp.exec(5 as unknown as string)],
    ["exec: NUL in command", (cp: CP) => cp.exec("echo \0")],
  ] as Array<[string, (cp: CP) => unknown, Scenario["nativeDiffers"]?]>).map((
    [name, call, nativeDiffers],
  ): Scenario => ({
    name: `throws synchronously: ${name}`,
    run: (cp) => thrown(() => call(cp)),
    nativeDiffers,
    expectPooled: (r) => assert.ok(r.threw === "TypeError" || r.threw === "RangeError"),
  })),
  {
    name: "signal errors carry Node's messages",
    run: (cp) => {
      const child = cp.spawn("true");
      child.on("error", () => {});
      const message = (fn: () => unknown) => {
        try {
          fn();
        } catch (error) {
          return `${(error as { code?: string }).code}: ${(error as Error).message}`;
        }
        return "did not throw";
      };
      return {
        killObject: message(() => child.kill({} as unknown as number)),
        killArray: message(() => child.kill([1] as unknown as number)),
        killUnknown: message(() => child.kill("SIGNOPE" as NodeJS.Signals)),
        killSignalObject: message(() => cp.spawn("true", [], { killSignal: {} as NodeJS.Signals })),
        killSignalBoolean: message(() => cp.spawn("true", [], { killSignal: true as unknown as NodeJS.Signals })),
      };
    },
    nativeDiffers: {
      bun: { fields: ["killObject", "killArray"], why: "Bun's ERR_UNKNOWN_SIGNAL shows objects with String()" },
      deno: {
        fields: ["killObject", "killArray", "killSignalObject", "killSignalBoolean"],
        why: "Deno's kill() messages differ and it does not validate killSignal",
      },
    },
    expectPooled: (r) => {
      assert.equal(r.killObject, "ERR_UNKNOWN_SIGNAL: Unknown signal: {}");
      assert.equal(r.killArray, "ERR_UNKNOWN_SIGNAL: Unknown signal: [ 1 ]");
      assert.equal(
        r.killSignalObject,
        'ERR_INVALID_ARG_TYPE: The "options.killSignal" property must be one of type string or number. ' +
          "Received an instance of Object",
      );
      assert.equal(
        r.killSignalBoolean,
        'ERR_INVALID_ARG_TYPE: The "options.killSignal" property must be one of type string or number. ' +
          "Received type boolean (true)",
      );
    },
  },
];

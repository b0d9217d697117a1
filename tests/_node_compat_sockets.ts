/**
 * The differential scenarios of the stdio streams as sockets: in Node a child's piped stdin, stdout and stderr are
 * `net.Socket`s (stdin not readable; stdout and stderr writable into the command's end of the pipe), with a socket's
 * getters, `setTimeout()` and `ref()`/`unref()`.
 *
 * Bun's own stdio streams are plain streams without these; Deno's stdout and stderr are sockets that are not writable.
 * The pooled side is held to Node's behaviour there.
 *
 * @module
 */

import assert from "node:assert/strict";
import type * as native from "node:child_process";
import { Socket } from "node:net";
import { Duplex, PassThrough, Readable, Writable } from "node:stream";
import { spawnSync } from "node:child_process";
import { fixture, hostArgv } from "./_helpers.ts";
import { type CP, type Scenario, within20s } from "./_node_compat.ts";
import * as pooled from "../node.ts";

type Stream = Record<string, unknown> & NodeJS.EventEmitter;
/** A child's stream as the socket it is in Node. */
const asSocket = (stream: unknown) => stream as Socket;
const NAMES = ["stdin", "stdout", "stderr"] as const;

/** What a program can read of a stream as a socket, without calling anything that changes it. */
function socketView(stream: Stream): Record<string, unknown> {
  const view: Record<string, unknown> = {};
  for (
    const key of [
      "readable",
      "writable",
      "allowHalfOpen",
      "readyState",
      "pending",
      "connecting",
      "bytesRead",
      "bytesWritten",
      "remoteAddress",
      "remotePort",
      "remoteFamily",
      "localAddress",
      "localPort",
      "timeout",
      "destroyed",
      "readableEnded",
      "writableEnded",
    ]
  ) view[key] = stream[key];
  view.address = typeof stream.address === "function" ? (stream.address as () => unknown)() : "no address()";
  return view;
}

/** The three streams' views. */
function views(child: native.ChildProcess): Record<string, unknown> {
  return Object.fromEntries(NAMES.map((name) => [name, socketView(child[name] as unknown as Stream)]));
}

/** Node's view of a child's pipe socket, fresh from spawn(). */
const OPEN = {
  readyState: "open",
  pending: false,
  connecting: false,
  bytesRead: 0,
  bytesWritten: 0,
  remoteAddress: undefined,
  remotePort: undefined,
  remoteFamily: undefined,
  localAddress: undefined,
  localPort: undefined,
  timeout: undefined,
  destroyed: false,
  allowHalfOpen: false,
  address: {},
};
const NODE_VIEWS = {
  stdin: {
    ...OPEN,
    readable: false,
    writable: true,
    readyState: "writeOnly",
    readableEnded: true,
    writableEnded: false,
  },
  stdout: { ...OPEN, readable: true, writable: true, readableEnded: false, writableEnded: false },
  stderr: { ...OPEN, readable: true, writable: true, readableEnded: false, writableEnded: false },
};

/**
 * Runs `act` on a child with its stdin's and stdout's events logged, until `settle` ms after its 'close'; returns the
 * logs.
 */
function withEvents(
  cp: CP,
  file: string,
  args: string[],
  act: (child: native.ChildProcess, log: (line: string) => void) => void,
  settle = 10,
): Promise<Record<string, unknown>> {
  const child = cp.spawn(file, args);
  // Each stream's events in their order, apart from the child's: which of the two comes first is a race in Node too.
  const logs: Record<string, string[]> = { stdin: [], stdout: [], child: [] };
  for (const name of ["stdin", "stdout"] as const) {
    const stream = child[name]!;
    for (const event of ["error", "end", "finish", "close", "timeout"]) {
      stream.on(event, (value: unknown) => {
        const error = value as { code?: string; errno?: number; syscall?: string; message?: string } | undefined;
        logs[name].push(
          event === "error" ? `error ${error?.code} ${error?.errno} ${error?.syscall} ${error?.message}` : event,
        );
        if (event === "close") logs[name].push(`hadError ${value}`);
      });
    }
  }
  child.stdout!.on("data", (chunk: Buffer) => logs.stdout.push(`data ${JSON.stringify(String(chunk))}`));
  child.on("exit", (code) => logs.child.push(`exit ${code}`));
  return within20s(
    new Promise((resolve) => {
      child.on("close", (code) => {
        logs.child.push(`close ${code}`);
        // A stream's 'close' listener of ours runs after the child's own: a turn more at least.
        setTimeout(() => resolve(logs), settle);
      });
      const log = (line: string) => logs.child.push(line);
      try {
        act(child, log);
      } catch (error) {
        log(`threw ${(error as Error).name}`); // Bun's streams have no socket methods
        child.stdin!.end();
      }
    }),
    `${file} ${args.join(" ")}`,
  );
}

const bunStreams = "Bun's stdio streams are plain Readable and Writable streams, not sockets";
const denoOutputs = "Deno's stdout and stderr are sockets that are not writable (readyState 'readOnly')";
const bunEvents = {
  fields: ["stdin", "stdout", "child"],
  why: `${bunStreams}, whose 'close' passes no hadError`,
};
/** Node's stdin events when it was ended and the command read it to its end, or exited. */
const STDIN_ENDED = ["finish", "close", "hadError false"];

export const socketScenarios: Scenario[] = [
  {
    name: "stdio streams are net.Sockets, Readable, Writable and Duplex",
    run: (cp) => {
      const child = cp.spawn("true");
      const kinds = Object.fromEntries(NAMES.map((name) => {
        const stream = child[name];
        return [name, [Socket, Readable, Writable, Duplex].map((kind) => stream instanceof kind)];
      }));
      return within20s(new Promise((resolve) => child.on("close", () => resolve(kinds))), "true");
    },
    nativeDiffers: { bun: { fields: ["stdin", "stdout", "stderr"], why: bunStreams } },
    expectPooled: (r) => assert.deepEqual(r, Object.fromEntries(NAMES.map((name) => [name, [true, true, true, true]]))),
  },
  {
    name: "stdio sockets' flags and getters, as spawned",
    run: (cp) => {
      const child = cp.spawn("true");
      const spawned = views(child);
      return within20s(new Promise((resolve) => child.on("close", () => resolve(spawned))), "true");
    },
    nativeDiffers: {
      bun: { fields: ["stdin", "stdout", "stderr"], why: bunStreams },
      deno: { fields: ["stdout", "stderr"], why: denoOutputs },
    },
    expectPooled: (r) => assert.deepEqual(r, NODE_VIEWS),
  },
  {
    name: "stdio sockets' flags and getters after 'close': bytes counted",
    run: (cp) => {
      const child = cp.spawn("sh", ["-c", "cat; echo err >&2"]);
      child.stdout!.resume();
      child.stderr!.resume();
      child.stdin!.write("abc");
      child.stdin!.end("de");
      return within20s(new Promise((resolve) => child.on("close", () => resolve(views(child)))), "cat");
    },
    nativeDiffers: {
      bun: { fields: ["stdin", "stdout", "stderr"], why: bunStreams },
      deno: { fields: ["stdout", "stderr"], why: denoOutputs },
    },
    expectPooled: (r) => {
      const closed = {
        readyState: "closed",
        pending: true,
        readable: false,
        writable: false,
        destroyed: true,
        readableEnded: true,
      };
      assert.deepEqual(r.stdin, { ...NODE_VIEWS.stdin, ...closed, bytesWritten: 5, writableEnded: true });
      assert.deepEqual(r.stdout, { ...NODE_VIEWS.stdout, ...closed, bytesRead: 5, writableEnded: true });
      assert.deepEqual(r.stderr, { ...NODE_VIEWS.stderr, ...closed, bytesRead: 4, writableEnded: true });
    },
  },
  {
    name: "stdio sockets' setNoDelay, setKeepAlive, setTimeout(0), setEncoding, ref and unref return the socket",
    run: (cp) => {
      const child = cp.spawn("true");
      const calls: Record<string, unknown> = {};
      for (const name of NAMES) {
        const stream = child[name] as unknown as Record<string, (...args: unknown[]) => unknown>;
        calls[name] = [
          ["setNoDelay", true],
          ["setKeepAlive", true, 1000],
          ["setKeepAlive", { enable: false }],
          ["setTimeout", 0],
          ["unref"],
          ["ref"],
          ...(name === "stdin" ? [] : [["setEncoding", "utf8"]]),
        ].map(([method, ...args]) => {
          try {
            const result = stream[method as string](...args);
            return `${method} ${result === stream ? "this" : typeof result}`;
          } catch (error) {
            return `${method} threw ${(error as Error).name}`;
          }
        });
      }
      return within20s(new Promise((resolve) => child.on("close", () => resolve(calls))), "true");
    },
    nativeDiffers: { bun: { fields: ["stdin", "stdout", "stderr"], why: bunStreams } },
    expectPooled: (r) => {
      for (const name of NAMES) {
        for (const call of r[name] as string[]) assert.match(call, / this$/, `${name}.${call}`);
      }
    },
  },
  {
    name: "stdin end(): 'finish', then 'close' without an error",
    run: (cp) =>
      withEvents(cp, "cat", [], (child, log) => {
        child.stdin!.end("abc", () => log(`end callback, readyState ${asSocket(child.stdin).readyState}`));
      }),
    nativeDiffers: { bun: bunEvents, deno: { fields: ["stdout"], why: denoOutputs } },
    expectPooled: (r) => {
      assert.deepEqual(r.stdin, STDIN_ENDED);
      assert.deepEqual(r.stdout, ['data "abc"', "end", "finish", "close", "hadError false"]);
      assert.ok((r.child as string[]).includes("end callback, readyState closed"));
    },
  },
  {
    name: "stdout end(): finishes at once, its output still comes",
    run: (cp) =>
      withEvents(cp, "sh", ["-c", "sleep 0.2; echo out"], (child, log) => {
        asSocket(child.stdout).end(() => log("end callback"));
        const stdout = asSocket(child.stdout);
        log(`after end(): ${stdout.readyState} readable ${stdout.readable} writable ${stdout.writable}`);
        child.stdin!.end();
      }),
    nativeDiffers: { bun: bunEvents, deno: { fields: ["stdout", "child"], why: denoOutputs } },
    expectPooled: (r) => {
      assert.deepEqual(r.stdin, STDIN_ENDED);
      assert.deepEqual(r.stdout, ["finish", 'data "out\\n"', "end", "close", "hadError false"]);
      assert.deepEqual((r.child as string[]).slice(0, 2), [
        "after end(): readOnly readable true writable false",
        "end callback",
      ]);
    },
  },
  {
    name: "a write to a running child's stdout is taken; the output then ends in ECONNRESET",
    run: (cp) =>
      withEvents(cp, "sh", ["-c", "sleep 0.2; echo out"], (child, log) => {
        const taken = asSocket(child.stdout).write("x", (error) => log(`write callback ${error?.message}`));
        log(`write ${taken}, bytesWritten ${asSocket(child.stdout).bytesWritten}`);
        child.stdin!.end();
      }),
    nativeDiffers: { bun: bunEvents, deno: { fields: ["stdout", "child"], why: denoOutputs } },
    expectPooled: (r) => {
      assert.deepEqual(r.stdin, STDIN_ENDED);
      assert.deepEqual(r.stdout, [
        'data "out\\n"',
        "error ECONNRESET -104 read read ECONNRESET",
        "close",
        "hadError true",
      ]);
      assert.deepEqual((r.child as string[]).slice(0, 2), ["write true, bytesWritten 1", "write callback undefined"]);
    },
  },
  {
    name: "a write to stdout once the command let go of it fails with EPIPE",
    run: (cp) =>
      withEvents(cp, "sh", ["-c", "exec >&-; sleep 0.2"], (child, log) => {
        child.stdout!.on("end", () => {
          try {
            const taken = asSocket(child.stdout).write("x", (error) => log(`write callback ${error?.message}`));
            log(`write ${taken}`);
          } catch (error) {
            log(`write threw ${(error as Error).name}`); // Bun's stdout has no write()
          }
        });
        child.stdin!.end();
      }),
    nativeDiffers: { bun: bunEvents, deno: { fields: ["stdout", "child"], why: denoOutputs } },
    expectPooled: (r) => {
      assert.deepEqual(r.stdin, STDIN_ENDED);
      assert.deepEqual(r.stdout, ["end", "error EPIPE -32 write write EPIPE", "close", "hadError true"]);
      assert.deepEqual((r.child as string[]).slice(0, 2), ["write false", "write callback write EPIPE"]);
    },
  },
  {
    // Output at 0, 800 and 1,600 ms: a 'timeout' 300 ms after each of the first two; the timer the third restarted is
    // cleared when the stream is destroyed at its end (450 ms are left for it to fire). The timer is set at the first
    // output, however long the start took; the margins are for a loaded machine: the end may come up to 300 ms after
    // the last output, each output up to 500 ms late.
    name: "stdout setTimeout(): 'timeout' when the command is quiet, none once destroyed",
    run: (cp) =>
      withEvents(cp, "sh", ["-c", "echo a; sleep 0.8; echo b; sleep 0.8; echo c"], (child) => {
        const stdout = asSocket(child.stdout);
        if (typeof stdout.setTimeout !== "function") throw new TypeError("stdout.setTimeout is not a function");
        child.stdout!.once("data", () => stdout.setTimeout(300));
        child.stdin!.end();
      }, 450),
    nativeDiffers: { bun: bunEvents, deno: { fields: ["stdout"], why: denoOutputs } },
    expectPooled: (r) => {
      assert.deepEqual(r.stdin, STDIN_ENDED);
      assert.deepEqual(r.stdout, [
        'data "a\\n"',
        "timeout",
        'data "b\\n"',
        "timeout",
        'data "c\\n"',
        "end",
        "finish",
        "close",
        "hadError false",
      ]);
    },
  },
  {
    // execa's transforms put their own streams in child.stdout and child.stdio[1], piping the child's into them.
    name: "child.stdout replaced by the caller: 'exit' and 'close' still come",
    run: (cp) => {
      const child = cp.spawn("sh", ["-c", "echo out; echo err >&2"]);
      const replacement = new PassThrough();
      child.stdout!.pipe(replacement);
      (child as { stdout: Readable | null }).stdout = replacement;
      child.stdio[1] = replacement;
      const chunks: string[] = [];
      replacement.on("data", (chunk: Buffer) => chunks.push(String(chunk)));
      child.stderr!.resume();
      const events: string[] = [];
      child.on("exit", (code) => events.push(`exit ${code}`));
      return within20s(
        new Promise((resolve) =>
          child.on("close", (code) => resolve({ events: [...events, `close ${code}`], out: chunks.join("") }))
        ),
        "sh",
      );
    },
  },
  {
    // Node closes a destroyed stdout at once: a command that writes after that (here once it has its input) fails with
    // EPIPE, and sh dies of SIGPIPE. A worker must not keep the socket open for it (execa's wait-epipe tests).
    name: "stdout destroyed while the command waits for its input: its next write fails",
    run: async (cp) => {
      const child = cp.spawn("sh", ["-c", "echo ready >&2; read line; echo out; echo after >&2"]);
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const closed = new Promise<[number | null, string | null]>((resolve) =>
        child.on("close", (code, signal) => resolve([code, signal]))
      );
      while (!stderr.includes("ready")) await new Promise((resolve) => setTimeout(resolve, 5));
      await new Promise((resolve) => setTimeout(resolve, 200)); // sh is asleep in its read by now
      child.stdout!.destroy();
      child.stdin!.end("input\n");
      const [code, signal] = await within20s(closed, "sh");
      return { code, signal, stderr };
    },
    spawnerDiffers: Object.fromEntries(["deno", "bun"].map((runtime) => [runtime, {
      fields: ["code", "signal", "stderr"],
      why: "spawned by Deno or Bun (their workers, or their host), the command's stdout is the runtime's own pipe, " +
        "which a cancelled read leaves open until that read returns: the command's next write may go through",
    }])),
  },
  {
    // Destroyed before the command wrote anything, while it is busy starting (here a loop of about 15 ms, inside
    // the 20 ms a writer may be still before a worker closes a socket it lets go): Node closes it at once, so the
    // first write fails with EPIPE and sh dies of SIGPIPE (execa's wait-epipe tests, with a Node script that loads).
    name: "stdout destroyed as the command starts, before it wrote: its first write fails",
    run: async (cp) => {
      const script = 'i=0; while [ "$i" -lt 8000 ]; do i=$((i+1)); done; echo out; echo after >&2';
      const child = cp.spawn("sh", ["-c", script]);
      let stderr = "";
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const closed = new Promise<[number | null, string | null]>((resolve) =>
        child.on("close", (code, signal) => resolve([code, signal]))
      );
      child.stdout!.destroy();
      const [code, signal] = await within20s(closed, "sh");
      return { code, signal, stderr };
    },
    spawnerDiffers: {
      ...Object.fromEntries(["deno", "bun"].map((runtime) => [runtime, {
        fields: ["code", "signal", "stderr"],
        why: "spawned by Deno or Bun (their workers, or their host), the command's stdout is the runtime's own pipe, " +
          "which a cancelled read leaves open until that read returns: the command's first write may go through",
      }])),
      "in-host": {
        fields: ["code", "signal", "stderr"],
        why: "run in the host, the command is spawned by the loop a worker runs, which applies the release once its " +
          "spawn has resolved, a turn or more after Node's own destroy: on a busy host a write in between goes through",
      },
    },
  },
  {
    // The public field replaced, `stdio` left as it was, nothing read: after the exit, Node lets the child's own unread
    // output drain (its flush goes through `stdio`), so 'close' comes, and the replacement is left alone.
    name: "child.stdout replaced and nothing read: the child's own output drains for 'close', not the replacement",
    run: async (cp) => {
      const child = cp.spawn("sh", ["-c", "echo out"]);
      const replacement = new PassThrough();
      (child as { stdout: Readable | null }).stdout = replacement;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const close = await Promise.race([
        new Promise((resolve) => child.on("close", resolve)),
        new Promise((resolve) => (timer = setTimeout(() => resolve("none in 5 s"), 5000))),
      ]);
      clearTimeout(timer);
      if (close === "none in 5 s") child.stdio[1]?.resume(); // let the command's output go, for the next scenario
      return { close, replacementFlowing: replacement.readableFlowing };
    },
    nativeDiffers: {
      deno: {
        fields: ["close", "replacementFlowing"],
        why: "Deno's node:child_process flushes the public field's stream (the replacement) and waits for its own",
      },
    },
    expectPooled: (r) => assert.deepEqual(r, { close: 0, replacementFlowing: null }),
  },
  {
    // The child is unref'd, its stdout unref'd and ref'd again: the output being read keeps the host alive till it ends.
    name: "host: unref-output-then-ref (in a child process)",
    run: (cp) => {
      const which = cp === pooled ? "pooled" : "native";
      const [exe, ...args] = hostArgv(fixture("cp_host.ts"), which, "unref-output-then-ref");
      const result = spawnSync(exe, args, { encoding: "utf8" });
      return { status: result.status, stdout: result.stdout, stderr: result.stderr };
    },
    expectPooled: (r) => assert.equal(r.stdout, "got late-output\n"),
  },
];

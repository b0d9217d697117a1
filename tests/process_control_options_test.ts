/**
 * Process control's options everywhere but in the native worker: `killTree` and `limits` checked on every shape and
 * on the pool (nothing starts for a call that throws), `cgroup` checked at `new Pool` and handed to a native worker
 * in its environment, the wire's new fields checked both ways (an Exit head's `limit`, a Spawn request's `killTree`
 * and `limits`), and JavaScript workers failing a command that asks for either with ENOTSUP while they serve on. What
 * the native worker does with them is tests/process_control_test.ts's.
 */

import assert from "node:assert/strict";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { currentPlatform } from "../adapters/platform.ts";
import {
  concatBytes,
  decodeExit,
  decodeJson,
  encodeExit,
  encodeJson,
  Frame,
  ProtocolError,
  type SpawnRequest,
} from "../core/frame.ts";
import { buildRequest } from "../core/options.ts";
import { parseRequest } from "../worker/job.ts";
import { type ChildProcess, childProcessFor } from "../node.ts";
import { type Limits, Pool, SpawnError, type WorkerRuntime } from "../mod.ts";
import { decodeMessage, encodeMessage, frameParts, type MessageFrame, RemoteFrame } from "../remote/wire.ts";
import { type NatsServer, startNatsServer } from "../support/nats_server.mjs";
import { scratch, WORKERS } from "./_conformance.ts";
import { alive, HOST, survivors, withTimeout } from "./_helpers.ts";
import { type AgentProcess, freshSubject, skipWithout, sleep, startAgent } from "./_remote.ts";

/** The JavaScript worker runtimes under test (SPAWNPOOL_TEST_WORKERS, as the conformance files pick them). */
/** The fields every request built here shares: `echo`, collected. */
const ECHO = { cmd: "echo", args: [], stdin: "null", stdout: "piped", stderr: "piped", buffered: true } as const;

const JS_WORKERS = WORKERS.filter((entry): entry is "node" | "bun" | "deno" =>
  entry === "node" || entry === "bun" || entry === "deno"
);

/** A pool no test sends a command to: what they check throws before anything is sent. */
const idle = new Pool({ size: 1, runtime: "node" });
after(() => idle.close());

/** Bad `killTree` and `limits` values, what each throws from the Deno and Bun shapes, and what the message names. */
const BAD: Array<{ what: string; options: Record<string, unknown>; error: typeof TypeError; message: RegExp }> = [
  { what: "killTree a string", options: { killTree: "yes" }, error: TypeError, message: /killTree must be a boolean/ },
  { what: "killTree null", options: { killTree: null }, error: TypeError, message: /killTree must be a boolean/ },
  { what: "limits a number", options: { limits: 5 }, error: TypeError, message: /limits must be an object/ },
  { what: "limits null", options: { limits: null }, error: TypeError, message: /limits must be an object/ },
  { what: "limits an array", options: { limits: [1] }, error: TypeError, message: /limits must be an object/ },
  {
    what: "an unknown limit",
    options: { limits: { cpuSeconds: 1, stackBytes: 1 } },
    error: TypeError,
    message: /Unknown limit "stackBytes"/,
  },
  {
    what: "a limit named __proto__",
    options: { limits: JSON.parse('{"__proto__": 1}') },
    error: TypeError,
    message: /Unknown limit "__proto__"/,
  },
  {
    what: "a limit that is a string",
    options: { limits: { memoryBytes: "1G" } },
    error: TypeError,
    message: /limits\.memoryBytes must be a number/,
  },
  {
    what: "a negative limit",
    options: { limits: { fileSizeBytes: -1 } },
    error: RangeError,
    message: /limits\.fileSizeBytes must be a non-negative safe integer, got -1/,
  },
  {
    what: "a limit that is not an integer",
    options: { limits: { memoryBytes: 1.5 } },
    error: RangeError,
    message: /limits\.memoryBytes .* got 1\.5/,
  },
  {
    what: "a limit past 2^53",
    options: { limits: { coreBytes: 2 ** 53 } },
    error: RangeError,
    message: /limits\.coreBytes/,
  },
  { what: "NaN", options: { limits: { openFiles: NaN } }, error: RangeError, message: /limits\.openFiles/ },
  {
    what: "cpuSeconds 0",
    options: { limits: { cpuSeconds: 0 } },
    error: RangeError,
    message: /limits\.cpuSeconds must be a positive safe integer, got 0/,
  },
  { what: "processes 0", options: { limits: { processes: 0 } }, error: RangeError, message: /limits\.processes/ },
  { what: "openFiles 0", options: { limits: { openFiles: 0 } }, error: RangeError, message: /limits\.openFiles/ },
  {
    what: "killTree with detached",
    options: { killTree: true, detached: true },
    error: TypeError,
    message: /killTree cannot be used with detached/,
  },
];

describe(`${HOST} host: killTree and limits are checked at the call, on every shape`, () => {
  for (const { what, options, error, message } of BAD) {
    it(`${what}: the Deno and Bun shapes throw ${error.name}, and nothing is sent`, () => {
      assert.throws(() => idle.command("echo", options as never), (thrown: unknown) => {
        assert.ok(thrown instanceof error, `${String(thrown)} is a ${error.name}`);
        assert.match((thrown as Error).message, message);
        return true;
      });
      assert.throws(() => idle.spawn(["echo"], options as never), (thrown: unknown) => {
        assert.ok(thrown instanceof error, `${String(thrown)} is a ${error.name}`);
        assert.match((thrown as Error).message, message);
        return true;
      });
      assert.equal(idle.stats().started, 0, "no worker started");
    });
  }

  it("what every shape accepts: 0 bytes, one of each limit, killTree false with detached", () => {
    const limits: Limits = {
      cpuSeconds: 1,
      memoryBytes: 0,
      processes: 1,
      openFiles: 1,
      fileSizeBytes: 0,
      coreBytes: Number.MAX_SAFE_INTEGER,
    };
    const request = (options: Record<string, unknown>) =>
      buildRequest({
        ...ECHO,
        ...options,
      });
    assert.deepEqual({ ...request({ limits }).limits }, limits);
    assert.equal(Object.getPrototypeOf(request({ limits }).limits), null, "built without a prototype");
    assert.equal(request({ killTree: false, detached: true }).killTree, undefined);
    assert.equal(request({ killTree: true }).killTree, true);
    // Sent only when set: a request without them is the one it always was.
    const plain = request({ killTree: false, limits: undefined });
    assert.equal(Object.hasOwn(plain, "killTree") || Object.hasOwn(plain, "limits"), false);
    // A limit set to undefined is one not given; an empty object sets none.
    assert.deepEqual({ ...request({ limits: { cpuSeconds: undefined, coreBytes: 0 } }).limits }, { coreBytes: 0 });
    assert.equal(request({ limits: {} }).limits, undefined);
  });

  it("a limit planted on Object.prototype is no limit, nor is killTree", () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.killTree = true;
    proto.cpuSeconds = 1;
    try {
      const request = buildRequest({
        ...ECHO,
        limits: { coreBytes: 0 },
      });
      assert.equal(Object.hasOwn(request, "killTree"), false);
      assert.deepEqual(Object.keys(request.limits!), ["coreBytes"]);
    } finally {
      delete proto.killTree;
      delete proto.cpuSeconds;
    }
  });

  it("the drop-in throws Node's errors from spawn, execFile and exec", () => {
    const { spawn, execFile, exec } = childProcessFor(idle);
    const cases: Array<[Record<string, unknown>, string, typeof TypeError, RegExp]> = [
      [{ killTree: "yes" }, "ERR_INVALID_ARG_TYPE", TypeError, /"options\.killTree" property must be of type boolean/],
      [{ limits: 5 }, "ERR_INVALID_ARG_TYPE", TypeError, /"options\.limits" property must be of type object/],
      [{ limits: { stackBytes: 1 } }, "ERR_INVALID_ARG_VALUE", TypeError, /unknown limit 'stackBytes'/],
      [{ limits: { cpuSeconds: "1" } }, "ERR_INVALID_ARG_TYPE", TypeError, /"options\.limits\.cpuSeconds" property/],
      [{ limits: { memoryBytes: -1 } }, "ERR_OUT_OF_RANGE", RangeError, /"options\.limits\.memoryBytes" .* >= 0/],
      [{ limits: { cpuSeconds: 0 } }, "ERR_OUT_OF_RANGE", RangeError, /"options\.limits\.cpuSeconds" .* >= 1/],
      [{ limits: { openFiles: 2.5 } }, "ERR_OUT_OF_RANGE", RangeError, /Received 2\.5/],
      [{ killTree: true, detached: true }, "ERR_INCOMPATIBLE_OPTION_PAIR", TypeError, /"killTree" .* "detached"/],
    ];
    for (const [options, code, error, message] of cases) {
      const calls: Array<[string, () => unknown]> = [
        ["spawn", () => spawn("echo", [], options as never)],
        ["spawn without args", () => spawn("echo", options as never)],
        ["execFile", () => execFile("echo", [], options as never, () => {})],
        ["exec", () => exec("echo", options as never, () => {})],
      ];
      for (const [name, call] of calls) {
        // execFile and exec spawn without `detached`: they take no such option.
        if (code === "ERR_INCOMPATIBLE_OPTION_PAIR" && name.startsWith("exec")) continue;
        assert.throws(call, (thrown: unknown) => {
          assert.ok(thrown instanceof error, `${name} ${JSON.stringify(options)}: ${String(thrown)}`);
          assert.equal((thrown as { code?: string }).code, code, `${name} ${JSON.stringify(options)}`);
          assert.match((thrown as Error).message, message);
          return true;
        });
      }
    }
    // null is no option, as for Node's own.
    assert.doesNotThrow(() => normalizeOnly({ killTree: null, limits: null }));
    assert.equal(idle.stats().started, 0, "no worker started");
  });

  it("the pool's killTree and limits are checked at new Pool", () => {
    assert.throws(() => new Pool({ killTree: 1 as never }), {
      name: "TypeError",
      message: /killTree must be a boolean/,
    });
    assert.throws(() => new Pool({ limits: "1G" as never }), {
      name: "TypeError",
      message: /limits must be an object/,
    });
    assert.throws(() => new Pool({ limits: { heap: 1 } as never }), { name: "TypeError", message: /"heap"/ });
    assert.throws(() => new Pool({ limits: { cpuSeconds: 0 } }), { name: "RangeError", message: /cpuSeconds/ });
    assert.throws(() => new Pool({ limits: { memoryBytes: -5 } }), { name: "RangeError", message: /memoryBytes/ });
    // A remote pool's too: they travel with each command.
    const remote = { servers: "nats://127.0.0.1:1", subject: "jobs" };
    assert.throws(() => new Pool({ remote, limits: { processes: 0 } }), { name: "RangeError" });
    assert.doesNotThrow(() => new Pool({ remote, killTree: true, limits: { cpuSeconds: 5 } }).close());
  });
});

/** What the drop-in's spawn checks, without sending anything: a spawn on a pool that is closed. */
function normalizeOnly(options: Record<string, unknown>): void {
  const closed = new Pool({ size: 1, runtime: "node" });
  void closed.close();
  const child = childProcessFor(closed).spawn("echo", [], options as never);
  child.on("error", () => {});
}

describe(`${HOST} host: cgroup is checked at new Pool and given to native workers`, () => {
  it("a cgroup that is not an absolute path, or not a string, is a TypeError", () => {
    for (const cgroup of ["sys/fs/cgroup/jobs", "./jobs", "", "/jobs\0x"]) {
      assert.throws(() => new Pool({ runtime: "native", cgroup }), {
        name: "TypeError",
        message: /cgroup must be the absolute path of a cgroup v2 directory/,
      });
    }
    for (const cgroup of [42, true, null, new URL("file:///sys/fs/cgroup/jobs"), ["/sys/fs/cgroup"]]) {
      assert.throws(() => new Pool({ runtime: "native", cgroup: cgroup as never }), {
        name: "TypeError",
        message: /cgroup must be a string/,
      });
    }
  });

  it("a cgroup with JavaScript workers, with startInHost or with remote is a TypeError", () => {
    for (const runtime of ["node", "bun", "deno"] as const) {
      assert.throws(() => new Pool({ runtime, cgroup: "/sys/fs/cgroup/jobs" }), {
        name: "TypeError",
        message: new RegExp(`^cgroup needs native workers \\(runtime: "native"\\), got runtime "${runtime}"$`),
      });
    }
    // With an execPath and no runtime, the workers are the host's runtime's.
    assert.throws(() => new Pool({ execPath: process.execPath, cgroup: "/sys/fs/cgroup/jobs" }), {
      name: "TypeError",
      message: /cgroup needs native workers/,
    });
    assert.throws(() => new Pool({ runtime: "native", startInHost: true, cgroup: "/sys/fs/cgroup/jobs" }), {
      name: "TypeError",
      message: /cgroup cannot be used with startInHost/,
    });
    const remote = { servers: "nats://127.0.0.1:1", subject: "jobs" };
    assert.throws(() => new Pool({ remote, cgroup: "/sys/fs/cgroup/jobs" }), {
      name: "TypeError",
      message: /Option "cgroup" cannot be used with "remote"/,
    });
  });

  it("given without a runtime, a cgroup makes the pool's workers native, with no fallback", async () => {
    const pool = new Pool({ cgroup: "/sys/fs/cgroup/jobs" });
    assert.equal(pool.stats().runtime, "native");
    assert.equal(pool.stats().started, 0);
    await pool.close();
  });

  it("the launch of a native worker carries SPAWNPOOL_CGROUP, and only with a cgroup", async () => {
    const platform = currentPlatform();
    assert.deepEqual((await platform.launch("native", "/bin/true", "/sys/fs/cgroup/jobs")).env, {
      SPAWNPOOL_CGROUP: "/sys/fs/cgroup/jobs",
    });
    assert.equal((await platform.launch("native", "/bin/true")).env, undefined);
  });

  it("a native worker starts with SPAWNPOOL_CGROUP in its environment", async () => {
    // A stand-in for the native worker that writes down what it was given and exits without a hello.
    const seen = join(scratch, `cgroup-seen-${HOST}`);
    const worker = join(scratch, `cgroup-worker-${HOST}.sh`);
    writeFileSync(worker, `#!/bin/sh\nprintf '%s|%s' "$SPAWNPOOL_CGROUP" "$SPAWNPOOL_CHANNEL" > '${seen}'\nexit 3\n`);
    chmodSync(worker, 0o755);
    const cgroup = "/sys/fs/cgroup/spawnpool test/jobs";
    const pool = new Pool({ size: 1, runtime: "native", execPath: worker, cgroup });
    await assert.rejects(withTimeout(pool.ready(), 10_000, "the worker's failed start was not reported"), {
      code: "ERR_WORKER_START",
    });
    await pool.close();
    assert.match(readFileSync(seen, "utf8"), /^\/sys\/fs\/cgroup\/spawnpool test\/jobs\|(fd3|unix)$/);
  });
});

describe("the wire: limit in exits, killTree and limits in requests", () => {
  const exit = (head: Record<string, unknown>) =>
    concatBytes(encodeExit({ code: null, signal: "SIGXCPU", reason: null, ...head } as never));

  it("an Exit head's limit is one of the four names; anything else is a protocol error", () => {
    for (const limit of ["cpu", "fileSize", "memory", "processes"]) {
      assert.equal(decodeExit(exit({ limit })).info.limit, limit);
    }
    assert.equal("limit" in decodeExit(exit({})).info, false, "absent when the worker names none");
    for (const limit of ["bogus", "CPU", "", null, 1, ["cpu"], { cpu: true }, "__proto__", "toString"]) {
      assert.throws(() => decodeExit(exit({ limit })), ProtocolError, `limit ${JSON.stringify(limit)}`);
    }
  });

  const request = (extra: Record<string, unknown>): Uint8Array => {
    const base: SpawnRequest = buildRequest({
      ...ECHO,
    });
    return encodeJson({ ...base, ...extra });
  };

  it("a worker takes a request with killTree and limits as the host builds them", () => {
    const built = buildRequest({
      ...ECHO,
      killTree: true,
      limits: { cpuSeconds: 2, memoryBytes: 0 },
    });
    const parsed = parseRequest(encodeJson(built));
    assert.equal(parsed.killTree, true);
    assert.deepEqual(parsed.limits, { cpuSeconds: 2, memoryBytes: 0 });
  });

  it("a malformed killTree or limits is a protocol error for a worker", () => {
    const bad = [
      { killTree: "true" },
      { killTree: null },
      { limits: null },
      { limits: [] },
      { limits: 5 },
      { limits: { heap: 1 } },
      { limits: { cpuSeconds: -1 } },
      { limits: { cpuSeconds: "1" } },
      { limits: { memoryBytes: 2 ** 60 } },
      { limits: { cpuSeconds: 1.5 } },
      { limits: { cpuSeconds: { n: 1 } } },
    ];
    for (const extra of bad) {
      assert.throws(() => parseRequest(request(extra)), ProtocolError, JSON.stringify(extra));
    }
  });
});

/** The SpawnError a JavaScript worker fails a native-only option with. */
function enotsup(option: "killTree" | "limits", runtime: WorkerRuntime) {
  return (error: unknown): boolean => {
    assert.ok(error instanceof SpawnError, `a SpawnError: ${String(error)}`);
    assert.equal(error.code, "ENOTSUP");
    assert.equal(
      error.reason,
      `${option} is not supported by ${runtime} workers; it needs the native worker ` +
        `(runtime: "native", the default where it is installed)`,
    );
    return true;
  };
}

/** A spawn failure as the drop-in reports it: an 'error' event, then 'close' with its arguments. */
function dropInFailure(child: ChildProcess): Promise<{ error: Error & { code?: string }; closed: unknown[] }> {
  return new Promise((resolve) => {
    let failure: Error | undefined;
    child.on("error", (error: Error) => (failure = error));
    child.on("close", (...closed) => resolve({ error: failure!, closed }));
  });
}

for (const runtime of JS_WORKERS) {
  describe(`${HOST} host, ${runtime} workers: killTree and limits fail with ENOTSUP, and the worker serves on`, () => {
    const pool = new Pool({ size: 1, runtime });
    const dropIn = childProcessFor(pool);
    after(() => pool.close());

    it("killTree and limits fail that one command on every shape", async () => {
      await pool.ready();
      const limits = { cpuSeconds: 5 };
      await assert.rejects(pool.command("echo", { killTree: true }).output(), enotsup("killTree", runtime));
      await assert.rejects(pool.command("echo", { limits }).spawn().status, enotsup("limits", runtime));
      await assert.rejects(pool.spawn(["echo"], { killTree: true }).exited, enotsup("killTree", runtime));
      await assert.rejects(pool.spawn(["echo"], { limits }).exited, enotsup("limits", runtime));
      for (const [option, options] of [["killTree", { killTree: true }], ["limits", { limits }]] as const) {
        const child = dropIn.spawn("echo", ["x"], options as never) as unknown as ChildProcess;
        const { error, closed } = await dropInFailure(child);
        assert.equal(error.code, "ENOTSUP");
        assert.equal(error.message, "spawn echo ENOTSUP");
        enotsup(option, runtime)(error.cause);
        assert.deepEqual(closed, [-95, null]);
        assert.equal(child.limit, undefined);
      }
      const failed = await new Promise<Error | null>((resolve) =>
        dropIn.execFile("echo", [], { limits } as never, (error) => resolve(error))
      );
      assert.equal((failed as { code?: unknown } | null)?.code, "ENOTSUP");
      // The worker that refused them serves the next command: the refusal was the command's, not the channel's.
      const out = await pool.command("echo", { args: ["still here"] }).output();
      assert.equal(new TextDecoder().decode(out.stdout), "still here\n");
      assert.equal(out.limit, undefined);
      assert.equal(pool.stats().started, 1, "no worker was replaced");
    });

    it("the pool's killTree and limits are every command's, a command's own replace them", async () => {
      await using withDefaults = new Pool({ size: 1, runtime, killTree: true, limits: { memoryBytes: 2 ** 30 } });
      await assert.rejects(withDefaults.command("echo").output(), enotsup("killTree", runtime));
      await assert.rejects(withDefaults.spawn(["echo"], { killTree: false }).exited, enotsup("limits", runtime));
      // A command's limits replace the pool's whole: {} leaves none, and with killTree off it runs.
      const proc = withDefaults.spawn(["echo", "own"], { killTree: false, limits: {} });
      assert.equal(await proc.exited, 0);
      assert.equal(await new Response(proc.stdout).text(), "own\n");
      assert.equal(proc.limit, undefined);
      // A detached command does not get the pool's killTree.
      const detached = childProcessFor(withDefaults).spawn("true", [], {
        detached: true,
        stdio: "ignore",
        limits: {},
      } as never);
      const [code] = await new Promise<unknown[]>((resolve) => detached.on("close", (...args) => resolve(args)));
      assert.equal(code, 0);
    });

    it("a command with killTree or limits never runs in the host (startInHost): a worker refuses it", async () => {
      await using inHost = new Pool({ size: 1, runtime, startInHost: true });
      assert.equal(await inHost.spawn(["true"]).exited, 0);
      assert.equal(inHost.stats().started, 0, "the first command ran in the host");
      await assert.rejects(inHost.spawn(["true"], { killTree: true }).exited, enotsup("killTree", runtime));
      assert.equal(inHost.stats().started, 1, "a worker was started for the killTree command");
    });

    it("killTree() signals the command's process group (best effort), as kill() does the command", async () => {
      const shell = ["sh", "-c", "sleep 30 & echo $!; wait"];
      const proc = pool.spawn(shell);
      const reader = proc.stdout!.getReader();
      const first = await reader.read();
      const grandchild = Number(new TextDecoder().decode(first.value).trim());
      reader.releaseLock();
      assert.ok(alive(grandchild), "the background job runs");
      proc.killTree();
      assert.equal(await withTimeout(proc.exited, 5000, "killTree() did not end the command"), 143);
      assert.equal(proc.signalCode, "SIGTERM");
      await proc.stdout!.cancel();
      // Deno workers give a command a process group of its own only when asked (a timeout), so its background job
      // stays; Node and Bun workers give every command one.
      const left = await survivors([grandchild], runtime === "deno" ? 0 : 3000);
      for (const pid of left) process.kill(pid, "SIGKILL");
      if (runtime !== "deno") assert.deepEqual(left, [], "the group's background job was signalled");

      const child = pool.command("sleep", { args: ["30"] }).spawn();
      await child.spawned;
      child.killTree("SIGKILL");
      assert.equal((await withTimeout(child.status, 5000, "killTree() did not end the command")).signal, "SIGKILL");
      assert.throws(() => child.killTree(), { name: "TypeError", message: "Child process has already terminated" });
      assert.throws(() => pool.command("true").spawn().killTree("SIGNOPE"), { name: "TypeError" });

      const dropInChild = dropIn.spawn("sleep", ["30"]) as unknown as ChildProcess;
      assert.equal(dropInChild.killTree(), true);
      const [code, signal] = await withTimeout(
        new Promise<unknown[]>((resolve) => dropInChild.on("exit", (...args) => resolve(args))),
        5000,
        "killTree() did not end the command",
      );
      assert.deepEqual([code, signal], [null, "SIGTERM"]);
      assert.equal(dropInChild.killTree(), false, "false once it exited, as kill()");
      assert.equal(pool.stats().started, 1, "no worker was replaced");
    });
  });
}

describe(`${HOST} host, a remote pool on a node agent: killTree and limits travel to the agent`, {
  skip: skipWithout("tests/process_control_options_test.ts"),
  concurrency: false,
}, () => {
  let server: NatsServer;
  let agent: AgentProcess;
  let nc: NatsConnection;
  let subject = "";
  let pool: Pool;

  before(async () => {
    server = await startNatsServer();
    subject = freshSubject();
    agent = await startAgent(server.url, subject, ["--insecure", "--size", "1", "--runtime", "node"]);
    nc = await connect({ servers: server.url });
    pool = new Pool({ remote: { servers: server.url, subject } });
  });

  after(async () => {
    await pool?.close({ drain: false });
    await nc?.close();
    await agent?.kill();
    await server?.stop();
  });

  it("the agent passes killTree and limits on (its node workers refuse them), and the tree kill frame", async () => {
    await assert.rejects(pool.spawn(["echo"], { killTree: true }).exited, enotsup("killTree", "node"));
    await assert.rejects(pool.command("echo", { limits: { openFiles: 64 } }).output(), enotsup("limits", "node"));
    const proc = pool.spawn(["sleep", "30"]);
    await proc.spawned;
    proc.killTree();
    assert.equal(await withTimeout(proc.exited, 10_000, "killTree() did not end the remote command"), 143);
    assert.equal(agent.lines.some((line) => line.includes("broke the protocol")), false, agent.lines.join("\n"));
  });

  it("the agent refuses a request whose limits a host would refuse", async () => {
    const request = buildRequest({
      ...ECHO,
    });
    for (const limits of [{ cpuSeconds: 0 }, { processes: 0 }]) {
      const inbox = `_INBOX.limits.${process.pid}.${freshSubject()}`;
      const frames: MessageFrame[] = [];
      const sub = nc.subscribe(inbox, {
        callback: (_error, msg) => {
          if (msg.data.byteLength > 0) frames.push(...decodeMessage(new Uint8Array(msg.data)).frames);
        },
      });
      try {
        nc.publish(subject, encodeMessage(0, frameParts(Frame.Spawn, encodeJson({ ...request, limits }))), {
          reply: inbox,
        });
        const deadline = performance.now() + 10_000;
        while (!frames.some((frame) => frame.type === RemoteFrame.Failed || frame.type === Frame.Exit)) {
          assert.ok(performance.now() < deadline, `no answer: ${frames.map((frame) => frame.type)}`);
          await sleep(10);
        }
      } finally {
        sub.unsubscribe();
      }
      const failed = frames.find((frame) => frame.type === RemoteFrame.Failed);
      assert.ok(failed, `refused: ${frames.map((frame) => frame.type)}`);
      const failure = decodeJson(failed.payload);
      assert.equal(failure.code, "ERR_PROTOCOL");
      assert.match(String(failure.message), /Malformed request: limits\.\w+ must be a positive safe integer, got 0/);
    }
  });
});

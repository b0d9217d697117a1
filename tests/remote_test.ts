/**
 * Remote pools over NATS against real nats-servers and real agent processes (remote/cli.ts under the host's runtime):
 * no agents, an agent SIGKILLed mid-stream, a cluster node SIGKILLed mid-stream, auth (token, user and password, TLS,
 * operator mode with .creds files, a wrong token), a caller that dies mid-command, busy agents, timeouts, NATS
 * permissions, and both sides' defences against a broken peer (a fake agent, a fake caller). Every test checks that
 * nothing is left running. Without a nats-server it prints one SKIP line and skips; where it must run (natsRequired(): CI, or SPAWNPOOL_REQUIRE_NATS as .ci/run sets) it fails
 * instead.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawn as spawnChild } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Pool, type SpawnPoolError, Terminal } from "../mod.ts";
import { buildRequest } from "../core/options.ts";
import { decodeJson, decodeU32, encodeJson, encodeU32, Frame } from "../core/frame.ts";
import {
  AGENT_SILENCE_MS,
  decodeMessage,
  encodeMessage,
  frameParts,
  HEARTBEAT_MS,
  RemoteFrame,
} from "../remote/wire.ts";
import { type NatsCluster, type NatsServer, startNatsCluster, startNatsServer } from "../support/nats_server.mjs";
import { inGroup } from "../support/session.mjs";
import { alive, descendants, HOST, hostArgv, survivors, withTimeout } from "./_helpers.ts";
import {
  type AgentProcess,
  agents,
  assertPoolError,
  assertStopped,
  echoWorks,
  freshSubject,
  groupSurvivors,
  missing,
  operatorMode,
  rejection,
  skipWithout,
  sleep,
  startAgent,
  startedPids,
  text,
} from "./_remote.ts";

const skip = skipWithout("tests/remote_test.ts");
const MOD = pathToFileURL(fileURLToPath(new URL("../mod.ts", import.meta.url).href)).href;
let scratch = "";

describe(`${HOST} host, remote pools over NATS`, { skip, concurrency: false }, () => {
  let server: NatsServer;
  let url = "";
  /** An agent on `subject` shared by the tests that need an ordinary one. */
  let shared: AgentProcess;
  let sharedSubject = "";

  before(async () => {
    if (skip) return;
    scratch = mkdtempSync(join(tmpdir(), "spawnpool-remote-test-"));
    server = await startNatsServer();
    url = server.url;
    sharedSubject = freshSubject();
    // One worker: a command that breaks a worker would break the others this agent runs.
    shared = await startAgent(url, sharedSubject, ["--insecure", "--size", "1"]);
  });

  after(async () => {
    for (const agent of [...agents]) await agent.kill();
    await server?.stop();
    if (scratch) rmSync(scratch, { recursive: true, force: true });
  });

  it("finds a nats-server (on CI it must)", () => {
    assert.equal(missing, undefined, missing ?? "");
  });

  it("no agents: a spawn fails with ERR_NO_AGENTS at once, and so does ready()", async () => {
    const subject = freshSubject();
    const pool = new Pool({ remote: { servers: url, subject } });
    try {
      await echoWorksNot(pool, subject);
      // Connected now: a second spawn, and ready(), hear from the server at once that nobody listens.
      await echoWorksNot(pool, subject);
      const { error, ms } = await rejection(pool.ready());
      assertPoolError(error, "ERR_NO_AGENTS", new RegExp(`No agent answers on subject "${subject}"`));
      assert.ok(ms < 5000, `ready() took ${ms} ms`);
    } finally {
      await pool.close();
    }
  });

  it("no agents: a script that closes its pool after ERR_NO_AGENTS exits at once", async () => {
    const script = join(scratch, "no_agents.ts");
    writeFileSync(
      script,
      `import { Pool } from ${JSON.stringify(MOD)};
const pool = new Pool({ remote: { servers: ${JSON.stringify(url)}, subject: ${JSON.stringify(freshSubject())} } });
await pool.command("echo").output().catch((error) => console.log(error.code));
await pool.close();
console.log(Date.now());
`,
    );
    const [exe, ...args] = hostArgv(script);
    const child = spawnChild(exe, args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    await withTimeout(new Promise((resolve) => child.on("exit", resolve)), 20_000, "the script did not exit");
    const exitedAt = Date.now();
    const [code, closedAt] = out.trim().split("\n");
    assert.equal(code, "ERR_NO_AGENTS");
    // It lingered 3 s (a reply subject kept for a late acceptance, on a timer that held the process).
    assert.ok(exitedAt - Number(closedAt) < 1500, `exited ${exitedAt - Number(closedAt)} ms after close()`);
  });

  it("a remote pool loads on first use: commands given meanwhile are counted as queued and all run", async () => {
    const pool = new Pool({ remote: { servers: url, subject: sharedSubject } });
    try {
      assert.deepEqual(pool.stats(), { runtime: "remote", inFlight: 0, queued: 0, started: 0, workers: [] });
      const outputs = ["a", "b", "c"].map((word) => pool.command("echo", { args: [word] }).output());
      assert.equal(pool.stats().queued, 3);
      assert.deepEqual((await Promise.all(outputs)).map((output) => text(output.stdout)), ["a\n", "b\n", "c\n"]);
    } finally {
      await pool.close();
    }
  });

  it("a remote pool closed before its first use closes at once, connecting to nothing; later commands fail", async () => {
    // Nothing listens on port 9: a pool that tried to connect would fail with ERR_REMOTE_CONNECT instead.
    const pool = new Pool({ remote: { servers: "nats://127.0.0.1:9", subject: freshSubject() } });
    await withTimeout(pool.close(), 1000, "close() of an unused remote pool");
    await assert.rejects(
      pool.command("echo").output(),
      (e: unknown) => (e as SpawnPoolError).code === "ERR_POOL_CLOSED",
    );
    await assert.rejects(pool.ready(), (e: unknown) => (e as SpawnPoolError).code === "ERR_POOL_CLOSED");
  });

  async function echoWorksNot(pool: Pool, subject: string): Promise<void> {
    const proc = pool.spawn(["echo", "nobody"]);
    const { error, ms } = await rejection(proc.exited);
    assertPoolError(error, "ERR_NO_AGENTS", new RegExp(`No agent listens on subject "${subject}"`));
    assert.equal((error as SpawnPoolError).command, "echo");
    assert.ok(ms < 5000, `took ${ms} ms`);
  }

  it("kill -9 of an agent mid-stream: ERR_WORKER_DIED within 4 s, and the command's group goes", async () => {
    const subject = freshSubject();
    const agent = await startAgent(url, subject, ["--insecure"]);
    const pool = new Pool({ remote: { servers: url, subject } });
    try {
      const proc = pool.spawn(["sh", "-c", "while :; do echo x; sleep 0.05; done"]);
      const pid = await proc.spawned;
      assert.ok(alive(pid));
      const reader = proc.stdout!.getReader();
      let seen = "";
      while (!seen.includes("x\nx\n")) seen += text((await reader.read()).value ?? new Uint8Array());
      const reading = (async () => {
        for (;;) if ((await reader.read()).done) return;
      })();
      reading.catch(() => {});
      // The agent's workers, the command and what it runs.
      const tree = descendants(agent.pid);
      assert.ok(tree.includes(pid) && tree.length >= 3, `agent's processes: ${tree}`);
      await agent.kill();
      const { error, ms } = await rejection(proc.exited, 10_000);
      assertPoolError(error, "ERR_WORKER_DIED", /Agent ".*" \(pid \d+\) (went silent|is gone)/);
      // The server's 503 for the next Ping (well under a second), else the agent's silence (1.5 s, seen on a tick).
      assert.ok(ms < 4000, `took ${ms} ms`);
      await assert.rejects(reading);
      assert.deepEqual(await groupSurvivors(pid, 3000), [], "the command's process group is gone");
      assert.deepEqual(await survivors(tree, 3000), [], "the agent's workers are gone");
    } finally {
      await pool.close({ drain: false });
      await agent.kill();
    }
  });

  it("3-node cluster, kill -9 of the caller's node mid-stream: intact output or an error, never corruption", async () => {
    const cluster: NatsCluster = await startNatsCluster(3);
    const subject = freshSubject();
    const [nodeA, nodeB] = cluster.servers;
    const agent = await startAgent(nodeB.url, subject, ["--insecure"]);
    // The caller knows node A only; it learns the others from the cluster and reconnects to one of them.
    const pool = new Pool({ remote: { servers: nodeA.url, subject } });
    const lines = 1_000_000;
    try {
      await echoWorks(pool);
      const proc = pool.spawn(["seq", "1", String(lines)]);
      const pid = await proc.spawned;
      const reader = proc.stdout!.getReader();
      const decoder = new TextDecoder();
      let received = "";
      let killed: Promise<void> | undefined;
      let failure: unknown;
      try {
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          received += decoder.decode(value, { stream: true });
          if (killed === undefined && received.length > 50_000) killed = nodeA.kill();
        }
        await proc.exited;
      } catch (error) {
        failure = error;
      }
      await killed;
      assert.ok(killed, "node A was killed mid-stream");
      // Whatever arrived is the start of the output, line by line.
      const got = received.split("\n");
      const whole = got.pop() === "";
      for (let i = 0; i < got.length; i++) {
        if (got[i] !== String(i + 1)) assert.fail(`line ${i + 1} is "${got[i].slice(0, 20)}"`);
      }
      if (failure === undefined) {
        assert.ok(whole && got.length === lines, `completed with ${got.length} lines`);
        assert.equal(proc.exitCode, 0);
      } else {
        assertPoolError(failure, ["ERR_REMOTE_LOST", "ERR_WORKER_DIED"]);
        assert.ok(got.length < lines);
      }
      assert.deepEqual(await groupSurvivors(pid, 5000), [], "the command is gone");
      // After the reconnect, a new command runs.
      await echoWorks(pool, "again");
      assert.ok(alive(agent.pid));
    } finally {
      await pool.close({ drain: false });
      await agent.kill();
      await cluster.stop();
    }
  });

  it("a wrong token: ERR_REMOTE_CONNECT for the caller; an agent logs why and exits non-zero", async () => {
    const secured = await startNatsServer({ token: "right-token" });
    const tokenFile = join(scratch, "wrong-token");
    writeFileSync(tokenFile, "wrong-token\n");
    try {
      const pool = new Pool({ remote: { servers: secured.url, token: "wrong-token", subject: freshSubject() } });
      const { error, ms } = await rejection(pool.spawn(["true"]).exited);
      assertPoolError(error, "ERR_REMOTE_CONNECT", /Could not connect to NATS at nats:\/\/127\.0\.0\.1:\d+: .*auth/i);
      assert.ok(ms < 5000, `took ${ms} ms`);
      const ready = await rejection(pool.ready());
      assertPoolError(ready.error, "ERR_REMOTE_CONNECT");
      await pool.close();
      const agent = await startAgent(secured.url, freshSubject(), ["--token-file", tokenFile], {}, true);
      const code = await withTimeout(agent.exited, 10_000, "agent with a wrong token did not exit");
      assert.equal(code, 1);
      const failed = agent.lines.map((line) => JSON.parse(line)).find((event) => event.event === "failed");
      assert.ok(failed, agent.lines.join("\n"));
      assert.match(failed.reason, /Could not connect to NATS .*auth/i);
      assert.ok(!agent.lines.some((line) => line.includes('"listening"')));
    } finally {
      await secured.stop();
    }
  });

  for (
    const [name, serverOptions, remote, agentArgs, agentEnv] of [
      ["token", { token: "t0ken" }, { token: "t0ken" }, ["--token-file"], {}],
      ["user and password", { user: "u1", pass: "p4ss" }, { user: "u1", pass: "p4ss" }, ["--user", "u1"], {
        SPAWNPOOL_NATS_PASS: "p4ss",
      }],
      ["TLS", { tls: true }, { tls: {} }, ["--tls-ca"], {}],
    ] as const
  ) {
    it(`${name}: a command runs end to end`, async () => {
      const secured = await startNatsServer(serverOptions);
      const subject = freshSubject();
      let args: string[] = [...agentArgs];
      let options: Record<string, unknown> = { ...remote };
      if (name === "token") {
        const file = join(scratch, "token");
        writeFileSync(file, "t0ken\n");
        args = [...args, file];
      }
      if (name === "TLS") {
        // TLS alone authenticates nobody: this server takes any client.
        args = [...args, secured.caFile!, "--insecure"];
        options = { tls: { caFile: secured.caFile } };
      }
      const servers = name === "TLS" ? secured.url.replace("nats://", "tls://") : secured.url;
      const agent = await startAgent(servers, subject, args, agentEnv);
      const pool = new Pool({ remote: { servers, subject, ...options } });
      try {
        await pool.ready();
        await echoWorks(pool, name.replaceAll(" ", "-"));
        assert.equal(pool.stats().workers[0]?.pid, agent.pid);
      } finally {
        await pool.close();
        await agent.stop();
        await secured.stop();
      }
      await assertStopped(agent);
    });
  }

  it("operator mode (.creds: a user JWT and its NKey seed): a command runs end to end; an unknown account's user is refused", async () => {
    const users = operatorMode(join(scratch, "operator"));
    const secured = await startNatsServer({ config: users.config });
    const subject = freshSubject();
    const agent = await startAgent(secured.url, subject, ["--creds", users.agent]);
    const pool = new Pool({ remote: { servers: secured.url, subject, credentials: users.caller } });
    const stranger = new Pool({ remote: { servers: secured.url, subject, credentials: users.stranger } });
    try {
      await pool.ready();
      await echoWorks(pool, "creds");
      assert.equal(pool.stats().workers[0]?.pid, agent.pid);
      const { error, ms } = await rejection(stranger.spawn(["echo", "denied"]).exited);
      assertPoolError(error, "ERR_REMOTE_CONNECT", /Could not connect to NATS at nats:\/\/127\.0\.0\.1:\d+: .*auth/i);
      assert.ok(ms < 5000, `took ${ms} ms`);
      // Refused for its account, not for a malformed JWT or signature: the server looked the account up.
      for (let i = 0; i < 100 && !/Account fetch failed: account missing/.test(secured.log()); i++) await sleep(20);
      assert.match(secured.log(), /Account fetch failed: account missing/);
      assert.ok(!agent.lines.some((line) => line.includes("denied")));
      assert.equal(startedPids(agent).length, 1);
    } finally {
      await pool.close();
      await stranger.close({ drain: false });
      await agent.stop();
      await secured.stop();
    }
    await assertStopped(agent);
  });

  /**
   * Runs `sleep 60` through a remote pool with `remote` options in a caller process of its own, SIGKILLs the caller,
   * and resolves with the ms until the sleep's process group was gone (it fails past 5 s) and why `agent` killed it.
   */
  async function callerDies(
    agent: AgentProcess,
    remote: Record<string, unknown>,
  ): Promise<{ ms: number; reason: string }> {
    const script = join(scratch, `caller-${freshSubject()}.mjs`);
    writeFileSync(
      script,
      `import { Pool } from ${JSON.stringify(MOD)};\n` +
        `const pool = new Pool({ remote: ${JSON.stringify(remote)} });\n` +
        `const proc = pool.spawn(["sleep", "60"]);\n` +
        `console.log(await proc.spawned);\n` +
        `setInterval(() => {}, 1000);\n`,
    );
    const [cmd, ...rest] = hostArgv(script);
    const caller = spawnChild(cmd, rest, { stdio: ["ignore", "pipe", "inherit"] });
    const callerExited = new Promise((resolve) => caller.once("exit", resolve));
    try {
      const pid = await withTimeout(
        new Promise<number>((resolve, reject) => {
          let out = "";
          caller.stdout!.setEncoding("utf8");
          caller.stdout!.on("data", (chunk: string) => {
            out += chunk;
            if (out.includes("\n")) resolve(Number(out.trim()));
          });
          caller.once("exit", (code) => reject(new Error(`caller exited (${code}) without a pid`)));
        }),
        15_000,
        "the caller printed no pid",
      );
      assert.ok(pid > 1 && alive(pid), `pid ${pid}`);
      assert.ok(inGroup(pid).includes(pid), "the sleep leads a process group");
      caller.kill("SIGKILL");
      await callerExited;
      const start = performance.now();
      assert.deepEqual(await groupSurvivors(pid, 5000), [], "the sleep's process group is gone");
      const ms = performance.now() - start;
      const killed = () =>
        agent.lines.map((line) => JSON.parse(line)).find((event) => event.event === "killed" && event.pid === pid);
      for (let i = 0; i < 100 && killed() === undefined; i++) await sleep(10);
      assert.ok(killed(), agent.lines.join("\n"));
      return { ms, reason: killed().reason };
    } finally {
      caller.kill("SIGKILL");
      await callerExited;
    }
  }

  it("a caller that dies mid-command: the agent kills the command's group within 5 s", async () => {
    const { ms, reason } = await callerDies(shared, { servers: url, subject: sharedSubject });
    assert.ok(ms < 5000, `took ${ms} ms`);
    // The server's 503 for the agent's next word to the caller's inbox, else the caller's silence (3 s).
    assert.match(reason, /^its caller (is gone|was silent for \d+ ms)$/);
    assert.ok(alive(shared.pid));
  });

  it("an agent stopped by SIGINT logs it and ends by SIGINT, as a process without a handler would", async () => {
    const agent = await startAgent(url, freshSubject(), ["--insecure"]);
    agent.child.kill("SIGINT");
    assert.equal(await withTimeout(agent.exited, 10_000, "the agent did not end"), null);
    assert.equal(agent.child.signalCode, "SIGINT", agent.lines.join("\n"));
    assert.ok(agent.lines.some((line) => line.includes('"stopped"')), agent.lines.join("\n"));
  });

  it("a terminal on an agent's native worker: written, resized and set raw through the relay", async () => {
    const subject = freshSubject();
    const agent = await startAgent(url, subject, ["--insecure", "--runtime", "native"]);
    const pool = new Pool({ remote: { servers: url, subject } });
    try {
      let shown = "";
      const terminal = new Terminal({
        cols: 70,
        rows: 20,
        data: (_, bytes) => (shown += new TextDecoder().decode(bytes)),
      });
      const script = 'read line; echo got-$line; stty size; trap "stty size; stty -a; exit 0" WINCH; echo waiting; ' +
        "while :; do sleep 0.02; done";
      const proc = pool.spawn(["bash", "-c", script], { terminal });
      terminal.write("abc\r");
      const deadline = performance.now() + 10_000;
      while (!shown.includes("waiting")) {
        assert.ok(performance.now() < deadline, `the terminal showed ${JSON.stringify(shown)}`);
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      terminal.setRawMode(true);
      terminal.resize(100, 30);
      assert.equal(await withTimeout(proc.exited, 10_000, "no exit after the resize"), 0);
      assert.match(shown, /got-abc\r\n20 70\r\nwaiting\r\n30 100\r\n/);
      assert.match(shown.slice(shown.indexOf("30 100")), /\s-icanon\s[^]*\s-echo\s/, "raw mode reached the terminal");
      terminal.close();
    } finally {
      await pool.close();
      await agent.kill();
    }
  });

  it("busy agents: five commands on an agent of concurrency 1 all complete", async () => {
    const subject = freshSubject();
    const agent = await startAgent(url, subject, ["--insecure", "--concurrency", "1"]);
    const pool = new Pool({ remote: { servers: url, subject } });
    try {
      const procs = Array.from({ length: 5 }, (_, i) => pool.spawn(["sh", "-c", `sleep 0.1; echo ${i}`]));
      const outs = await withTimeout(
        Promise.all(procs.map(async (proc) => [await new Response(proc.stdout).text(), await proc.exited])),
        15_000,
        "busy commands did not complete",
      );
      assert.deepEqual(outs, [0, 1, 2, 3, 4].map((i) => [`${i}\n`, 0]));
      assert.equal(pool.stats().workers[0]?.completed, 5);
      assert.ok(agent.lines.some((line) => line.includes('"busy"')), "the agent refused some as busy");
      const pids = startedPids(agent);
      assert.equal(pids.length, 5);
      assert.deepEqual(await survivors(pids), []);
    } finally {
      await pool.close();
      await agent.kill();
    }
  });

  it("a caller stalled past the agent's silence window keeps its command: what came meanwhile is read first", async () => {
    const pool = new Pool({ remote: { servers: url, subject: sharedSubject } });
    try {
      const proc = pool.spawn(["sh", "-c", "sleep 0.5; echo after"]);
      await proc.spawned;
      // This process stalls (a long synchronous task, a long collection) for longer than a caller waits for its
      // agent, in a setImmediate callback: the event loop's next round runs its due timers, the heartbeat's, before it
      // reads the agent's Pings waiting in the socket. Shorter than an agent waits for its caller (CALLER_SILENCE_MS).
      await new Promise<void>((resolve) =>
        setImmediate(() => {
          const end = performance.now() + AGENT_SILENCE_MS + 500;
          while (performance.now() < end) {
            // stalled
          }
          resolve();
        })
      );
      assert.equal(await new Response(proc.stdout).text(), "after\n");
      assert.equal(await proc.exited, 0);
    } finally {
      await pool.close();
    }
  });

  it("a remote command's timeout ends it by SIGTERM well under its own 5 s", async () => {
    const pool = new Pool({ remote: { servers: url, subject: sharedSubject } });
    try {
      const start = performance.now();
      const proc = pool.spawn(["sleep", "5"], { timeout: 200 });
      const pid = await proc.spawned;
      const code = await proc.exited;
      const ms = performance.now() - start;
      assert.equal(proc.signalCode, "SIGTERM");
      assert.equal(code, 143);
      assert.ok(ms < 4000, `took ${ms} ms`);
      assert.deepEqual(await survivors([pid]), []);
    } finally {
      await pool.close();
    }
  });

  it("NATS permissions: callers and agents confined to the pool's subjects; a user without them fails fast", async () => {
    const subject = "perm.jobs";
    const secured = await startNatsServer({ config: permissionsConfig(subject) });
    const agent = await startAgent(secured.url, subject, ["--user", "agent", "--id", "a1"], {
      SPAWNPOOL_NATS_PASS: "agent-pass",
    });
    const callerRemote = {
      servers: secured.url,
      subject,
      user: "caller",
      pass: "caller-pass",
      inboxPrefix: "_INBOX.caller",
    };
    const caller = new Pool({ remote: callerRemote });
    const outsider = new Pool({ remote: { servers: secured.url, subject, user: "outsider", pass: "outsider-pass" } });
    try {
      await caller.ready();
      await echoWorks(caller, "permitted");
      // The caller's command whose caller went away is still killed: the server's 503 reaches the agent.
      const proc = caller.spawn(["sleep", "30"]);
      const pid = await proc.spawned;
      await caller.close({ drain: false });
      assertPoolError((await rejection(proc.exited)).error, "ERR_POOL_CLOSED");
      assert.deepEqual(await groupSurvivors(pid, 5000), []);
      // A caller that dies: the server's 503 "no responders" reaches the agent on the command's control subject, which
      // it may subscribe to: no more permissions needed (well before the caller's 3 s silence would).
      const gone = await callerDies(agent, callerRemote);
      assert.equal(gone.reason, "its caller is gone");
      assert.ok(gone.ms < 5000, `took ${gone.ms} ms`);
      const { error, ms } = await rejection(outsider.spawn(["echo", "denied"]).exited);
      // The server's permissions violation fails it at once, and says so.
      assertPoolError(error, ["ERR_REMOTE_CONNECT"], /refused to let this caller publish to/);
      assert.ok(ms < 5000, `took ${ms} ms`);
      assert.ok(!agent.lines.some((line) => line.includes("denied")));
      assert.equal(startedPids(agent).length, 3);
      // An agent's credentials take commands in the queue group only: a subscription outside it (none, or another
      // group), which would read every request, is a permissions violation.
      const spy = await connect({ servers: secured.url, user: "agent", pass: "agent-pass" });
      const again = new Pool({ remote: callerRemote });
      try {
        const read: string[] = [];
        for (const options of [{}, { queue: "other" }]) {
          const sub = spy.subscribe(subject, {
            ...options,
            callback: (error, msg) => {
              if (error === null) read.push(msg.subject);
            },
          });
          const closed = await withTimeout(sub.closed, 5000, `subscribed with ${JSON.stringify(options)}`);
          assert.ok(closed instanceof Error, `subscribed with ${JSON.stringify(options)}: ${String(closed)}`);
          assert.equal(closed.name, "PermissionViolationError");
          assert.match(closed.message, new RegExp(`Permissions Violation for Subscription to "${subject}"`, "i"));
        }
        await echoWorks(again, "unread");
        assert.deepEqual(read, []);
      } finally {
        await again.close();
        await spy.close();
      }
    } finally {
      await caller.close({ drain: false });
      await outsider.close({ drain: false });
      await agent.stop();
      await secured.stop();
    }
  });

  describe("a fake agent's broken answers", () => {
    let nc: NatsConnection;
    before(async () => {
      if (!skip) nc = await connect({ servers: url });
    });
    after(async () => {
      await nc?.close();
    });

    const accepted = (control: string) =>
      frameParts(
        RemoteFrame.Accepted,
        encodeJson({ control, agent: { id: "fake", name: "fake", pid: 4242 } }),
      );

    /** Serves `subject` with `answer` (given the spawn request and its reply subject); runs `echo` through it. */
    async function against(
      answer: (request: Record<string, unknown>, reply: string, control: string) => void,
      code: string,
      message: RegExp,
    ): Promise<void> {
      const subject = freshSubject();
      const sub = nc.subscribe(subject, {
        callback: (_error, msg) => {
          const { frames } = decodeMessage(msg.data);
          answer(decodeJson(frames[0].payload), msg.reply!, `${subject}.ctl.fake.tok`);
        },
      });
      await nc.flush();
      const pool = new Pool({ remote: { servers: url, subject } });
      try {
        const { error, ms } = await rejection(pool.spawn(["echo", "fake"]).exited);
        assertPoolError(error, code, message);
        assert.equal((error as SpawnPoolError).command, "echo");
        assert.ok(ms < 5000, `took ${ms} ms`);
      } finally {
        await pool.close({ drain: false });
        sub.unsubscribe();
      }
    }

    it("(a) a gap in the sequence numbers: ERR_REMOTE_LOST", async () => {
      await against(
        (_request, reply, control) => {
          nc.publish(reply, encodeMessage(0, accepted(control)));
          nc.publish(reply, encodeMessage(2, frameParts(Frame.Spawned, encodeU32(4343))));
        },
        "ERR_REMOTE_LOST",
        /A message from agent "fake" \(pid 4242\) was lost/,
      );
    });

    it("(b) Spawned before Accepted: ERR_PROTOCOL", async () => {
      await against(
        (_request, reply) => {
          nc.publish(reply, encodeMessage(0, frameParts(Frame.Spawned, encodeU32(4343))));
        },
        "ERR_PROTOCOL",
        /broke the protocol: Frame of type 17 before the agent accepted/,
      );
    });

    it("(c) an Accepted frame naming a control subject outside <subject>.ctl.: ERR_PROTOCOL", async () => {
      await against(
        (_request, reply) => {
          nc.publish(reply, encodeMessage(0, accepted("elsewhere.ctl.fake.tok")));
        },
        "ERR_PROTOCOL",
        /Accepted frame is malformed/,
      );
    });

    it("(d) stdout past the window without credit: ERR_PROTOCOL", async () => {
      await against(
        (request, reply, control) => {
          const window = request.window as number;
          nc.publish(reply, encodeMessage(0, [...accepted(control), ...frameParts(Frame.Spawned, encodeU32(4343))]));
          const chunk = new Uint8Array(256 * 1024).fill(120);
          let seq = 1;
          for (let sent = 0; sent <= window; sent += chunk.byteLength) {
            nc.publish(reply, encodeMessage(seq++, frameParts(Frame.Stdout, chunk)));
          }
        },
        "ERR_PROTOCOL",
        /ahead of credit, past the \d+-byte window/,
      );
    });

    it("(e) a Failed frame with an unknown code: ERR_PROTOCOL", async () => {
      await against(
        (_request, reply, control) => {
          nc.publish(
            reply,
            encodeMessage(0, [
              ...accepted(control),
              ...frameParts(RemoteFrame.Failed, encodeJson({ code: "ERR_BOGUS", message: "made up" })),
            ]),
          );
        },
        "ERR_PROTOCOL",
        /Failed frame is malformed/,
      );
    });
  });

  it("a fake caller's garbage: the agent answers Failed or ignores it, and still serves a real command", async () => {
    const nc = await connect({ servers: url });
    let heartbeat: ReturnType<typeof setInterval> | undefined;
    try {
      const ask = async (data: Uint8Array) =>
        decodeMessage((await nc.request(sharedSubject, data, { timeout: 10_000 })).data);
      const failedWith = (answer: ReturnType<typeof decodeMessage>, message: RegExp) => {
        assert.equal(answer.seq, 0);
        assert.equal(answer.frames.length, 1);
        assert.equal(answer.frames[0].type, RemoteFrame.Failed);
        const failure = decodeJson(answer.frames[0].payload);
        assert.equal(failure.code, "ERR_PROTOCOL");
        assert.match(String(failure.message), message);
      };
      failedWith(await ask(new TextEncoder().encode("\x00garbage, not a message")), /Malformed request/);
      failedWith(await ask(new Uint8Array([1, 2])), /Malformed request/);
      const request = (args: string[], mode: string = "piped") =>
        frameParts(
          Frame.Spawn,
          encodeJson({
            ...buildRequest({
              cmd: args[0],
              args: args.slice(1),
              stdin: "null",
              stdout: "piped",
              stderr: "piped",
              buffered: false,
            }),
            stdout: mode,
          }),
        );
      failedWith(await ask(encodeMessage(7, request(["echo", "x"]))), /not a spawn request/);
      failedWith(await ask(encodeMessage(0, frameParts(Frame.Kill, new Uint8Array(0)))), /not a spawn request/);
      failedWith(
        await ask(encodeMessage(0, frameParts(Frame.Spawn, encodeJson({ cmd: 5 })))),
        /Spawn request is malformed/,
      );
      // A real command, then control messages with unknown frame types: the agent fails it and kills it.
      const inbox = `_INBOX.fake.${process.pid}`;
      const received: ReturnType<typeof decodeMessage>[] = [];
      // A copy of each message (the client may reuse its buffer); the server's 503 for the unknown control subject
      // below is no agent message.
      const sub = nc.subscribe(inbox, {
        callback: (_error, msg) => {
          if (msg.data.byteLength > 0) received.push(decodeMessage(new Uint8Array(msg.data)));
        },
      });
      // Less the agent's heartbeat: a Ping goes to a caller that heard nothing for HEARTBEAT_MS, whenever that is.
      const frames = () => received.flatMap((message) => message.frames).filter((f) => f.type !== RemoteFrame.Ping);
      const waitFor = async (type: number) => {
        const deadline = performance.now() + 5000;
        while (!frames().some((f) => f.type === type)) {
          if (performance.now() > deadline) {
            assert.fail(
              `no frame of type ${type}: ${frames().map((f) => `${f.type} ${text(f.payload)}`)}\n${
                shared.lines.join("\n")
              }`,
            );
          }
          await sleep(10);
        }
        return frames().find((f) => f.type === type)!;
      };
      nc.publish(sharedSubject, encodeMessage(0, request(["sleep", "30"])), { reply: inbox });
      const control = String(decodeJson((await waitFor(RemoteFrame.Accepted)).payload).control);
      // A caller's heartbeat, until the garbage below: an agent kills the command of a caller silent for 3 s.
      let seq = 0;
      heartbeat = setInterval(
        () => nc.publish(control, encodeMessage(seq++, frameParts(RemoteFrame.Ping))),
        HEARTBEAT_MS,
      );
      const pid = decodeU32((await waitFor(Frame.Spawned)).payload);
      assert.ok(
        alive(pid),
        `pid ${pid}: ${frames().map((f) => `${f.type} ${text(f.payload)}`)} ${shared.lines.join("\n")}`,
      );
      // A request the agent's workers would take for a broken host is refused, and breaks nothing that runs.
      failedWith(await ask(encodeMessage(0, request(["echo", "x"], "pipe"))), /Malformed request/);
      await sleep(100);
      assert.ok(alive(pid), "the running command survived a malformed request");
      assert.deepEqual(frames().map((f) => f.type), [RemoteFrame.Accepted, Frame.Spawned]);
      // Unknown control tokens are ignored.
      nc.publish(`${sharedSubject}.ctl.nobody.nothing`, encodeMessage(0, frameParts(99)), { reply: inbox });
      clearInterval(heartbeat);
      nc.publish(control, encodeMessage(seq++, frameParts(99)), { reply: inbox });
      const failure = decodeJson((await waitFor(RemoteFrame.Failed)).payload);
      assert.equal(failure.code, "ERR_PROTOCOL");
      assert.match(String(failure.message), /The caller broke the protocol: .*Unexpected frame type 99/);
      assert.deepEqual(await groupSurvivors(pid, 3000), [], "the command was killed");
      // Later messages of that command are ignored.
      nc.publish(control, encodeMessage(seq++, frameParts(100)), { reply: inbox });
      sub.unsubscribe();
      assert.deepEqual(received.map((message) => message.seq), received.map((_, i) => i));
    } finally {
      clearInterval(heartbeat);
      await nc.close();
    }
    assert.ok(alive(shared.pid), "the agent is still running");
    const pool = new Pool({ remote: { servers: url, subject: sharedSubject } });
    try {
      await echoWorks(pool, "still-serving");
    } finally {
      await pool.close();
    }
  });

  it("leaves nothing running: agents stop, their commands are gone", async () => {
    const pids = startedPids(shared);
    await shared.stop();
    await assertStopped(shared);
    assert.deepEqual(await survivors(pids), []);
    for (const agent of agents) await agent.kill();
    assert.equal(agents.size, 0);
  });
});

/**
 * The NATS server config of docs/remote.md's security section: a caller may publish commands to the pool's subject
 * (and `ready()`'s `<subject>.agents`) and to their control subjects, and receive answers on its inbox; an agent may
 * receive those, the commands only in the queue group ("<subject> spawnpool", the default --queue), and answer on
 * inboxes; the 503 "no responders" status needs no permission of its own.
 */
function permissionsConfig(subject: string): string {
  return `authorization {
  users = [
    {
      user: caller, password: caller-pass
      permissions: {
        publish: { allow: ["${subject}", "${subject}.agents", "${subject}.ctl.>"] }
        subscribe: { allow: ["_INBOX.caller.>"] }
      }
    }
    {
      user: agent, password: agent-pass
      permissions: {
        publish: { allow: ["_INBOX.>"] }
        subscribe: { allow: ["${subject} spawnpool", "${subject}.agents", "${subject}.ctl.a1.*"] }
      }
    }
    {
      user: outsider, password: outsider-pass
      permissions: {
        publish: { deny: [">"] }
        subscribe: { allow: ["_INBOX.>"] }
      }
    }
  ]
}
`;
}

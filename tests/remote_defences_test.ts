/**
 * A remote pool's defences, each side against a broken or hostile other: a fake agent's answers the caller must refuse
 * or survive (two Busy frames, an acceptance that comes too late, a control subject of another agent, output of a
 * stream that is not piped); a fake caller's messages a real agent must refuse (a reply subject that is not an inbox,
 * stdin writes without waiting for acknowledgements, credit for output never sent); and messages cut to a server's
 * small `max_payload` on both sides, with every byte checked. Real nats-server, real agent processes.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Pool } from "../mod.ts";
import { buildRequest } from "../core/options.ts";
import { decodeExit, decodeJson, decodeU32, encodeCredit, encodeJson, encodeU32, Frame } from "../core/frame.ts";
import { decodeMessage, encodeMessage, frameParts, type MessageFrame, RemoteFrame } from "../remote/wire.ts";
import { type NatsServer, startNatsServer } from "../support/nats_server.mjs";
import { HOST, hostArgv, withTimeout } from "./_helpers.ts";
import {
  type AgentProcess,
  agents,
  assertPoolError,
  freshSubject,
  groupSurvivors,
  rejection,
  skipWithout,
  sleep,
  startAgent,
} from "./_remote.ts";

const skip = skipWithout("tests/remote_defences_test.ts");
const CLI = fileURLToPath(new URL("../remote/cli.ts", import.meta.url).href);

/** A spawn request's frame, as a caller sends it. */
function spawnFrame(args: string[], stdin: "piped" | "null" = "null"): Uint8Array[] {
  return frameParts(
    Frame.Spawn,
    encodeJson(
      buildRequest({ cmd: args[0], args: args.slice(1), stdin, stdout: "piped", stderr: "piped", buffered: false }),
    ),
  );
}

describe(`${HOST} host, remote pools: each side's defences`, { skip, concurrency: false }, () => {
  let server: NatsServer;
  let small: NatsServer;
  let nc: NatsConnection;
  let agent: AgentProcess;
  let subject = "";

  before(async () => {
    if (skip) return;
    server = await startNatsServer();
    small = await startNatsServer({ config: "max_payload: 32768\n" });
    nc = await connect({ servers: server.url });
    subject = freshSubject();
    agent = await startAgent(server.url, subject, ["--insecure", "--size", "1"]);
  });

  after(async () => {
    await nc?.close();
    for (const each of [...agents]) await each.kill();
    await server?.stop();
    await small?.stop();
  });

  /** A fake agent on a fresh subject answering with `answer`; runs `spawn` through a pool on it, which must fail. */
  async function fakeAgent(
    answer: (reply: string, control: string) => void,
    code: string,
    message: RegExp,
    options: { stdout?: "pipe" | "ignore" } = {},
  ): Promise<void> {
    const fake = freshSubject();
    const sub = nc.subscribe(fake, { callback: (_error, msg) => answer(msg.reply!, `${fake}.ctl.fake.tok`) });
    await nc.flush();
    const pool = new Pool({ remote: { servers: server.url, subject: fake } });
    try {
      const { error } = await rejection(pool.spawn(["echo", "fake"], { stdout: options.stdout ?? "pipe" }).exited);
      assertPoolError(error, code, message);
    } finally {
      await pool.close({ drain: false });
      sub.unsubscribe();
    }
  }

  const accepted = (control: string, id = "fake") =>
    frameParts(RemoteFrame.Accepted, encodeJson({ control, agent: { id, name: "fake", pid: 4242 } }));

  it("a fake agent's two Busy frames in one message: ERR_PROTOCOL, not two offers", async () => {
    let offers = 0;
    await fakeAgent(
      (reply) => {
        offers++;
        nc.publish(reply, encodeMessage(0, [...frameParts(RemoteFrame.Busy), ...frameParts(RemoteFrame.Busy)]));
      },
      "ERR_PROTOCOL",
      /before the agent accepted/,
    );
    await sleep(300); // a second offer would come within 5 ms of the first
    assert.equal(offers, 1);
  });

  it("a fake agent's control subject under another agent's id: ERR_PROTOCOL", async () => {
    await fakeAgent(
      (reply, control) => nc.publish(reply, encodeMessage(0, accepted(control, "other"))),
      "ERR_PROTOCOL",
      /Accepted frame is malformed/,
    );
  });

  it("a fake agent's output for a stream that is not piped: ERR_PROTOCOL", async () => {
    await fakeAgent(
      (reply, control) =>
        nc.publish(
          reply,
          encodeMessage(0, [
            ...accepted(control),
            ...frameParts(Frame.Spawned, encodeU32(4343)),
            ...frameParts(Frame.Stdout, new Uint8Array(1000)),
          ]),
        ),
      "ERR_PROTOCOL",
      /output of stream 1, which is not piped/,
      { stdout: "ignore" },
    );
  });

  it("an acceptance that comes after the caller gave up is cancelled at once", async () => {
    const fake = freshSubject();
    const control = `${fake}.ctl.fake.tok`;
    const cancels: number[] = [];
    const controlSub = nc.subscribe(control, {
      callback: (_error, msg) => {
        for (const frame of decodeMessage(new Uint8Array(msg.data)).frames) cancels.push(frame.type);
      },
    });
    let replyTo: string | undefined;
    const sub = nc.subscribe(fake, {
      callback: (_error, msg) => {
        replyTo = msg.reply;
      },
    });
    await nc.flush();
    const pool = new Pool({ remote: { servers: server.url, subject: fake } });
    try {
      const { error } = await rejection(pool.spawn(["echo", "late"]).exited);
      assertPoolError(error, "ERR_REMOTE_LOST", /No agent answered the request in 1500 ms/);
      // Accepted once the caller has given up, and before its pool, idle from then, closes its connection (1 s later).
      assert.ok(replyTo, "the request reached the fake agent");
      nc.publish(replyTo, encodeMessage(0, accepted(control)));
      const deadline = performance.now() + 5000;
      while (!cancels.includes(RemoteFrame.Cancel) && performance.now() < deadline) await sleep(20);
      assert.deepEqual(cancels, [RemoteFrame.Cancel]);
    } finally {
      await pool.close({ drain: false });
      sub.unsubscribe();
      controlSub.unsubscribe();
    }
  });

  /** Sends a spawn as a fake caller; resolves with the frames the agent answers, as they come. */
  async function fakeCaller(args: string[], stdin: "piped" | "null" = "null") {
    const inbox = `_INBOX.defences.${process.pid}.${freshSubject()}`;
    const frames: Array<{ type: number; payload: Uint8Array }> = [];
    const sub = nc.subscribe(inbox, {
      callback: (_error, msg) => {
        if (msg.data.byteLength > 0) frames.push(...decodeMessage(new Uint8Array(msg.data)).frames);
      },
    });
    nc.publish(subject, encodeMessage(0, spawnFrame(args, stdin)), { reply: inbox });
    const waitFor = async (type: number) => {
      const deadline = performance.now() + 5000;
      while (!frames.some((frame) => frame.type === type)) {
        if (performance.now() > deadline) assert.fail(`no frame of type ${type}: ${frames.map((f) => f.type)}`);
        await sleep(10);
      }
      return frames.find((frame) => frame.type === type)!;
    };
    const control = String(decodeJson((await waitFor(RemoteFrame.Accepted)).payload).control);
    const pid = decodeU32((await waitFor(Frame.Spawned)).payload);
    return { inbox, control, pid, frames, waitFor, done: () => sub.unsubscribe() };
  }

  /**
   * Sends `request`, any JSON object, as a fake caller's spawn request on `to`; resolves with the frames of the answer
   * (heartbeats left out) once one ends it: Exit, SpawnError or Failed.
   */
  async function answerTo(to: string, request: unknown): Promise<MessageFrame[]> {
    const inbox = `_INBOX.defences.${process.pid}.${freshSubject()}`;
    const frames: MessageFrame[] = [];
    const sub = nc.subscribe(inbox, {
      callback: (_error, msg) => {
        if (msg.data.byteLength > 0) frames.push(...decodeMessage(new Uint8Array(msg.data)).frames);
      },
    });
    try {
      nc.publish(to, encodeMessage(0, frameParts(Frame.Spawn, encodeJson(request))), { reply: inbox });
      const ends: number[] = [Frame.Exit, Frame.SpawnError, RemoteFrame.Failed];
      const deadline = performance.now() + 10_000;
      while (!frames.some((frame) => ends.includes(frame.type))) {
        if (performance.now() > deadline) assert.fail(`no end: ${frames.map((f) => f.type)}`);
        await sleep(10);
      }
      return frames.filter((frame) => frame.type !== RemoteFrame.Ping);
    } finally {
      sub.unsubscribe();
    }
  }

  it("a fake caller's request with a field nested 300 deep fails or runs alone: another caller's command on the same native worker completes intact", async () => {
    // One native worker: its JSON parser refuses nesting deeper than 256, and takes a request it cannot parse for a
    // broken host, which ends it and every command it runs.
    const nativeSubject = freshSubject();
    const nativeAgent = await startAgent(server.url, nativeSubject, [
      "--insecure",
      "--runtime",
      "native",
      "--size",
      "1",
    ]);
    const pool = new Pool({ remote: { servers: server.url, subject: nativeSubject } });
    try {
      const lines = Array.from({ length: 30 }, (_, i) => `line ${i}`);
      const proc = pool.spawn(["sh", "-c", "for i in $(seq 0 29); do echo line $i; sleep 0.03; done"]);
      const output = new Response(proc.stdout).text();
      await proc.spawned;
      const deep = JSON.parse("[".repeat(300) + "]".repeat(300));
      const request = buildRequest({
        cmd: "echo",
        args: ["garbage"],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        buffered: true,
      });
      // A field no request has: dropped, the command runs without it.
      const unknown = await answerTo(nativeSubject, { ...request, extra: deep });
      const exit = unknown.find((frame) => frame.type === Frame.Exit);
      assert.ok(exit, `frames ${unknown.map((f) => f.type)}: ${nativeAgent.lines.join("\n")}`);
      const { info, stdout } = decodeExit(exit.payload);
      assert.deepEqual({ code: info.code, stdout: new TextDecoder().decode(stdout) }, { code: 0, stdout: "garbage\n" });
      // A field a request has, of the wrong type (one the workers' own checks let through): that request fails alone.
      const known = await answerTo(nativeSubject, { ...request, clearEnv: deep });
      assert.deepEqual(known.map((frame) => frame.type), [RemoteFrame.Failed]);
      const failure = decodeJson(known[0].payload);
      assert.equal(failure.code, "ERR_PROTOCOL");
      assert.match(String(failure.message), /Malformed request: clearEnv must be a boolean/);
      // The other caller's command lost nothing.
      assert.equal(await withTimeout(output, 10_000, "the long command's output"), lines.map((l) => `${l}\n`).join(""));
      assert.equal(await proc.exited, 0);
      assert.equal(
        nativeAgent.lines.some((line) => line.includes("ERR_WORKER_DIED")),
        false,
        nativeAgent.lines.join("\n"),
      );
    } finally {
      await pool.close();
      await nativeAgent.stop();
    }
  });

  it("a discovery request whose reply subject is no inbox is refused, unanswered; one from an inbox is answered", async () => {
    const elsewhere = `defences.discovery.${process.pid}`;
    const heard: Uint8Array[] = [];
    const sub = nc.subscribe(elsewhere, {
      callback: (_error, msg) => {
        heard.push(msg.data);
      },
    });
    try {
      await nc.flush();
      const before = agent.lines.length;
      nc.publish(`${subject}.agents`, new Uint8Array(0), { reply: elsewhere });
      // Then one from an inbox: the agent reads both in order and answers in order, so an answer to the first would
      // have come by the time the second's did (on this same connection).
      const answer = decodeJson((await nc.request(`${subject}.agents`, new Uint8Array(0), { timeout: 5000 })).data);
      assert.equal(answer.pid, agent.pid);
      await nc.flush();
      assert.equal(heard.length, 0, "the agent answered a reply subject outside _INBOX.");
      const refused = agent.lines.slice(before).map((line) => JSON.parse(line)).find((e) => e.event === "refused");
      assert.match(refused?.reason ?? "", /discovery: reply subject "defences\.discovery\.\d+" is not an inbox/);
    } finally {
      sub.unsubscribe();
    }
  });

  it("a fake caller's stdin, more than 1 MiB ahead of its acknowledgements: Failed, and the command killed", async () => {
    const caller = await fakeCaller(["sleep", "30"], "piped");
    try {
      // Five 256 KiB writes without waiting (a message each: the server takes at most 1 MiB).
      const chunk = new Uint8Array(256 * 1024);
      for (let seq = 0; seq < 5; seq++) {
        nc.publish(caller.control, encodeMessage(seq, frameParts(Frame.Stdin, chunk)), { reply: caller.inbox });
      }
      const failure = decodeJson((await caller.waitFor(RemoteFrame.Failed)).payload);
      assert.equal(failure.code, "ERR_PROTOCOL");
      assert.match(String(failure.message), /more stdin ahead of its acknowledgements than it may/);
      assert.deepEqual(await groupSurvivors(caller.pid, 3000), []);
    } finally {
      caller.done();
    }
  });

  it("a fake caller's credit for output never sent: Failed, and the command killed", async () => {
    const caller = await fakeCaller(["sleep", "30"]);
    try {
      nc.publish(caller.control, encodeMessage(0, frameParts(Frame.Credit, encodeCredit(1, 1 << 20))), {
        reply: caller.inbox,
      });
      const failure = decodeJson((await caller.waitFor(RemoteFrame.Failed)).payload);
      assert.equal(failure.code, "ERR_PROTOCOL");
      assert.match(String(failure.message), /credited output that was never sent/);
      assert.deepEqual(await groupSurvivors(caller.pid, 3000), []);
    } finally {
      caller.done();
    }
  });

  it("a spawn whose reply subject is no inbox is refused, unanswered", async () => {
    const elsewhere = `defences.elsewhere.${process.pid}`;
    const heard: Uint8Array[] = [];
    const sub = nc.subscribe(elsewhere, {
      callback: (_error, msg) => {
        heard.push(msg.data);
      },
    });
    const before = agent.lines.length;
    nc.publish(subject, encodeMessage(0, spawnFrame(["echo", "pointed elsewhere"])), { reply: elsewhere });
    await nc.flush();
    const refusal = () =>
      agent.lines.slice(before).map((line) => JSON.parse(line)).find((event) => event.event === "refused");
    const deadline = performance.now() + 5000;
    while (refusal() === undefined && performance.now() < deadline) await sleep(20);
    await sleep(100); // an answer, if one were sent, would have come with the refusal
    sub.unsubscribe();
    assert.equal(heard.length, 0);
    const refused = refusal();
    assert.match(refused?.reason ?? "", /is not an inbox/);
    assert.equal(agent.lines.slice(before).some((line) => line.includes('"start"')), false);
  });

  it("a server's small max_payload: stdin writes and output cut into messages it takes, every byte intact", async () => {
    const smallSubject = freshSubject();
    const smallAgent = await startAgent(small.url, smallSubject, ["--insecure", "--size", "1"]);
    const pool = new Pool({ remote: { servers: small.url, subject: smallSubject } });
    try {
      // 1 MiB through cat: the caller's 256 KiB writes go in frames of under 32 KiB, acknowledged as one each.
      const input = new Uint8Array(1024 * 1024).map((_, i) => (i * 7 + (i >> 10)) & 0xff);
      const proc = pool.spawn(["cat"], { stdin: "pipe" });
      proc.stdin!.write(input);
      proc.stdin!.end();
      const echoed = new Uint8Array(await new Response(proc.stdout).arrayBuffer());
      assert.equal(await proc.exited, 0);
      assert.equal(echoed.byteLength, input.byteLength);
      assert.ok(echoed.every((byte, i) => byte === input[i]), "cat's output is its input");
      // Buffered output larger than a message: the agent sends it ahead of the exit, in pieces.
      const { stdout, code } = await pool.command("head", { args: ["-c", "300000", "/dev/zero"] }).output();
      assert.equal(code, 0);
      assert.equal(stdout.byteLength, 300_000);
    } finally {
      await pool.close();
      await smallAgent.stop();
    }
  });

  it("an agent without credentials refuses to start: exit 2, and why; with --insecure it starts, and says so", async () => {
    const [cmd, ...rest] = hostArgv(CLI, "agent", "--servers", server.url, "--subject", freshSubject());
    const env = { ...process.env };
    delete env.SPAWNPOOL_NATS_TOKEN;
    delete env.SPAWNPOOL_NATS_PASS;
    const result = spawnSync(cmd, rest, { encoding: "utf8", timeout: 20_000, env });
    assert.equal(result.status, 2, result.stderr);
    assert.match(
      result.stderr,
      /^spawnpool agent: refusing to start without NATS credentials: anyone who can reach the servers could run commands as this user\. .*--insecure/,
    );
    assert.doesNotMatch(result.stderr, /"listening"/);
    const insecure = await startAgent(server.url, freshSubject(), ["--insecure"], {});
    try {
      const warning = insecure.lines.map((line) => JSON.parse(line)).find((event) => event.event === "insecure");
      assert.ok(warning, insecure.lines.join("\n"));
      assert.match(
        warning.reason,
        /^WARNING: --insecure, no NATS credentials: anyone who can reach nats:\/\/127\.0\.0\.1:\d+ can run commands as user ".+" on this machine$/,
      );
    } finally {
      await insecure.stop();
    }
  });

  it("the agent's own options: a bad --id or --tls-key alone exits 2 with a message", () => {
    for (
      const [args, message] of [
        [["--id", "not an id!"], /agentId must be 1 to 32 letters/],
        [["--tls-key", "key.pem"], /--tls-cert and --tls-key go together/],
      ] as const
    ) {
      const [cmd, ...rest] = hostArgv(CLI, "agent", "--servers", server.url, ...args);
      const result = spawnSync(cmd, rest, { encoding: "utf8", timeout: 20_000 });
      assert.equal(result.status, 2, result.stderr);
      assert.match(result.stderr, message);
    }
  });
});

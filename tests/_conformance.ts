/**
 * What the conformance files share: the worker runtimes to test, one describe block per runtime with its own pool,
 * and small helpers.
 *
 * Worker runtimes come from SPAWNPOOL_TEST_WORKERS (comma-separated), default all three and the native worker; one
 * that is missing fails the suite rather than being skipped. An entry "remote-X" (X: node, bun or deno) tests a remote
 * pool instead: the file starts a nats-server (support/nats_server.mjs) and, for the block, one agent
 * (`remote/cli.ts agent`) running under X with X workers; its pool is `new Pool({ remote })` on the agent's subject.
 * The agent and the server are stopped after the file. The entry "native-qemu" tests native workers of the other Linux
 * architecture's build (linux-arm64 on an x64 machine), run under qemu-user (support/qemu_user.mjs); a missing qemu
 * or binary fails the suite too.
 *
 * @module
 */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Pool, type WorkerRuntime } from "../mod.ts";
import { type NatsServer, startNatsServer } from "../support/nats_server.mjs";
import { emulatedTarget, emulatedWorker } from "../support/qemu_user.mjs";
import { HOST } from "./_helpers.ts";
import { type AgentProcess, assertStopped, startAgentUnder } from "./_remote.ts";

/**
 * The worker runtimes under test: a worker runtime, "remote-" and an agent's runtime for a remote pool, or "native-qemu"
 * for native workers of the other Linux architecture under qemu-user.
 */
export const WORKERS: string[] = (process.env.SPAWNPOOL_TEST_WORKERS ?? "node,bun,deno,native").split(",");
/** Bytes as UTF-8 text. */
export const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
/** Text as UTF-8 bytes. */
export const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
/** A scratch directory for this process's tests. */
export const scratch: string = mkdtempSync(join(tmpdir(), "spawnpool-test-"));
/** The checkout. */
export const root: string = fileURLToPath(new URL("..", import.meta.url).href);

/** A piped stream's whole content as text. */
export async function readAll(stream: ReadableStream<Uint8Array> | undefined): Promise<string> {
  assert.ok(stream, "stream is piped");
  return await new Response(stream).text();
}

/** What a describe block's tests run on. */
export interface Workers {
  /** The workers' runtime: for a remote pool, that of the agent's workers (which run under it as the agent does). */
  runtime: WorkerRuntime;
  /** Whether the pool is remote: its commands run on an agent, through a nats-server. */
  remote: boolean;
  /** Whether the workers are another architecture's native build, run under qemu-user. */
  emulated: boolean;
  /** Another pool on the same kind of workers: local with `size` workers, or remote on the block's agent (any size). */
  newPool(size: number): Pool;
}

/** Why a test is skipped on a remote pool (`false` on a local one), for `it(name, { skip }, fn)`. */
export function remoteSkip(workers: Workers, reason: string): string | false {
  return workers.remote && `remote pool: ${reason}`;
}

/** `it`, whose tests a remote pool skips (with `reason`): what they assert cannot hold across machines. */
export function itUnlessRemote(
  workers: Workers,
  reason: string,
): (name: string, fn: () => Promise<void> | void) => void {
  return (name, fn) => it(name, { skip: remoteSkip(workers, reason) }, fn);
}

const AGENT_RUNTIMES = ["node", "bun", "deno"];

/**
 * One describe block per worker runtime, named for the host, the runtime and `title`, with a pool of two workers of
 * that runtime for its tests (or, for "remote-X", a remote pool whose agent runs under X); with `closePool`, a last
 * test closes it (otherwise one of the tests does). Await it: with remote entries it starts a nats-server first.
 */
export async function forEachWorker(
  title: string,
  body: (pool: Pool, runtime: WorkerRuntime, workers: Workers) => void,
  options: { closePool?: boolean } = {},
): Promise<void> {
  const remotes = WORKERS.filter((entry) => entry.startsWith("remote-"));
  for (const entry of remotes) {
    const runtime = entry.slice("remote-".length);
    if (!AGENT_RUNTIMES.includes(runtime)) {
      throw new TypeError(`SPAWNPOOL_TEST_WORKERS: "${entry}": an agent runs under ${AGENT_RUNTIMES.join(", ")}`);
    }
  }
  // One nats-server for the file's remote blocks, stopped after the last of them.
  const server: NatsServer | undefined = remotes.length > 0 ? await startNatsServer() : undefined;
  let remoteBlocks = remotes.length;
  for (const entry of WORKERS) {
    const remote = entry.startsWith("remote-");
    const emulated = entry === "native-qemu";
    const runtime = (remote ? entry.slice("remote-".length) : emulated ? "native" : entry) as WorkerRuntime;
    const subject = `conformance.${runtime}.${randomBytes(6).toString("base64url")}`;
    const execPath = emulated ? emulatedWorker() : undefined;
    const workers: Workers = remote
      ? { runtime, remote, emulated, newPool: () => new Pool({ remote: { servers: server!.url, subject } }) }
      : { runtime, remote, emulated, newPool: (size) => new Pool({ size, runtime, execPath }) };
    const name = remote
      ? `remote pool, ${runtime} agent`
      : emulated
      ? `native workers (linux-${emulatedTarget()?.arch} under qemu-user)`
      : `${runtime} workers`;
    describe(`${HOST} host, ${name}: ${title}`, () => {
      const pool = workers.newPool(2);
      if (remote) {
        let agent: AgentProcess | undefined;
        before(async () => {
          agent = await startAgentUnder(runtime, server!.url, subject);
        });
        after(async () => {
          try {
            await pool.close({ drain: false });
            await agent?.stop();
            if (agent !== undefined) await assertStopped(agent);
          } finally {
            if (--remoteBlocks === 0) await server!.stop();
          }
        });
      }
      body(pool, runtime, workers);
      if (options.closePool) {
        it("closes its pool", async () => {
          await pool.close();
          assert.equal(pool.stats().workers.length, 0);
        });
      }
    });
  }
}

/**
 * The unix-socket handshake on real sockets: the abstract-name listener and the 0700 socket-file
 * fallback (used where abstract sockets do not exist), a connection without the secret refused, the
 * worker's connection accepted after it, and the listener gone afterwards. Then the connected pair a
 * Node host makes the same way for its worker's fd 3.
 */

import assert from "node:assert/strict";
import { existsSync, readdirSync, statSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname } from "node:path";
import { describe, it } from "node:test";
import { connectedPair, listenForWorker } from "../adapters/_net_listener.ts";
import { handshake, type PendingWorker, SECRET_BYTES } from "../adapters/_unix_handshake.ts";
import { withTimeout } from "./_helpers.ts";

function open(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path }, () => resolve(socket));
    socket.once("error", reject);
  });
}

/** Connects to `path` as the worker does: the secret (hex, as in the bootstrap) first. */
async function connectAsWorker(path: string, secret: string): Promise<Socket> {
  const worker = await open(path);
  worker.write(Uint8Array.from(secret.match(/../g)!, (hex) => parseInt(hex, 16)));
  return worker;
}

/** The host's side of the handshake with a worker that neither exits nor may be killed; fails after 5 s as `why`. */
function handshakeAlive(pending: PendingWorker, why: string) {
  return withTimeout(
    handshake(pending, {
      exited: new Promise<never>(() => {}),
      kill: () => assert.fail("the worker is killed only when the handshake fails"),
    }),
    5_000,
    why,
  );
}

function closed(socket: Socket): Promise<void> {
  return new Promise((resolve) => socket.once("close", () => resolve()));
}

for (const abstract of [true, false]) {
  describe(`handshake over ${abstract ? "an abstract socket" : "a socket file in a private directory"}`, () => {
    it("refuses a connection without the secret, accepts the worker's, then stops listening", async () => {
      const pending = await listenForWorker(abstract);
      const { path, secret } = JSON.parse(pending.bootstrap) as { path: string; secret: string };
      assert.equal(path.startsWith("\0"), abstract);
      if (!abstract) assert.equal(statSync(dirname(path)).mode & 0o777, 0o700);
      const never = new Promise<never>(() => {});
      const accepted = pending.accept(never);

      const attacker = await open(path);
      const attackerClosed = closed(attacker);
      attacker.write(new Uint8Array(SECRET_BYTES).fill(7));
      await attackerClosed; // refused: the host destroyed the connection

      const worker = await open(path);
      const bytes = new Uint8Array(secret.length / 2).map((_, i) => parseInt(secret.slice(i * 2, i * 2 + 2), 16));
      const extra = new TextEncoder().encode("first frame bytes");
      worker.write(new Uint8Array([...bytes, ...extra]));
      const channel = await accepted;

      const received = new Promise<Uint8Array>((resolve) => {
        channel.start({ data: (chunk) => resolve(chunk), close: () => {} });
      });
      assert.equal(new TextDecoder().decode(await received), "first frame bytes", "bytes after the secret kept");

      if (!abstract) assert.equal(existsSync(path), false, "socket file removed once connected");
      await assert.rejects(open(path), "nobody can connect once the worker is in");
      channel.close();
      worker.destroy();
    });

    it("takes a worker that connected and presented its secret before the host began to accept", async () => {
      const pending = await listenForWorker(abstract);
      const { path, secret } = JSON.parse(pending.bootstrap) as { path: string; secret: string };
      // The worker has its bootstrap as it starts: it may be in before the host's handshake() runs.
      const worker = await connectAsWorker(path, secret);
      await new Promise((resolve) => setTimeout(resolve, 100));
      const channel = await handshakeAlive(pending, "the worker's early connection went unheard");
      channel.close();
      worker.destroy();
    });

    it("survives connections closed and piled up before it began to accept, and still takes the worker", async () => {
      const pending = await listenForWorker(abstract);
      const { path, secret } = JSON.parse(pending.bootstrap) as { path: string; secret: string };
      // Before the host waits for its worker: some gone at once, and more than the eight the listener holds unread (the
      // oldest go).
      const strangers = await Promise.all(Array.from({ length: 12 }, () => open(path)));
      for (const stranger of strangers.slice(0, 4)) stranger.destroy();
      await new Promise((resolve) => setTimeout(resolve, 50));
      const worker = await connectAsWorker(path, secret);
      const channel = await handshakeAlive(pending, "the worker's connection went unheard after the strangers'");
      channel.close();
      worker.destroy();
      for (const stranger of strangers) stranger.destroy();
    });

    it("kills a worker that exits before connecting, and fails with why", async () => {
      const pending = await listenForWorker(abstract);
      let killed = 0;
      await assert.rejects(
        handshake(pending, { exited: Promise.resolve(), kill: () => void killed++ }),
        /Worker exited before connecting/,
      );
      assert.equal(killed, 1);
      const { path } = JSON.parse(pending.bootstrap) as { path: string };
      await assert.rejects(open(path), "the listener is closed");
    });
  });
}

/** The private socket directories (mkdtemp's `spawnpool-` and six characters; test scratch dirs have longer names). */
function privateDirs(): string[] {
  return readdirSync(tmpdir()).filter((name) => /^spawnpool-[^-]{6}$/.test(name));
}

for (const abstract of [true, false]) {
  describe(`connected pair over ${abstract ? "an abstract socket" : "a socket file in a private directory"}`, () => {
    // The pair's listener is listenNet, as above: the refusal of a connection without the secret is tested there.
    it("the ends are connected both ways, the host end reads into its one buffer, nothing is left listening", async () => {
      const dirsBefore = privateDirs();
      const buffer = new Uint8Array(16);
      const received: number[] = [];
      let reads = 0;
      let otherBuffer = false;
      const { host, worker } = await connectedPair({
        buffer,
        callback(bytes, read) {
          reads++;
          if (read.buffer !== buffer.buffer) otherBuffer = true;
          received.push(...read.subarray(0, bytes));
          return true;
        },
      }, abstract);
      const fromHost = new Promise<Uint8Array>((resolve) => worker.once("data", resolve));
      worker.resume();
      host.write(new Uint8Array([1, 2, 3]));
      assert.deepEqual([...await fromHost], [1, 2, 3], "the secret is not seen by the worker end");

      const hostClosed = closed(host);
      const message = new Uint8Array(100).map((_, i) => i);
      worker.end(message);
      await hostClosed;
      assert.deepEqual(received, [...message]);
      assert.ok(reads >= 100 / buffer.byteLength, `read in pieces of at most ${buffer.byteLength} bytes`);
      assert.equal(otherBuffer, false, "every read went into the same buffer");
      assert.deepEqual(privateDirs(), dirsBefore, "no socket directory left behind");
      worker.destroy();
    });
  });
}

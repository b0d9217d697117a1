/**
 * The unix-socket handshake on real sockets: the abstract-name listener and the 0700 socket-file
 * fallback (used where abstract sockets do not exist), a connection without the secret refused, the
 * worker's connection accepted after it, and the listener gone afterwards.
 */

import assert from "node:assert/strict";
import { existsSync, statSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { dirname } from "node:path";
import { describe, it } from "node:test";
import { listenForWorker, SECRET_BYTES } from "../adapters/_unix_handshake.ts";

function open(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path }, () => resolve(socket));
    socket.once("error", reject);
  });
}

function closed(socket: Socket): Promise<void> {
  return new Promise((resolve) => socket.once("close", () => resolve()));
}

for (const abstract of [true, false]) {
  describe(`handshake over ${abstract ? "an abstract socket" : "a socket file in a private directory"}`, () => {
    it("refuses a connection without the secret, accepts the worker's, then stops listening", async () => {
      const pending = await listenForWorker(abstract);
      const { path, secret } = JSON.parse(pending.bootstrapLine) as { path: string; secret: string };
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
  });
}

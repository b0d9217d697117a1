/**
 * The frame decoder and payloads: fuzzed with random, truncated and oversized input (bounded, seeded, so a failure
 * replays), split at every byte boundary, lent buffers, and payload bytes kept without copies that pin more.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { Socket } from "node:net";
import { describe, it } from "node:test";
import { connectedPair } from "../adapters/_net_listener.ts";
import { allocateUnzeroed, lendingSocketChannel, socketChannel } from "../adapters/_socket_channel.ts";
import { LENDING_READ_BYTES } from "../core/adapter.ts";
import {
  concatBytes,
  decodeExit,
  encodeExit,
  encodeJson,
  Frame,
  FrameDecoder,
  keepBytes,
  MAX_PAYLOAD_BYTES,
  ProtocolError,
} from "../core/frame.ts";
import { frame } from "./_helpers.ts";
import { decode, feed, random, randomBytes } from "./_fuzz.ts";

describe("frame decoder fuzz", () => {
  it("5,000 random inputs: frames or a ProtocolError, nothing else", () => {
    const next = random(0x5eed);
    let errors = 0;
    for (let i = 0; i < 5000; i++) {
      if (decode(randomBytes(next, Math.floor(next() * 512)), next).error) errors++;
    }
    assert.ok(errors > 0, "random headers mostly declare oversized frames");
  });

  it("valid frames split at every byte boundary decode exactly", () => {
    const next = random(7);
    const frames = Array.from({ length: 50 }, (_, i) => frame(Frame.Stdout, i + 1, randomBytes(next, i * 37)));
    const all = concatBytes(frames);
    for (let trial = 0; trial < 200; trial++) {
      const seen: Uint8Array[] = [];
      const decoder = new FrameDecoder((type, id, payload) => seen.push(frame(type, id, payload)));
      feed(decoder, all, next, trial % 2 ? 64 : 4096);
      assert.deepEqual(seen, frames);
      assert.equal(decoder.buffered, 0);
    }
  });

  it("lent chunks: payloads kept after the channel reuses its buffer are intact", () => {
    const next = random(13);
    const payloads = Array.from({ length: 60 }, (_, i) => randomBytes(next, (i * 53) % 700));
    const all = concatBytes(payloads.map((payload, i) => frame(Frame.Stdout, i + 1, payload)));
    const kept: Uint8Array[] = [];
    // What a receiver that keeps payloads does: keepBytes(payload, lent).
    const decoder = new FrameDecoder((_type, _id, payload, lent) => kept.push(keepBytes(payload, lent)), {
      lent: true,
    });
    const reused = new Uint8Array(512); // what a lending channel reads into, every time
    for (let offset = 0; offset < all.byteLength;) {
      const size = Math.min(1 + Math.floor(next() * reused.byteLength), all.byteLength - offset);
      reused.set(all.subarray(offset, offset + size));
      decoder.push(reused.subarray(0, size));
      reused.fill(0xee); // the next read overwrites it
      offset += size;
    }
    assert.deepEqual(kept, payloads);
  });

  it("split payloads are assembled in the channel's unzeroed buffers, every byte written", () => {
    const next = random(17);
    const frames = Array.from({ length: 40 }, (_, i) => frame(Frame.Stdout, i + 1, randomBytes(next, 1 + i * 41)));
    const all = concatBytes(frames);
    const made = new Set<ArrayBufferLike>();
    const seen: Uint8Array[] = [];
    let assembled = 0;
    const decoder = new FrameDecoder((type, id, payload) => {
      assert.equal(Object.getPrototypeOf(payload), Uint8Array.prototype, "users get plain Uint8Arrays");
      if (made.has(payload.buffer)) assembled++;
      seen.push(frame(type, id, payload));
    }, {
      // Stale bytes, as unzeroed memory may hold: none may show through.
      allocate(length) {
        const buffer = allocateUnzeroed(length).fill(0xa5);
        made.add(buffer.buffer);
        return buffer;
      },
    });
    feed(decoder, all, next, 97);
    assert.deepEqual(seen, frames);
    assert.equal(decoder.buffered, 0);
    assert.ok(assembled > 0, "frames split across chunks are delivered in the buffers allocated for them");
    assert.equal(allocateUnzeroed(1000).buffer.byteLength, 1000, "a buffer of its own, not a pool's slice");
  });

  it("a payload's rest read straight into readTarget is taken in place, at every split", () => {
    const next = random(19);
    const payload = randomBytes(next, 3000);
    const whole = concatBytes([frame(Frame.Stdout, 7, payload), frame(Frame.Stdout, 8, randomBytes(next, 10))]);
    const first = whole.byteLength - 10 - 9;
    for (let at = 0; at < first; at++) {
      const seen: Array<[number, Uint8Array]> = [];
      let target: Uint8Array | undefined;
      const decoder = new FrameDecoder((_type, id, bytes) => void seen.push([id, bytes]), { lent: true });
      decoder.push(whole.slice(0, at));
      assert.equal(decoder.pendingId, at >= 9 ? 7 : undefined);
      let offset = at;
      let targetBuffer: ArrayBufferLike | undefined;
      while ((target = decoder.readTarget(1)) !== undefined) {
        targetBuffer = target.buffer;
        // What a channel does: read at most the rest into the target, then push the view of what it read.
        const n = Math.min(target.byteLength, 1 + Math.floor(next() * 1200));
        target.set(whole.subarray(offset, offset + n));
        decoder.push(target.subarray(0, n));
        offset += n;
      }
      decoder.push(whole.slice(offset));
      assert.deepEqual(seen.map(([id]) => id), [7, 8], `split at ${at}`);
      assert.deepEqual(seen[0][1], payload, `split at ${at}`);
      if (at >= 9) assert.equal(seen[0][1].buffer, targetBuffer, "delivered in the memory it was read into");
      assert.equal(decoder.readTarget(1), undefined, "nothing pending between frames");
    }
    const decoder = new FrameDecoder(() => {});
    decoder.push(whole.subarray(0, 100));
    assert.equal(decoder.readTarget(payload.byteLength - 90), undefined, "a rest shorter than asked is not offered");
    assert.equal(decoder.readTarget(payload.byteLength - 91)?.byteLength, payload.byteLength - 91);
  });

  it("a lending socket channel reads large frames' rests into their payloads, over a real socket", async () => {
    const next = random(23);
    const payloads = [300_000, 5, 1_200_000, 70_000, 0, 40_000, 2_000_000, 12].map((n) => randomBytes(next, n));
    const lending = lendingSocketChannel();
    const { host, worker } = await connectedPair(lending.onread);
    const channel = lending.attach(host);
    const kept: Uint8Array[] = [];
    const decoder = new FrameDecoder((_type, _id, payload, lent) => void kept.push(keepBytes(payload, lent)), {
      lent: true,
      allocate: channel.allocate,
    });
    let direct = 0;
    const closed = new Promise<void>((resolve) => {
      channel.start({
        readTarget: () => decoder.readTarget(32 * 1024),
        data(chunk) {
          if (chunk.buffer.byteLength !== LENDING_READ_BYTES) direct++;
          decoder.push(chunk);
        },
        close: () => resolve(),
      });
    });
    const all = concatBytes(payloads.map((payload, i) => frame(Frame.Stdout, i + 1, payload)));
    for (let offset = 0; offset < all.byteLength;) {
      const size = 1 + Math.floor(next() * 400_000);
      await new Promise((resolve) => worker.write(all.subarray(offset, offset + size), resolve));
      offset += size;
    }
    worker.end();
    await closed;
    assert.equal(kept.length, payloads.length);
    kept.forEach((bytes, i) => assert.ok(Buffer.from(bytes).equals(payloads[i]), `payload ${i}`));
    assert.ok(direct > 0, "some reads went straight into a payload");
  });

  it("node:net channels allocate unzeroed payload buffers", () => {
    const socket = new Socket();
    assert.equal(socketChannel(socket).allocate, allocateUnzeroed);
    assert.equal(lendingSocketChannel().attach(socket).allocate, allocateUnzeroed);
    socket.destroy();
  });

  it("a truncated frame waits, without a frame or an error", () => {
    const next = random(11);
    const whole = frame(Frame.Stdout, 1, randomBytes(next, 1000));
    for (let cut = 0; cut < whole.byteLength; cut += 37) {
      assert.deepEqual(decode(whole.subarray(0, cut), next), { frames: 0 });
    }
  });

  it("an absurd length fails at once, before any allocation", () => {
    const header = new Uint8Array(9);
    new DataView(header.buffer).setUint32(0, MAX_PAYLOAD_BYTES + 1);
    const result = decode(header, random(3));
    assert.ok(result.error?.message.includes("exceeds"));
  });
});

describe("payload bytes: no copies on the way, none kept that pin more", () => {
  it("an exit payload carries output as the chunks it was read in, and decodes to their bytes", () => {
    const next = random(21);
    const out = [randomBytes(next, 65536), randomBytes(next, 65536), randomBytes(next, 35840)];
    const err = [randomBytes(next, 10), randomBytes(next, 3)];
    const parts = encodeExit({ code: 3, signal: null, reason: null }, out, err);
    for (const chunk of [...out, ...err]) assert.ok(parts.includes(chunk), "a chunk was copied");
    const decoded = decodeExit(concatBytes(parts));
    assert.deepEqual(decoded.info, { code: 3, signal: null, reason: null });
    // What the command used travels with its exit, every field checked.
    const usage = {
      user: 1,
      system: 2,
      maxRSS: 3,
      vcsw: 4,
      ivcsw: 5,
      inblock: 6,
      oublock: 7,
      msgsnd: 8,
      msgrcv: 9,
      nsignals: 10,
      nswap: 11,
      shm: 12,
    };
    const withUsage = decodeExit(concatBytes(encodeExit({ code: 0, signal: null, reason: null, usage })));
    assert.deepEqual({ ...withUsage.info.usage }, usage);
    for (const bad of [{ ...usage, user: -1 }, { ...usage, maxRSS: "3" }, { ...usage, extra: 1 }, [], null]) {
      const parts = encodeExit({ code: 0, signal: null, reason: null, usage: bad as never });
      assert.throws(() => decodeExit(concatBytes(parts)), ProtocolError, JSON.stringify(bad));
    }
    assert.deepEqual(decoded.stdout, concatBytes(out));
    assert.deepEqual(decoded.stderr, concatBytes(err));
    const status = { code: 0, signal: null, reason: null };
    assert.equal(concatBytes(encodeExit(status)).byteLength, 8 + encodeJson(status).byteLength);
  });

  it("keepBytes gives each empty output a buffer of its own, which pins nothing", () => {
    const big = new Uint8Array(64 * 1024);
    const [a, b] = [keepBytes(big.subarray(5, 5)), keepBytes(big.subarray(9, 9), true)];
    assert.equal(a.buffer.byteLength, 0, "an empty output must not pin the read buffer");
    assert.notEqual(a.buffer, b.buffer, "transferring one empty output must not detach another");
    structuredClone(a, { transfer: [a.buffer as ArrayBuffer] });
    assert.equal((b.buffer as ArrayBuffer).detached, false);
  });

  it("keepBytes copies a small view out of a large buffer, and keeps a view that spans most of one", () => {
    const big = new Uint8Array(64 * 1024).fill(7);
    const small = keepBytes(big.subarray(100, 103));
    assert.equal(small.buffer.byteLength, 3, "a 3-byte output must not pin a 64 KiB read buffer");
    big[100] = 1;
    assert.equal(small[0], 7, "the copy is independent of the read buffer");

    const most = big.subarray(9, big.byteLength - 4);
    const kept = keepBytes(most);
    assert.equal(kept.buffer, big.buffer, "a view spanning most of its buffer is kept, not copied");
    assert.equal(kept.byteOffset, 9);
    assert.equal(kept.byteLength, most.byteLength);

    // Runtime Buffers come back as plain Uint8Arrays either way, as the web-stream shapes promise.
    const buffer = Buffer.from(big.buffer, 0, big.byteLength);
    assert.equal(Object.getPrototypeOf(keepBytes(buffer)), Uint8Array.prototype);
    assert.equal(Object.getPrototypeOf(keepBytes(buffer.subarray(0, 5))), Uint8Array.prototype);
  });
});

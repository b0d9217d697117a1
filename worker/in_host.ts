/**
 * The worker loop run inside the host: a pool's first commands, while no worker runs (`startInHost`), spawned
 * with the host runtime's own API by the same loop a worker runs, over a channel in memory. The pool's side is
 * unchanged: it speaks the same frames to this loop as to a worker process, with the same checks.
 *
 * @module
 */

import type { Adapter, ByteChannel, ChannelReceiver, WorkerProcess } from "../core/adapter.ts";
import { serve } from "./serve.ts";

/**
 * One end of a channel in memory. What is written is copied (a writer may reuse its buffers once `write` returns, as
 * with a socket) and reaches the other end in a later microtask; a close reaches both ends' receivers, after what
 * was written before it.
 */
class MemoryEnd implements ByteChannel {
  peer!: MemoryEnd;
  /** Resolves once this end's receiver has heard the close. */
  readonly closed: Promise<void>;
  #receiver: ChannelReceiver | undefined;
  #pending: Array<Uint8Array | null> = [];
  #closing = false;
  #resolveClosed!: () => void;

  constructor() {
    this.closed = new Promise((resolve) => (this.#resolveClosed = resolve));
  }

  start(receiver: ChannelReceiver): void {
    this.#receiver = receiver;
    const pending = this.#pending.splice(0);
    queueMicrotask(() => {
      for (const item of pending) this.#deliver(item);
    });
  }

  write(chunks: readonly Uint8Array[]): void {
    if (this.#closing || this.peer.#closing) return;
    let length = 0;
    for (const chunk of chunks) length += chunk.byteLength;
    const bytes = new Uint8Array(length);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.byteLength;
    }
    queueMicrotask(() => this.peer.#deliver(bytes));
  }

  close(): void {
    if (this.#closing) return;
    this.#closing = true;
    queueMicrotask(() => {
      this.#deliver(null);
      this.peer.close();
    });
  }

  /** Bytes for this end's receiver, or its close (`null`); held until it has started. */
  #deliver(item: Uint8Array | null): void {
    if (this.#receiver === undefined) {
      this.#pending.push(item);
      return;
    }
    if (item === null) {
      const receiver = this.#receiver;
      this.#receiver = { data: () => {}, close: () => {} };
      receiver.close();
      this.#resolveClosed();
    } else {
      this.#receiver.data(item);
    }
  }

  ref(): void {}

  unref(): void {}
}

/**
 * Starts the worker loop inside this process on `adapter` (the host's). The returned process's pid is the host's;
 * its `kill` stops the loop (its commands are killed, the detached ones excepted) and never signals the host;
 * it has exited once the loop's channel has closed. Its commands keep the host alive only while the process is
 * ref'd, as a worker process does.
 */
export function startInHost(adapter: Adapter): WorkerProcess {
  const host = new MemoryEnd();
  const loop = new MemoryEnd();
  host.peer = loop;
  loop.peer = host;
  const server = serve(adapter, loop, true);
  return {
    pid: adapter.pid(),
    channel: host,
    exited: loop.closed,
    kill: () => server.stop(),
    // The loop is in this process: it killed its commands as its channel closed.
    killOrphans: () => {},
    local: true,
    ref: () => server.keepAlive(true),
    unref: () => server.keepAlive(false),
  };
}

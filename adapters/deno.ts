/**
 * The Deno adapter: `Deno.Command` cannot hand a child an extra fd, so a Deno host listens on a fresh
 * abstract unix socket (a 0700 private directory where abstract sockets do not exist), gives the worker
 * the name and a one-time secret on its stdin, accepts only the connection that presents the secret,
 * and stops listening. Commands are spawned with `Deno.Command`.
 *
 * @module
 */

import { Socket } from "node:net";
import { type Adapter, type ByteChannel, SpawnFailed, type SpawnedChild } from "../core/adapter.ts";
import { concatBytes, type StreamFd } from "../core/frame.ts";
import {
  abstractSocketName,
  bootstrapLine,
  HANDSHAKE_TIMEOUT_MS,
  newSecret,
  parseBootstrap,
  SECRET_BYTES,
  sameBytes,
} from "./_handshake.ts";
import { socketChannel } from "./_socket_channel.ts";
import { errorCode, StreamPump } from "./_stream_pump.ts";

const READ_BYTES = 64 * 1024;

/** A {@linkcode ByteChannel} over a `Deno.Conn`; `initial` holds bytes read past the handshake. */
function connChannel(conn: Deno.Conn, initial: Uint8Array): ByteChannel {
  let writing: Promise<void> = Promise.resolve();
  let closed = false;
  return {
    start(receiver) {
      void (async () => {
        let failure: Error | undefined;
        try {
          if (initial.byteLength > 0) receiver.data(initial);
          while (true) {
            const buffer = new Uint8Array(READ_BYTES);
            const n = await conn.read(buffer);
            if (n === null) break;
            receiver.data(buffer.subarray(0, n));
          }
        } catch (error) {
          if (!closed) failure = error as Error;
        }
        closed = true;
        try {
          conn.close();
        } catch {
          // Already closed.
        }
        receiver.close(failure);
      })();
    },
    write(chunks) {
      if (closed) return;
      const data = concatBytes(chunks);
      writing = writing.then(async () => {
        let offset = 0;
        while (offset < data.byteLength && !closed) offset += await conn.write(data.subarray(offset));
      }).catch(() => {});
    },
    close() {
      if (closed) return;
      closed = true;
      try {
        conn.close();
      } catch {
        // Already closed.
      }
    },
    ref: () => conn.ref(),
    unref: () => conn.unref(),
  };
}

/** Reads exactly `n` bytes or fewer if the peer closes. */
async function readExactly(conn: Deno.Conn, n: number): Promise<{ head: Uint8Array; rest: Uint8Array }> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  while (total < n) {
    const buffer = new Uint8Array(READ_BYTES);
    const read = await conn.read(buffer);
    if (read === null) break;
    chunks.push(buffer.subarray(0, read));
    total += read;
  }
  const all = concatBytes(chunks);
  return { head: all.subarray(0, Math.min(n, all.byteLength)), rest: all.subarray(Math.min(n, all.byteLength)) };
}

/** Where the listener lives: abstract on Linux, else a socket file in a private directory. */
async function listenPrivately(): Promise<{ listener: Deno.UnixListener; path: string; cleanup: () => void }> {
  if (Deno.build.os === "linux") {
    const path = abstractSocketName();
    return { listener: Deno.listen({ transport: "unix", path }), path, cleanup: () => {} };
  }
  const dir = await Deno.makeTempDir({ prefix: "spawnpool-" });
  await Deno.chmod(dir, 0o700);
  const path = `${dir}/s`;
  const listener = Deno.listen({ transport: "unix", path });
  return {
    listener,
    path,
    cleanup: () => void Deno.remove(dir, { recursive: true }).catch(() => {}),
  };
}

/**
 * Accepts connections on `listener` until one presents `secret`; refuses the others. Rejects when the
 * worker exits or the timeout passes first.
 */
async function acceptWorker(
  listener: Deno.UnixListener,
  secret: Uint8Array,
  workerExited: Promise<unknown>,
): Promise<ByteChannel> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const giveUp = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("Worker did not connect in time")), HANDSHAKE_TIMEOUT_MS);
    void workerExited.then(() => reject(new Error("Worker exited before connecting")));
  });
  giveUp.catch(() => {});
  try {
    while (true) {
      const conn = await Promise.race([listener.accept(), giveUp]);
      const { head, rest } = await Promise.race([readExactly(conn, SECRET_BYTES), giveUp]);
      if (sameBytes(head, secret)) return connChannel(conn, rest);
      conn.close();
    }
  } finally {
    clearTimeout(timer);
    listener.close();
  }
}

/** The Deno runtime adapter. */
export const denoAdapter: Adapter = {
  runtime: "deno",
  channelKind: "unix",

  workerArgs(entry) {
    return [
      "run",
      "--quiet",
      "--no-prompt",
      "--no-config",
      "--no-lock",
      "--allow-run",
      "--allow-env",
      "--allow-net",
      "--allow-read",
      entry,
    ];
  },

  async startWorker(launch) {
    const { listener, path, cleanup } = await listenPrivately();
    const secret = newSecret();
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(launch.execPath, {
        args: launch.args,
        env: { ...launch.env, SPAWNPOOL_CHANNEL: "unix" },
        stdin: "piped",
        stdout: "inherit",
        stderr: "inherit",
      }).spawn();
    } catch (error) {
      listener.close();
      cleanup();
      throw error;
    }
    const exited = child.status.then(() => {});
    const writer = child.stdin.getWriter();
    await writer.write(new TextEncoder().encode(bootstrapLine(path, secret))).catch(() => {});
    await writer.close().catch(() => {});
    let channel: ByteChannel;
    try {
      channel = await acceptWorker(listener, secret, exited);
    } catch (error) {
      try {
        child.kill("SIGKILL");
      } catch {
        // Already gone.
      }
      throw error;
    } finally {
      cleanup();
    }
    return {
      pid: child.pid,
      channel,
      exited,
      kill: (signal = "SIGTERM") => child.kill(signal as Deno.Signal),
      ref: () => child.ref(),
      unref: () => child.unref(),
    };
  },

  async connectToHost(kind) {
    if (kind === "fd3") {
      // A Node or Bun host handed this worker a socketpair on fd 3.
      return socketChannel(new Socket({ fd: 3, readable: true, writable: true }));
    }
    const reader = Deno.stdin.readable.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { done, value } = await reader.read();
      if (done) throw new Error("Host closed stdin before sending the bootstrap line");
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const { path, secret } = parseBootstrap(text.slice(0, text.indexOf("\n")));
    const conn = await Deno.connect({ transport: "unix", path });
    let offset = 0;
    while (offset < secret.byteLength) offset += await conn.write(secret.subarray(offset));
    return connChannel(conn, new Uint8Array(0));
  },

  spawn(request, events) {
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(request.cmd, {
        args: request.args,
        cwd: request.cwd,
        env: request.env,
        clearEnv: request.clearEnv,
        // Stdin "inherit" reads nothing: a worker has no terminal to share.
        stdin: request.stdin === "piped" ? "piped" : "null",
        stdout: request.stdout,
        stderr: request.stderr,
        detached: true,
      }).spawn();
    } catch (error) {
      return Promise.reject(
        new SpawnFailed({ code: errorCode(error), message: error instanceof Error ? error.message : String(error) }),
      );
    }
    const pumps: [undefined, StreamPump | undefined, StreamPump | undefined] = [undefined, undefined, undefined];
    if (request.stdout === "piped") {
      pumps[1] = new StreamPump(child.stdout, (chunk) => events.data(1, chunk), () => events.end(1));
    }
    if (request.stderr === "piped") {
      pumps[2] = new StreamPump(child.stderr, (chunk) => events.data(2, chunk), () => events.end(2));
    }
    void child.status.then((status) => events.exit(status.signal ? null : status.code, status.signal));
    const stdin = request.stdin === "piped" ? child.stdin.getWriter() : undefined;
    const pid = child.pid;
    const controls: SpawnedChild = {
      pid,
      write(chunk) {
        if (stdin === undefined) return Promise.resolve(false);
        return stdin.write(chunk).then(() => true, () => false);
      },
      closeStdin() {
        stdin?.close().catch(() => {});
      },
      kill(signal, group) {
        if (group) Deno.kill(-pid, signal as Deno.Signal);
        else child.kill(signal as Deno.Signal);
      },
      pause: (fd: StreamFd) => pumps[fd]?.pause(),
      resume: (fd: StreamFd) => pumps[fd]?.resume(),
      release() {
        pumps[1]?.release();
        pumps[2]?.release();
      },
    };
    return Promise.resolve(controls);
  },

  onTerminate(handler) {
    let called = false;
    for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) {
      Deno.addSignalListener(signal, () => {
        if (called) return;
        called = true;
        handler();
      });
    }
  },
  deleteEnv: (name) => Deno.env.delete(name),
  getEnv: (name) => Deno.env.get(name),
  pid: () => Deno.pid,
  exit: (code) => Deno.exit(code),
};

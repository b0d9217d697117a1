/**
 * The Deno adapter: `Deno.Command` cannot hand a child an extra fd, so a Deno host always uses the
 * authenticated unix-socket channel (`_unix_handshake.ts`). Commands are spawned with `Deno.Command`.
 *
 * @module
 */

import {
  type Adapter,
  type ByteChannel,
  ChildStartError,
  LENDING_READ_BYTES,
  type SpawnedChild,
} from "../core/adapter.ts";
import { concatBytes, type StreamFd } from "../core/frame.ts";
import { writeBatches } from "../core/frame_writer.ts";
import { admitRun } from "./_deno_permissions.ts";
import { exitBySignal } from "../core/signals.ts";
import { groupIdTaken, killOwnGroup, orphanKiller, ownProcess, vouchFor } from "./_process.ts";
import { releasePumps, StreamPump } from "./_stream_pump.ts";
import type { PendingWorker } from "./_unix_handshake.ts";

/**
 * The unix-socket handshake, loaded by the first worker start or connection that uses it rather than with this
 * adapter, which every host imports.
 */
let unixModule: typeof import("./_unix_handshake.ts") | undefined;

async function loadUnix(): Promise<typeof import("./_unix_handshake.ts")> {
  unixModule ??= await import("./_unix_handshake.ts");
  return unixModule;
}

/**
 * A {@linkcode ByteChannel} over a `Deno.Conn`; `initial` holds bytes read past the handshake. It reads
 * into one buffer it reuses, so its chunks are lent ({@linkcode ByteChannel.lendsChunks}).
 */
function connChannel(conn: Deno.Conn, initial: Uint8Array): ByteChannel {
  let writing: Promise<void> = Promise.resolve();
  let closed = false;
  const closeConn = () => {
    closed = true;
    closeQuietly(conn);
  };
  return {
    lendsChunks: true,
    start(receiver) {
      void (async () => {
        let failure: Error | undefined;
        try {
          if (initial.byteLength > 0) receiver.data(initial);
          const buffer = new Uint8Array(LENDING_READ_BYTES);
          while (true) {
            // The rest of a large frame is read straight into its payload, not copied out of `buffer`.
            const into = receiver.readTarget?.() ?? buffer;
            const n = await conn.read(into);
            if (n === null) break;
            receiver.data(into.subarray(0, n));
          }
        } catch (error) {
          if (!closed) failure = error as Error;
        }
        closeConn();
        receiver.close(failure);
      })();
    },
    write(parts) {
      if (closed) return;
      const batches = writeBatches(parts);
      writing = writing.then(async () => {
        for (const data of batches) {
          let offset = 0;
          while (offset < data.byteLength && !closed) offset += await conn.write(data.subarray(offset));
        }
      }).catch(() => {});
    },
    close() {
      if (!closed) closeConn();
    },
    ref: () => conn.ref(),
    unref: () => conn.unref(),
  };
}

function closeQuietly(conn: Deno.Conn): void {
  try {
    conn.close();
  } catch {
    // Closed already.
  }
}

/** Reads the secret's worth of bytes from a new connection; returns them and anything read past them. */
async function readSecret(conn: Deno.Conn): Promise<{ head: Uint8Array; rest: Uint8Array }> {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const { SECRET_BYTES } = unixModule!;
  while (total < SECRET_BYTES) {
    const buffer = new Uint8Array(4096); // the secret is 32 bytes; what follows it is read by the channel
    const n = await conn.read(buffer);
    if (n === null) break;
    chunks.push(buffer.subarray(0, n));
    total += n;
  }
  const all = concatBytes(chunks, total);
  return { head: all.subarray(0, SECRET_BYTES), rest: all.subarray(SECRET_BYTES) };
}

/**
 * Calls `callback` after `ms` unless the returned function is called first, without keeping the process alive: the
 * timeout of an `Atomics.waitAsync`, which `Atomics.notify` cancels. Deno's own `setTimeout` is Node's, whose first
 * call loads Deno's Node timers (3-4 ms of a script's first command).
 */
function unrefTimer(ms: number, callback: () => void): () => void {
  const cell = new Int32Array(new SharedArrayBuffer(4));
  const waiting = Atomics.waitAsync(cell, 0, 0, ms);
  let cancelled = false;
  const fire = () => {
    if (!cancelled) callback();
  };
  if (waiting.async) void waiting.value.then(fire);
  else queueMicrotask(fire);
  return () => {
    cancelled = true;
    Atomics.notify(cell, 0);
  };
}

/**
 * The Deno host's listener. Deno's node:net sockets are inherited by `Deno.Command` children (no
 * close-on-exec), so the Deno host listens with `Deno.listen`, whose sockets are not.
 */
/** Whether this host may make, read and remove a socket file in the temporary directory without asking. */
function mayUseFiles(): boolean {
  const read = Deno.permissions.querySync({ name: "read" });
  const write = Deno.permissions.querySync({ name: "write" });
  return read.state === "granted" && !read.partial && write.state === "granted" && !write.partial;
}

function listenForWorker(): PendingWorker {
  const { newSecret, pendingWorker, privateSocketPath } = unixModule!;
  // A socket file in a 0700 directory where this host may make one (no other user can reach it, so no flood of
  // theirs can touch the start); else, on Linux, an abstract name, which needs no file access.
  const { path, dir } = privateSocketPath(Deno.build.os === "linux" && !mayUseFiles());
  let listener: Deno.UnixListener;
  try {
    listener = Deno.listen({ transport: "unix", path });
  } catch (error) {
    if (dir !== undefined) Deno.removeSync(dir, { recursive: true });
    throw error;
  }
  let closed = false;
  return pendingWorker<Deno.Conn>(path, newSecret(), {
    async listen(onConnection) {
      while (!closed) {
        try {
          onConnection(await listener.accept());
        } catch {
          // Closed, or an accept that failed (EMFILE under a flood): the loop goes on until the listener is closed.
          if (!closed) await new Promise((resolve) => setTimeout(resolve, 10));
        }
      }
    },
    readSecret,
    accepted: connChannel,
    timer: unrefTimer,
    drop: closeQuietly,
    close() {
      closed = true;
      listener.close();
      if (dir !== undefined) Deno.removeSync(dir, { recursive: true });
    },
  });
}

/** The Deno runtime adapter. */
export const denoAdapter: Adapter = {
  runtime: "deno",
  socketpair: { host: false, worker: false },

  admit: admitRun,

  workerArgs(entry) {
    return [
      "run",
      "--quiet",
      "--no-prompt",
      "--no-config",
      "--no-lock",
      // The least a worker needs: to spawn (and signal) commands, to reach the host's unix socket (and, for a socket
      // file, that one path: withSocketAccess), and to read and then remove its own two variables. Commands inherit the
      // environment regardless.
      "--allow-run",
      "--allow-net",
      "--allow-env=SPAWNPOOL_CHANNEL,SPAWNPOOL_BOOTSTRAP,NODE_CHANNEL_FD",
      // To tell whether a reaped command's group id has been taken by another process before signalling it.
      "--allow-read=/proc",
      // Loaded from a URL (JSR): the worker imports its modules from the same host.
      ...(/^https?:/.test(entry) ? [`--allow-import=${new URL(entry).host}`] : []),
      entry,
    ];
  },

  async startWorker(launch) {
    const { BOOTSTRAP_VARIABLE, handshake, withSocketAccess } = await loadUnix();
    const pending = listenForWorker();
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command(launch.execPath, {
        args: launch.runtime === "deno" ? withSocketAccess(launch.args, pending.path) : launch.args,
        env: { ...launch.env, SPAWNPOOL_CHANNEL: "unix", [BOOTSTRAP_VARIABLE]: pending.bootstrap },
        detached: launch.ownGroup,
        stdin: "null",
        stdout: "inherit",
        stderr: "inherit",
      }).spawn();
    } catch (error) {
      pending.close();
      throw error;
    }
    const exited = child.status.then(() => {});
    const channel = await handshake(pending, { exited, kill: () => child.kill("SIGKILL") });
    return {
      pid: child.pid,
      channel,
      exited,
      kill: (signal = "SIGTERM") => {
        try {
          child.kill(signal as Deno.Signal);
        } catch {
          // Exited already (Deno throws where node and bun return false).
        }
      },
      vouch: vouchFor(child.pid),
      killOrphans: orphanKiller(launch.ownGroup, child.pid, launch.cgroup),
      ref: () => child.ref(),
      unref: () => child.unref(),
    };
  },

  connectToHost(kind) {
    // Deno's spawn would leak an inherited fd 3 into every command, so a Deno worker always uses "unix".
    if (kind !== "unix") return Promise.reject(new Error(`A Deno worker cannot use the "${kind}" channel`));
    return loadUnix().then(({ connectFromBootstrap }) =>
      connectFromBootstrap(async (path) =>
        connChannel(await Deno.connect({ transport: "unix", path }), new Uint8Array(0))
      )
    );
  },

  spawn(request, events, inHost) {
    if (request.argv0 !== undefined) {
      throw new ChildStartError({
        code: "ENOTSUP",
        message: "argv0 is not supported by Deno workers; use bun or node workers",
      });
    }
    const ownGroup = request.group || request.detached === true;
    const child = new Deno.Command(request.cmd, {
      args: request.args,
      cwd: request.cwd,
      env: request.env,
      clearEnv: request.clearEnv,
      // Stdin "inherit" reads nothing: a worker has no terminal to share.
      stdin: request.stdin === "piped" ? "piped" : "null",
      stdout: request.stdout,
      stderr: request.stderr,
      uid: request.uid,
      gid: request.gid,
      // A session of its own costs Deno its posix_spawn fast path: it forks, at about 20 times the CPU per
      // spawn (`deno run -A bench/spawn_cost.ts`), so only commands whose group is signalled get one (the request's
      // `group`: a timeout kills the group), and `detached` ones, which must outlive the worker. The others stay in the worker's own group,
      // which `killOwnGroup` ends.
      detached: ownGroup,
    }).spawn();
    const pumps: [undefined, StreamPump | undefined, StreamPump | undefined] = [undefined, undefined, undefined];
    if (request.stdout === "piped") {
      pumps[1] = new StreamPump(child.stdout, (chunk) => events.data(1, chunk), () => events.end(1));
    }
    if (request.stderr === "piped") {
      pumps[2] = new StreamPump(child.stderr, (chunk) => events.data(2, chunk), () => events.end(2));
    }
    const stdin = request.stdin === "piped" ? child.stdin.getWriter() : undefined;
    let reaped = false;
    void child.status.then(
      (status) => events.exit(status.signal ? null : status.code, status.signal),
      (error) => {
        // Deno rejects the status of a child ended by a signal it has no name for ("Invalid signal: 36").
        const signal = /Invalid signal: (\d+)/.exec(String((error as Error)?.message))?.[1];
        const exit = signal === undefined ? { code: 1, signal: null } : exitBySignal(Number(signal));
        events.exit(exit.code, exit.signal);
      },
    ).finally(() => {
      reaped = true;
      // The command is gone: its stdin pipe goes now, as Node's ChildProcess destroys stdin at exit, rather than
      // whenever the collector finds the writer (a worker held tens of dead commands' pipes that way).
      stdin?.abort().catch(() => {});
    });
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
        // Without a group of its own, the command is in the worker's group: `killOwnGroup` ends it on stop. Once Deno
        // has reaped it, its group is signalled only while no new process has its pid (groupIdTaken).
        if (group && ownGroup) {
          if (!reaped || !groupIdTaken(pid)) Deno.kill(-pid, signal as Deno.Signal);
        } else {
          child.kill(signal as Deno.Signal);
        }
      },
      pause: (fd: StreamFd) => pumps[fd]?.pause(),
      resume: (fd: StreamFd) => pumps[fd]?.resume(),
      release: (fd?: StreamFd) => releasePumps(pumps, fd),
      // Its output being read included (Deno's unref covers the child's pipes).
      keepAlive: inHost ? (on) => on ? child.ref() : child.unref() : undefined,
    };
    return Promise.resolve(controls);
  },

  unrefTimer,

  ...ownProcess,
  // The host started this worker as a group leader: the group's id is our pid. SIGKILL ends the commands
  // in it, their children, and this process. (Started by hand, it leads no group: nothing to kill.)
  killOwnGroup,
};

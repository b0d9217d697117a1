/**
 * The Node adapter: workers are started with `node:child_process` and handed one end of a unix socket pair on fd 3
 * (a pool's first worker the pair libuv makes for an extra `"pipe"`, the others a connected pair whose host end reads
 * through `onread`); commands are spawned with `child_process.spawn`.
 *
 * @module
 */

import type { ChildProcess } from "node:child_process";
import type { Socket } from "node:net";
import type { Adapter, SpawnedChild } from "../core/adapter.ts";
import type { StdioMode, StreamFd } from "../core/frame.ts";
import { commandEnv, groupIdTaken, orphanKiller, ownProcess, vouchFor } from "./_process.ts";
import { lendingSocketChannel, socketChannel } from "./_socket_channel.ts";
import { system } from "./_system.ts";

let childProcessModule: typeof import("node:child_process") | undefined;

/**
 * `node:child_process`, loaded by the first worker or command that needs it rather than with this adapter: every host
 * imports it (a Node worker's arguments come from here), and a Bun or Deno host that never starts a Node worker would
 * otherwise load node:child_process for nothing (on Bun about half of spawnpool's module load: bench/cold_start.mjs).
 * Through `process.getBuiltinModule`, at once: an `import()` would cost a Node host's first worker a turn of the event
 * loop. `node:net` is a Node worker's alone (its fd 3, `connectToHost`): a host's workers get their sockets from
 * node:child_process and the listener module, and Node's ES module of `node:net` costs a host's first command 0.3-0.5
 * ms (bench/first_use.mjs).
 */
function childProcess(): typeof import("node:child_process") {
  return childProcessModule ??= (globalThis as unknown as { process: NodeJS.Process }).process.getBuiltinModule(
    "node:child_process",
  ) as typeof import("node:child_process");
}

/** The unix-socket handshake and the `node:net` listener: for the unix channel, and for the pair a worker's fd 3 is. */
function loadUnix(): Promise<[typeof import("./_unix_handshake.ts"), typeof import("./_net_listener.ts")]> {
  return Promise.all([import("./_unix_handshake.ts"), import("./_net_listener.ts")]);
}

type NodeStdio = "pipe" | "inherit" | "ignore";

/**
 * A Node worker collects its garbage before a spawn once this many bytes of command output and stdin have
 * gone through it since the last collection.
 *
 * `child_process.spawn` forks, and a fork copies the worker's page tables: the larger the worker, the slower
 * every spawn (`node bench/node_spawn_rss.mjs`). Each 64 KB pipe read is a fresh buffer outside the JavaScript
 * heap, and V8 only collects such buffers once tens of MB of them have piled up, so without help a worker
 * that relays output grows by that much, and its spawns slow down with it (`npm run build && node
 * bench/node_worker_gc.ts` shows both). A full collection every few MB keeps the worker small. It runs just
 * before a spawn, where it saves a fork's copying; a worker that only streams one long command never pays it.
 */
const NODE_WORKER_GC_BYTES = 8 * 1024 * 1024;

/** The garbage collector, in a Node worker (started with `--expose-gc`); undefined anywhere else. */
const collectGarbage = (globalThis as { gc?: (options: { type: "major" }) => void }).gc;
let uncollectedBytes = 0;

/** Counts bytes that will be garbage once relayed. */
function relayed(bytes: number): void {
  uncollectedBytes += bytes;
}

/** Collects the garbage before a fork, once enough has been relayed since the last collection. */
function collectBeforeFork(): void {
  if (collectGarbage === undefined || uncollectedBytes < NODE_WORKER_GC_BYTES) return;
  uncollectedBytes = 0;
  collectGarbage({ type: "major" });
}

/** Maps a pooled stdio mode to node's. Stdin "inherit" reads nothing: a worker has no terminal to share. */
export function nodeStdio(mode: StdioMode, isStdin: boolean): NodeStdio {
  if (mode === "piped") return "pipe";
  return mode === "inherit" && !isStdin ? "inherit" : "ignore";
}

/**
 * Resolves once `child` has spawned; rejects with the 'error' node reports if it could not. (Node throws most
 * spawn errors, ENOTDIR, E2BIG, EPERM, ..., from `spawn` itself, and reports only a few, such as ENOENT and
 * EACCES, this way.)
 */
export function whenSpawned(child: ChildProcess): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("error", reject);
    child.once("spawn", () => {
      child.off("error", reject);
      resolve();
    });
  });
}

/** The Node runtime adapter. */
export const nodeAdapter: Adapter = {
  runtime: "node",
  socketpair: { host: true, worker: true },

  workerArgs(entry) {
    return [
      "--disable-warning=ExperimentalWarning",
      // V8 posts no background tasks: process.exit() can deadlock when a background compile waits for a
      // collection the exiting main thread never runs (nodejs/node#54918), and the worker would never exit.
      "--single-threaded",
      "--expose-gc", // for NODE_WORKER_GC_BYTES
      entry,
    ];
  },

  async startWorker(launch) {
    const { spawn } = childProcess();
    const [unix, listener] = launch.channel === "unix" || !launch.first ? await loadUnix() : [];
    const pending = launch.channel === "unix" ? await listener!.listenForWorker() : undefined;
    // The fd 3 channel. A pool's first worker gets the unix socketpair libuv makes for an extra "pipe", ready about
    // 4 ms sooner on a script's first command; the others a connected pair whose host end reads into one reused
    // buffer, which costs the host less per request (about 60-90 µs less per 163 KB of output: docs/how-it-works.md).
    const lending = pending || launch.first ? undefined : lendingSocketChannel();
    const pair = lending && { lending, ...await listener!.connectedPair(lending.onread) };
    const abandon = () => {
      pending?.close();
      pair?.host.destroy();
    };
    let child;
    try {
      const args = pending && launch.runtime === "deno"
        ? unix!.withSocketAccess(launch.args, pending.path)
        : launch.args;
      child = spawn(launch.execPath, args, {
        stdio: pending
          ? ["ignore", "inherit", "inherit"]
          : ["ignore", "inherit", "inherit", pair ? pair.worker : "pipe"],
        env: {
          ...system.environment(),
          ...launch.env,
          SPAWNPOOL_CHANNEL: launch.channel,
          ...(pending && { [unix!.BOOTSTRAP_VARIABLE]: pending.bootstrap }),
        },
        detached: launch.ownGroup,
      });
    } catch (error) {
      abandon();
      throw error;
    } finally {
      pair?.worker.destroy(); // the worker has its own copy, or there is no worker
    }
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    try {
      await whenSpawned(child);
    } catch (error) {
      abandon();
      child.stdio?.[3]?.destroy(); // no stdio at all when the spawn failed early (EMFILE)
      throw error;
    }
    const channel = pending
      ? await unix!.handshake(pending, { exited, kill: () => child.kill("SIGKILL") })
      : pair
      ? pair.lending.attach(pair.host)
      : socketChannel(child.stdio[3] as Socket);
    return {
      pid: child.pid!,
      channel,
      exited,
      kill: (signal = "SIGTERM") => void child.kill(signal as NodeJS.Signals),
      vouch: vouchFor(child.pid!),
      killOrphans: orphanKiller(launch.ownGroup, child.pid!, launch.cgroup),
      ref: () => child.ref(),
      unref: () => child.unref(),
    };
  },

  async connectToHost(kind) {
    if (kind === "unix") {
      const [unix, listener] = await loadUnix();
      return unix.connectFromBootstrap(listener.openSocketChannel);
    }
    const net = await import("node:net");
    return socketChannel(new net.Socket({ fd: 3, readable: true, writable: true }));
  },

  async spawn(request, events, inHost) {
    const { spawn } = childProcess();
    // Every command in a worker gets a session of its own (a group kill reaches its descendants, and a dying
    // worker's commands are found by group); in the host, only those that ask for one.
    const ownGroup = !inHost || request.group || request.detached === true;
    collectBeforeFork();
    // Node throws most spawn errors here and reports a few as 'error' (`whenSpawned`): both reject this call.
    const child = spawn(request.cmd, request.args, {
      cwd: request.cwd,
      env: commandEnv(request),
      stdio: [nodeStdio(request.stdin, true), nodeStdio(request.stdout, false), nodeStdio(request.stderr, false)],
      argv0: request.argv0,
      uid: request.uid,
      gid: request.gid,
      detached: ownGroup,
    });
    child.stdin?.on("error", () => {});
    await whenSpawned(child);
    const streams = [undefined, child.stdout, child.stderr] as const;
    for (const fd of [1, 2] as const) {
      const stream = streams[fd];
      if (stream === null || stream === undefined) continue;
      stream.on("data", (chunk: Uint8Array) => {
        events.data(fd, chunk);
        relayed(chunk.byteLength);
      });
      stream.on("end", () => events.end(fd));
    }
    child.once("exit", (code, signal) => events.exit(code, signal));
    const pid = child.pid!;
    const controls: SpawnedChild = {
      pid,
      write(chunk) {
        const stdin = child.stdin;
        if (stdin === null || stdin.destroyed) return Promise.resolve(false);
        relayed(chunk.byteLength);
        return new Promise((resolve) => stdin.write(chunk, (error) => resolve(!error)));
      },
      closeStdin() {
        child.stdin?.end();
      },
      kill(signal, group) {
        // Once Node has reaped the command, neither its pid nor (once a new process has that pid) its group is its.
        const reaped = child.exitCode !== null || child.signalCode !== null;
        if (!(group && ownGroup)) {
          if (!reaped) system.kill(pid, signal);
          return;
        }
        if (!reaped || !groupIdTaken(pid)) system.kill(-pid, signal);
      },
      pause(fd: StreamFd) {
        streams[fd]?.pause();
      },
      resume(fd: StreamFd) {
        streams[fd]?.resume();
      },
      release(fd?: StreamFd) {
        if (fd !== 2) child.stdout?.destroy();
        if (fd !== 1) child.stderr?.destroy();
      },
      keepAlive: inHost
        ? (on) => {
          for (const handle of [child, child.stdin, child.stdout, child.stderr]) {
            (handle as { ref?(): void; unref?(): void } | null)?.[on ? "ref" : "unref"]?.();
          }
        }
        : undefined,
    };
    return controls;
  },

  ...ownProcess,
};

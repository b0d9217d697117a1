/**
 * The Bun adapter: workers are started with `Bun.spawn` and handed a socketpair on fd 3, which both ends
 * drive through Bun's own socket API, as a Bun worker also does on a Deno host's unix socket; commands are
 * spawned with `Bun.spawn`.
 *
 * @module
 */

import type { Adapter, SpawnedChild } from "../core/adapter.ts";
import type { StdioMode, StreamFd } from "../core/frame.ts";
import type { ResourceUsage } from "../core/usage.ts";
import { exitBySignal } from "../core/signals.ts";
import { commandEnv, groupIdTaken, orphanKiller, ownProcess, vouchFor } from "./_process.ts";
import { system } from "./_system.ts";
import { bunSocketChannel } from "./_bun_socket_channel.ts";
import { releasePumps, StreamPump } from "./_stream_pump.ts";

type BunStdio = "pipe" | "inherit" | "ignore";

/** The options this adapter gives `Bun.spawn`. */
interface BunSpawnOptions {
  cmd: string[];
  cwd?: string;
  env?: Record<string, string | undefined>;
  /** Bun's other form of stdio: `[stdin, stdout, stderr, ...]`; a fourth "pipe" is a socketpair on fd 3. */
  stdio?: BunStdio[];
  stdin?: BunStdio;
  stdout?: BunStdio;
  stderr?: BunStdio;
  argv0?: string;
  uid?: number;
  gid?: number;
  detached?: boolean;
}

/** A child's stdin where it is piped, as Bun's `FileSink`: `write`, `flush` and `end` wait when the pipe is full. */
interface BunFileSink {
  write(chunk: string | Uint8Array): number | Promise<number>;
  flush(): number | Promise<number>;
  end(): number | Promise<number>;
  ref(): void;
  unref(): void;
}

/** The part of Bun's `Subprocess` this adapter uses. */
interface BunSubprocess {
  readonly pid: number;
  readonly stdin: BunFileSink | number | null | undefined;
  readonly stdout: ReadableStream<Uint8Array> | number | null | undefined;
  readonly stderr: ReadableStream<Uint8Array> | number | null | undefined;
  /** Null for the three standard slots; a descriptor for each "pipe" past them. */
  readonly stdio: readonly (number | null)[];
  readonly exited: Promise<number>;
  readonly exitCode: number | null;
  /** A signal's name, or the number of a real-time signal, which has none. */
  readonly signalCode: string | number | null;
  kill(signal?: string | number): void;
  ref(): void;
  unref(): void;
  /** What the process used, once it has exited. */
  resourceUsage?(): ResourceUsage | undefined;
}

/** The part of Bun's global this adapter uses: typed here, so that the library type-checks without bun-types. */
interface BunSpawner {
  spawn(options: BunSpawnOptions): BunSubprocess;
}

/** Bun's global; this adapter runs only in Bun. */
function bun(): BunSpawner {
  return (globalThis as unknown as { Bun: BunSpawner }).Bun;
}

function bunStdio(mode: StdioMode, isStdin: boolean): BunStdio {
  if (mode === "piped") return "pipe";
  return mode === "inherit" && !isStdin ? "inherit" : "ignore";
}

/** The Bun runtime adapter. */
export const bunAdapter: Adapter = {
  runtime: "bun",
  socketpair: { host: true, worker: true },

  workerArgs(entry) {
    return [entry];
  },

  async startWorker(launch) {
    // The unix-socket handshake (and the node:net under it) is loaded only by a start that uses it: a Bun host hands
    // its workers a socketpair.
    const [unix, net] = launch.channel === "unix"
      ? await Promise.all([import("./_unix_handshake.ts"), import("./_net_listener.ts")])
      : [];
    const pending = net ? await net.listenForWorker() : undefined;
    let proc;
    try {
      proc = bun().spawn({
        cmd: [
          launch.execPath,
          ...(pending && launch.runtime === "deno" ? unix!.withSocketAccess(launch.args, pending.path) : launch.args),
        ],
        stdio: pending ? ["ignore", "inherit", "inherit"] : ["ignore", "inherit", "inherit", "pipe"],
        env: {
          ...system.environment(),
          ...launch.env,
          SPAWNPOOL_CHANNEL: launch.channel,
          ...(pending && { [unix!.BOOTSTRAP_VARIABLE]: pending.bootstrap }),
        },
        detached: launch.ownGroup,
      });
    } catch (error) {
      pending?.close();
      throw error;
    }
    const exited = proc.exited.then(() => {});
    let channel;
    if (pending) {
      channel = await unix!.handshake(pending, { exited, kill: () => proc.kill("SIGKILL") });
    } else {
      try {
        const fd = proc.stdio[3];
        if (typeof fd !== "number") throw new Error("Bun.spawn gave no fd for the worker channel");
        channel = await bunSocketChannel({ fd });
      } catch (error) {
        proc.kill("SIGKILL");
        throw error;
      }
    }
    return {
      pid: proc.pid,
      channel,
      exited,
      kill: (signal = "SIGTERM") => proc.kill(signal),
      vouch: vouchFor(proc.pid),
      killOrphans: orphanKiller(launch.ownGroup, proc.pid, launch.cgroup),
      ref: () => proc.ref(),
      unref: () => proc.unref(),
    };
  },

  connectToHost(kind) {
    if (kind === "unix") {
      return import("./_unix_handshake.ts").then((unix) =>
        unix.connectFromBootstrap((path) => bunSocketChannel({ unix: path }))
      );
    }
    return bunSocketChannel({ fd: 3 });
  },

  spawn(request, events, inHost) {
    const ownGroup = !inHost || request.group || request.detached === true;
    const proc = bun().spawn({
      cmd: [request.cmd, ...request.args],
      cwd: request.cwd,
      env: commandEnv(request),
      stdin: bunStdio(request.stdin, true),
      stdout: bunStdio(request.stdout, false),
      stderr: bunStdio(request.stderr, false),
      argv0: request.argv0,
      uid: request.uid,
      gid: request.gid,
      // Every command in a worker gets a session of its own (a group kill reaches its descendants, and a dying
      // worker's commands are found by group); in the host, only those that ask for one.
      detached: ownGroup,
    });
    // In the host, `keepAlive` decides whether the command keeps the process alive; Bun's unref reaches the reads of
    // its output only if it comes before they start.
    if (inHost) proc.unref();
    const pumps: [undefined, StreamPump | undefined, StreamPump | undefined] = [undefined, undefined, undefined];
    for (const fd of [1, 2] as const) {
      const stream = fd === 1 ? proc.stdout : proc.stderr;
      if (stream instanceof ReadableStream) {
        pumps[fd] = new StreamPump(stream, (chunk) => events.data(fd, chunk), () => events.end(fd));
      }
    }
    void proc.exited.then(() => {
      const signal = proc.signalCode;
      if (typeof signal !== "number") return events.exit(proc.exitCode, signal);
      const exit = exitBySignal(signal); // Bun gives a real-time signal's number, which has no name
      events.exit(exit.code, exit.signal);
    });
    const stdin = proc.stdin;
    const pid = proc.pid;
    const child: SpawnedChild = {
      pid,
      async write(chunk) {
        if (stdin === undefined || typeof stdin === "number" || stdin === null) return false;
        try {
          // `write` returns a promise when the pipe took only part of the chunk; it rejects (EPIPE) if the child
          // closed its stdin, which must not go unhandled.
          await stdin.write(chunk);
          await stdin.flush();
          return true;
        } catch {
          return false;
        }
      },
      closeStdin() {
        if (stdin !== undefined && stdin !== null && typeof stdin !== "number") {
          try {
            void Promise.resolve(stdin.end()).catch(() => {});
          } catch {
            // Already closed.
          }
        }
      },
      kill(signal, group) {
        if (!(group && ownGroup)) return proc.kill(signal);
        // Once Bun has reaped the command, its group is signalled only while no new process has its pid.
        const reaped = proc.exitCode !== null || proc.signalCode !== null;
        if (!reaped || !groupIdTaken(pid)) system.kill(-pid, signal);
      },
      usage() {
        const used = proc.resourceUsage?.();
        if (used === undefined) return undefined;
        return {
          user: Number(used.cpuTime.user),
          system: Number(used.cpuTime.system),
          maxRSS: used.maxRSS,
          vcsw: used.contextSwitches.voluntary,
          ivcsw: used.contextSwitches.involuntary,
          inblock: used.ops.in,
          oublock: used.ops.out,
          msgsnd: used.messages.sent,
          msgrcv: used.messages.received,
          nsignals: used.signalCount,
          nswap: used.swapCount,
          shm: used.shmSize,
        };
      },
      pause: (fd: StreamFd) => pumps[fd]?.pause(),
      resume: (fd: StreamFd) => pumps[fd]?.resume(),
      release: (fd?: StreamFd) => releasePumps(pumps, fd),
      // Its output being read included (unref'd before the reads began); its stdin has a ref of its own.
      keepAlive: inHost
        ? (on) => {
          if (on) proc.ref();
          else proc.unref();
          if (stdin !== undefined && stdin !== null && typeof stdin !== "number") {
            if (on) stdin.ref();
            else stdin.unref();
          }
        }
        : undefined,
    };
    return Promise.resolve(child);
  },

  ...ownProcess,
};

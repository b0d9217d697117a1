/**
 * The contract every runtime adapter implements. Each file in `adapters/` exports one {@linkcode Adapter};
 * the core only ever sees this interface.
 *
 * @module
 */

import type { Allocate, SpawnRequest, StreamFd, WireSpawnFailure, WireUsage } from "./frame.ts";

/** A runtime that can host a pool or run its workers. */
export type RuntimeName = "deno" | "bun" | "node";

/**
 * What a pool's workers run on: one of the JavaScript runtimes, or `"native"`, the C worker in `native/` that
 * speaks the same protocol.
 */
export type WorkerRuntime = RuntimeName | "native";

/** Receives what arrives on a {@linkcode ByteChannel}. */
export interface ChannelReceiver {
  /**
   * Bytes arrived. The chunk is the receiver's to keep, unless the channel
   * {@linkcode ByteChannel.lendsChunks | lends its chunks}.
   */
  data(chunk: Uint8Array): void;
  /**
   * Where the channel may read the next bytes instead of its own buffer: the rest of a large frame's payload, which a
   * {@linkcode ChannelReceiver.data | data} chunk that is a view of it (from its start) then fills without a copy.
   * Undefined when the next bytes should go to the channel's buffer. A channel that cannot read into a given buffer
   * never calls it.
   */
  readTarget?(): Uint8Array | undefined;
  /** The channel closed; `error` says why when it was not an orderly end. */
  close(error?: Error): void;
}

/** A duplex byte stream between a host and one worker. */
export interface ByteChannel {
  /**
   * The chunks given to {@linkcode ChannelReceiver.data} are valid only during that call: the channel
   * reads into one buffer it reuses. Otherwise the channel never writes to a chunk again.
   */
  readonly lendsChunks?: boolean;
  /**
   * Allocates the buffer a frame's payload arriving in several chunks is assembled in, without zeroing it first
   * where the runtime can ({@linkcode Allocate}: never a pool's slice, as the payload is handed on as the
   * owner's). `new Uint8Array(length)` when absent.
   */
  readonly allocate?: Allocate;
  /** Starts delivering bytes to `receiver`. Called once. */
  start(receiver: ChannelReceiver): void;
  /** Writes the chunks in order, as one vectored write where the transport allows. */
  write(chunks: readonly Uint8Array[]): void;
  /** Closes the channel; the receiver's `close` is called. */
  close(): void;
  /** Lets the channel keep the process alive. */
  ref(): void;
  /** Stops the channel keeping the process alive. */
  unref(): void;
}

/** The read buffer of a lending channel: more than a unix socket delivers in one read (about 208 KiB). */
export const LENDING_READ_BYTES: number = 256 * 1024;

/** How a host should start a worker process. */
export interface WorkerLaunch {
  /** The worker's runtime. */
  runtime: WorkerRuntime;
  /** Program to execute. */
  execPath: string;
  /** Full argument list after the program (runtime flags, the entry script). */
  args: string[];
  /** How the worker reaches the host. */
  channel: ChannelKind;
  /** Variables the worker gets on top of the host's environment (a native worker's `SPAWNPOOL_CGROUP`). */
  env?: Readonly<Record<string, string>>;
  /** The pool's cgroup, in which a native worker makes a leaf per command (the host removes them if it dies). */
  cgroup?: string;
  /**
   * Start the worker as the leader of a process group of its own, which the commands it spawns without a
   * group of their own join: the worker (or the host, if the worker dies) can then kill them all at once.
   */
  ownGroup: boolean;
  /**
   * No other worker of the pool runs or starts: its requests wait for this one (a script's first command, say), or run
   * in the host meanwhile (`startInHost`). An adapter may then pick the channel that is ready soonest over the one that
   * costs the host least per request (the Node adapter does).
   */
  first?: boolean;
}

/** A command the host has seen to be its worker's child: its pid and its start time then (/proc's `starttime`). */
export interface ChildProof {
  readonly pid: number;
  readonly start: string;
  /** A killTree command's: the whole tree below it is killed, not only its process group. */
  readonly tree?: boolean;
}

/** A started worker process and its channel, as the host sees it. */
export interface WorkerProcess {
  /** The worker's process id. */
  readonly pid: number;
  /** The authenticated channel to the worker. */
  readonly channel: ByteChannel;
  /** Resolves when the worker process has exited. */
  readonly exited: Promise<void>;
  /** Kills the worker process; does nothing (never throws) once it has exited. */
  kill(signal?: string): void;
  /**
   * Whether `pid`, which the worker reported as a command it started, is a child of the worker (Linux: its parent in
   * /proc is the worker): its start time as /proc gives it (which {@linkcode WorkerProcess.killOrphans} checks again
   * before it signals anything), `false` for a live process that is not the worker's child (the worker lied), or
   * undefined where that cannot be told (no /proc, no permission to read it, the process already reaped). Absent: never
   * told (the worker loop in the host, whose commands it kills itself).
   */
  vouch?(pid: number): string | false | undefined;
  /**
   * SIGKILLs what a dead or broken worker may have left running: the process group of each command in
   * `children` (those {@linkcode WorkerProcess.vouch} vouched for, each still the process that started then), and the
   * worker's own group when it was started as a group leader (`WorkerLaunch.ownGroup`).
   */
  killOrphans(children: readonly ChildProof[]): void;

  /** Lets the worker process keep the host alive. */
  ref(): void;
  /** Stops the worker process keeping the host alive. */
  unref(): void;
  /**
   * Set for the worker loop run inside the host ({@linkcode Platform.inHost}): it says hello at once, so no timer
   * waits for that (a Deno process's first timer loads Deno's Node timers, 3-4 ms that a one-command script would pay).
   */
  readonly local?: boolean;
}

/** Events a spawned child reports to the worker loop. */
export interface ChildEvents {
  /** The child wrote bytes to stdout (1) or stderr (2). */
  data(fd: StreamFd, chunk: Uint8Array): void;
  /**
   * A piped stream of the child reached its end. It may come while the stream is paused; the worker loop
   * sends it after any output it still holds.
   */
  end(fd: StreamFd): void;
  /** The child exited. */
  exit(code: number | null, signal: string | null): void;
}

/** A child process a worker started, as the worker loop drives it. */
export interface SpawnedChild {
  /** The child's process id. */
  readonly pid: number;
  /** Writes to the child's stdin; resolves false when the child has closed it. */
  write(chunk: Uint8Array): Promise<boolean>;
  /** Closes the child's stdin. */
  closeStdin(): void;
  /** Sends a signal to the child, or to its whole process group. */
  kill(signal: string, group: boolean): void;
  /** Stops reading a stream (flow control); the child blocks once its pipe fills. */
  pause(fd: StreamFd): void;
  /** Resumes reading a stream. */
  resume(fd: StreamFd): void;
  /**
   * Stops reading a stream (or both) and closes the worker's end of its pipe: after exit when a
   * grandchild holds it open, or when the host stopped reading.
   */
  release(fd?: StreamFd): void;
  /**
   * Set when spawned inside the host (`inHost`): whether the command keeps the host process alive (its exit, its
   * output being read), as a worker process does while the host waits for one of its commands. A command spawned
   * in the host does not until told so.
   */
  keepAlive?(on: boolean): void;
  /** What the child used, once it has exited, where the runtime tells (Bun's `resourceUsage()`); absent elsewhere. */
  usage?(): WireUsage | undefined;
}

/**
 * A child that could not start, as the worker reports it to the host: thrown by {@linkcode Adapter.spawn}, or
 * made from the runtime's own error by {@linkcode asChildStartError}.
 */
export class ChildStartError extends Error {
  /** The failure as it travels to the host. */
  readonly failure: WireSpawnFailure;

  /** Wraps a spawn failure. */
  constructor(failure: WireSpawnFailure) {
    super(failure.message);
    this.name = "ChildStartError";
    this.failure = failure;
  }
}

/**
 * The {@linkcode ChildStartError} a worker reports to its host for whatever an adapter's spawn threw or rejected
 * with: a `ChildStartError` as it is; a runtime's own error by its errno name (its `code`, or the name of a Deno
 * error that has none) and its `errno`.
 */
export function asChildStartError(error: unknown): ChildStartError {
  if (error instanceof ChildStartError) return error;
  const errno = (error as { errno?: unknown })?.errno;
  return new ChildStartError({
    code: errorCode(error),
    errno: typeof errno === "number" ? errno : undefined,
    message: error instanceof Error ? error.message : String(error),
  });
}

/** Maps a runtime's spawn error to an errno name. */
function errorCode(error: unknown): string {
  const code = (error as { code?: unknown })?.code;
  if (typeof code === "string") return code;
  const name = (error as { name?: unknown })?.name;
  if (name === "NotFound") return "ENOENT";
  if (name === "PermissionDenied") return "EACCES";
  if (name === "NotADirectory") return "ENOTDIR";
  return "EUNKNOWN";
}

/** How a worker reaches its host; set by the host in the worker's environment. */
export type ChannelKind = "fd3" | "unix";

/** One runtime's implementation of everything the core cannot do portably. */
export interface Adapter {
  /** The runtime this adapter runs in. */
  readonly runtime: RuntimeName;
  /**
   * Whether this runtime's host can hand a worker a connected unix socket on fd 3 (a socketpair, or a
   * pair the host connected itself), and whether this runtime's worker can use one without leaking it
   * into the commands it spawns.
   */
  readonly socketpair: { host: boolean; worker: boolean };
  /** Host side: the arguments that run `entry` as a worker under this runtime (used for its workers). */
  workerArgs(entry: string): string[];
  /**
   * Host side, optional: applies the host runtime's own rules for starting `request` before it leaves the host,
   * throwing what the runtime's native spawn would throw. A Deno host checks its run permission here: its
   * workers were granted `--allow-run` to spawn anything, so without this check a pool would widen what the
   * user granted. It may rewrite `request.cmd` to the program it checked (a Deno host under a scoped run permission
   * sends the absolute path it found, so that no second lookup can choose another); with `resolve` false (a remote
   * pool, whose programs are found on another machine) it checks the name as given.
   */
  admit?(request: SpawnRequest, resolve?: boolean): void;
  /** Host side: starts a worker process and returns it once its channel is connected (and, for "unix", authenticated). */
  startWorker(launch: WorkerLaunch): Promise<WorkerProcess>;
  /** Worker side: opens the channel to the host that started this process. */
  connectToHost(kind: ChannelKind): Promise<ByteChannel>;
  /**
   * Worker side: spawns a command with this runtime's native API. When the command cannot start, it may throw
   * or reject, with the runtime's own error or with a {@linkcode ChildStartError}: the worker loop maps either with
   * {@linkcode asChildStartError}, so an adapter need not catch its runtime's errors. It throws only before the child
   * exists: once started, a child's troubles are reported through `events`.
   *
   * `inHost` is set when the worker loop runs inside the host ({@linkcode Platform.inHost}): a command then gets a
   * process group of its own only when the request asks for one (`group`, `detached`), and otherwise stays in the
   * host's group as with the runtime's own spawn, so that a terminal's Ctrl-C reaches it; a group kill of such a
   * command signals the command alone.
   */
  spawn(request: SpawnRequest, events: ChildEvents, inHost?: boolean): Promise<SpawnedChild>;
  /** Worker side: calls `handler` once when the process is asked to terminate (SIGINT, SIGTERM, SIGHUP). */
  onTerminate(handler: () => void): void;
  /** Worker side: removes a variable from this process's environment so children do not inherit it. */
  deleteEnv(name: string): void;
  /** Worker side: reads a variable of this process's environment. */
  getEnv(name: string): string | undefined;
  /** Worker side: this process's id. */
  pid(): number;
  /** Worker side: ends this process. */
  exit(code: number): never;
  /**
   * Optional: calls `callback` after `ms` unless the returned function is called first, without keeping the process
   * alive, where that is cheaper than `setTimeout`: a Deno process's first `setTimeout` loads Deno's Node timers
   * (3-4 ms), which a host would pay on its first command for a worker's deadlines (its connection, its hello) or,
   * running the command itself, for the stream grace.
   */
  unrefTimer?(ms: number, callback: () => void): () => void;
  /**
   * Worker side, optional: kills every command left in the worker's own process group (and with it the
   * worker) when the worker stops. For runtimes whose commands do not each get a group of their own.
   */
  killOwnGroup?(): void;
}

/** What the pool needs from the world outside the core; supplied by the runtime-detecting entry. */
export interface Platform {
  /** The adapter of the runtime the host runs in. */
  host: Adapter;
  /**
   * How to launch a worker of `runtime` (its executable, arguments and environment); `cgroup` is the pool's (native
   * workers only), the cgroup v2 directory the worker puts its commands in. A promise where the executable must be
   * fetched first (the JSR build's native worker, from npm); its rejection is a failed start.
   */
  launch(runtime: WorkerRuntime, execPath: string | undefined, cgroup?: string): WorkerLaunch | Promise<WorkerLaunch>;
  /** The host's runtime. */
  runtime: RuntimeName;
  /**
   * The failure a spawn of `request` is certain to meet, found cheaply on the host (a program not on PATH, a
   * missing cwd), or undefined when it may start or the host cannot tell.
   */
  preflight?(request: SpawnRequest): WireSpawnFailure | undefined;
  /** Logical cores, for the default size. */
  cores: number;
  /**
   * Whether a native worker for this platform is present (or, for the JSR build on Deno, may be fetched), for a pool
   * given no `runtime`: it then starts native workers, and falls back to the host's runtime if the first does not
   * start or say hello. Checked once per process.
   */
  nativeAvailable?(): boolean;
  /**
   * Calls `handler` when the host process exits (synchronously, as it goes); returns what stops that. Without it a
   * pool's workers still go when the host does, once they see their channel close.
   */
  onExit?(handler: () => void): () => void; /**
   * The worker loop run inside the host, on the host's own adapter, for a pool's first commands (`startInHost`): a
   * {@linkcode WorkerProcess} whose channel is in memory. `takes` says whether a request may run there: never one
   * that needs a process group of its own (the host's commands share its group), nor one the host's adapter runs
   * differently from the pool's workers, nor one with `killTree` or `limits` (the host's runtime cannot give them).
   */

  inHost?: {
    takes(request: SpawnRequest): boolean;
    start(): WorkerProcess;
  };
}

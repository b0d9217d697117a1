/**
 * The `ChildProcess` of a pooled command: its events, streams, kill and ref/unref, in Node's order and timing.
 *
 * @module
 */

import { EventEmitter } from "node:events";
import { setImmediate } from "node:timers";
import type { Readable, Writable } from "node:stream";
import { SpawnError } from "../../core/errors.ts";
import { Execution, type KillScope } from "../../core/execution.ts";
import type { Scheduler } from "../../core/scheduler.ts";
import type { ExceededLimit } from "../../core/limits.ts";
import type { OutputControls, OutputSink } from "../../core/output_stream.ts";
import type { ExitInfo, StreamFd } from "../../core/frame.ts";
import { buildRequest } from "../../core/options.ts";
import { type ResourceUsage, resourceUsage } from "../../core/usage.ts";
import { AbortError, nodeError, nodeSpawnError, validSignal } from "./errors.ts";
import type { PooledSpawn } from "./options.ts";
import { epipe, InputWritable, OutputReadable } from "./streams.ts";

/** Sends a signal to a pooled command's process group, as the pool's timeout does; false once it exited. */
export let killGroup: (child: ChildProcess, signal: string) => boolean;

/**
 * A pooled command, shaped like Node's `ChildProcess`: an `EventEmitter` with `'spawn'`, `'exit'`,
 * `'close'` and `'error'`, Node streams for piped stdio, `pid` once the worker has started the command.
 * Created by {@linkcode spawn}, {@linkcode execFile} and {@linkcode exec}; not constructed directly.
 *
 * @example Events in Node's order
 * ```ts
 * import { spawn } from "@spawnpool/spawnpool/node";
 *
 * const child = spawn("sh", ["-c", "echo hi; exit 2"]);
 * child.on("spawn", () => console.log("spawn", typeof child.pid)); // "spawn" "number"
 * child.stdout!.on("data", (chunk) => console.log(String(chunk))); // "hi\n"
 * child.on("exit", (code, signal) => console.log("exit", code, signal)); // "exit" 2 null
 * child.on("close", (code) => console.log("close", code)); // "close" 2
 * ```
 */
export class ChildProcess extends EventEmitter {
  /** The pid, set once the worker reports it (before `'spawn'`); undefined until then or if it failed. */
  pid: number | undefined = undefined;
  /** The exit code once exited normally; the negative errno if the command could not start. */
  exitCode: number | null = null;
  /** The signal that ended the command. */
  signalCode: NodeJS.Signals | null = null;
  /** Whether `kill()` delivered a signal (or a `timeout` killed the command). */
  killed = false;
  /** Always false: pooled commands have no IPC channel. */
  readonly connected = false;
  /** The program, after `shell` was applied. */
  readonly spawnfile: string;
  /** `argv` of the command: argv0 (or the program) and the arguments, as given. */
  readonly spawnargs: string[];
  /** Stdin, when piped. */
  readonly stdin: Writable | null = null;
  /** Stdout, when piped. */
  readonly stdout: Readable | null = null;
  /** Stderr, when piped. */
  readonly stderr: Readable | null = null;
  /** `[stdin, stdout, stderr]`, then null for each further "ignore" slot. */
  readonly stdio: [
    Writable | null,
    Readable | null,
    Readable | null,
    Readable | Writable | null | undefined,
    Readable | Writable | null | undefined,
  ];

  /** Undefined for a child built with `new ChildProcess()`, which runs nothing. */
  readonly #execution: Execution | undefined;
  /** Sent on abort. */
  readonly #abortSignal: string;
  /** 'close' waits for the exit (or failure) and for each piped output stream to close. */
  #closesNeeded = 1;
  #closesGot = 0;
  /** Exit or failure came: counted once toward 'close'. */
  #settled = false;
  /** Which of its `limits` ended the command, when its worker said so. */
  #limit: ExceededLimit | undefined;
  #spawned = false;
  /**
   * Events that arrived since the worker reported the spawn, held until a later turn of the event loop: in Node
   * no output, `'exit'` or `'close'` comes in the turn that emits `'spawn'`, so code that awaits `'spawn'` (and
   * a few promise hops) before attaching its listeners misses nothing. Undefined outside that window.
   */
  #afterSpawn: Array<() => void> | undefined;
  #unrefed = false;
  #watchingStreams = false;
  #abortPending: AbortSignal | undefined;
  #stdinPending = 0;
  #exitDelivered = false;
  /** The worker reported the exit ('exit' itself comes a macrotask later): a later failure is not the command's. */
  #exitReported = false;
  #flushScheduled = false;
  readonly #outputsEnded = new Set<OutputReadable>();
  /** Outputs written into another command's stdin (stdio given as its stream), not this child's streams. */
  readonly #relayed: OutputReadable[] = [];
  /** This child's own piped outputs (its `stdout` and `stderr` as created: code may replace the public fields). */
  readonly #outputs: OutputReadable[] = [];
  #signal: AbortSignal | undefined;
  readonly #onAbort = (): void => {
    if (this.#spawned) this.#abort(this.#signal!);
    else this.#abortPending = this.#signal;
  };

  /**
   * @internal
   * @param abortSignal What an abort of `spec.signal` sends: `killSignal` for spawn, SIGTERM for execFile and
   * exec (where `killSignal` is for the timeout and maxBuffer only, as in Node).
   */
  constructor(scheduler?: Scheduler, spec?: PooledSpawn, abortSignal?: string) {
    super();
    // `new ChildProcess()`: as in Node, a child with no command yet (code such as execa's builds one to report a
    // command that failed before it started); `kill()` sends nothing. Its `spawn(options)` has no pooled form.
    if (scheduler === undefined || spec === undefined) {
      this.spawnfile = null as unknown as string;
      this.spawnargs = [];
      this.#abortSignal = "SIGTERM";
      this.stdio = [null, null, null, undefined, undefined];
      return;
    }
    this.spawnfile = spec.file;
    this.spawnargs = spec.spawnargs as string[];
    this.#abortSignal = abortSignal ?? spec.killSignal;
    const outputs: [undefined, OutputReadable | undefined, OutputReadable | undefined] = [
      undefined,
      undefined,
      undefined,
    ];
    const request = buildRequest({
      cmd: spec.file,
      args: spec.args,
      cwd: spec.cwd,
      env: spec.env,
      clearEnv: true,
      stdin: spec.stdio[0],
      stdout: spec.stdio[1],
      stderr: spec.stdio[2],
      buffered: false,
      timeout: spec.timeout > 0 ? spec.timeout : undefined,
      killSignal: spec.killSignal,
      argv0: spec.argv0,
      uid: spec.uid,
      gid: spec.gid,
      detached: spec.detached,
      sockets: true, // as Node's 'pipe': a writer whose reader went away gets ECONNRESET, not SIGPIPE
      killTree: spec.killTree,
      limits: spec.limits,
    }, scheduler.defaults);
    // Every event reaches user code in its own microtask, queued as it arrives from the worker, so events
    // keep their order and an exception in a listener is an uncaught exception of the application (as in
    // Node), never a failure of the worker's channel or a rejected promise. What arrives after the spawn,
    // even in the same read as the worker's "spawned", waits for a later turn of the event loop (`#deliver`).
    const sink = (fd: StreamFd, controls: OutputControls): OutputSink => {
      const readable = new OutputReadable(controls);
      outputs[fd] = readable;
      return {
        push: (chunk) => this.#deliver(() => readable.deliver(chunk)),
        end: () => this.#deliver(() => this.#ended(readable)),
        error: () => this.#deliver(() => this.#ended(readable)),
      };
    };
    this.#execution = new Execution(scheduler, request, {
      output: sink,
      events: {
        spawned: (pid) => {
          this.#afterSpawn = [];
          queueMicrotask(() => this.#onSpawn(pid));
          setImmediate(() => {
            const held = this.#afterSpawn!;
            this.#afterSpawn = undefined;
            for (const event of held) queueMicrotask(event);
          });
        },
        // The exit waits for a later macrotask, as in Node, where it comes in a libuv callback of its own after the
        // pipes' last reads: code that reads one output to its end (a few promise hops) and then starts on the
        // other must find it still unread, not resumed into nobody by the exit's flush of unread outputs.
        exited: (info) => {
          this.#exitReported = true;
          setImmediate(() => this.#deliver(() => this.#onExit(info)));
        },
        failed: (error) => this.#deliver(() => this.#onFail(error)),
      },
    });
    const execution = this.#execution;
    const [from, intoOut, intoErr] = spec.relays;
    if (request.stdin === "piped") {
      const stdin = this.#stdinWritable(execution);
      // Until this command's stdin closes: what the other command's output still holds is its own to read. A
      // write after this command exited fails as the other command's own write would, not in this process.
      if (from !== undefined) from.pipe(stdin.on("error", () => {}));
      else this.stdin = stdin;
    }
    // This command's output goes into the other command's stdin; as in Node, it is not this child's stream.
    // 'close' waits until those bytes reached that stdin, as they are in the pipe when a command exits.
    for (const [fd, into] of [[1, intoOut], [2, intoErr]] as const) {
      if (into === undefined) {
        if (outputs[fd] !== undefined) this.#outputs.push(outputs[fd]);
        continue;
      }
      this.#relayed.push(outputs[fd]!);
      this.#closesNeeded++;
      into.relay(outputs[fd]!).then(() => this.#maybeClose());
    }
    this.stdout = intoOut === undefined ? outputs[1] ?? null : null;
    this.stderr = intoErr === undefined ? outputs[2] ?? null : null;
    const stdio: Array<Readable | Writable | null> = [this.stdin, this.stdout, this.stderr];
    for (let i = 0; i < spec.extraStdio; i++) stdio.push(null);
    this.stdio = stdio as ChildProcess["stdio"];
    for (const stream of this.#outputs) {
      this.#closesNeeded++;
      stream.on("close", () => this.#maybeClose());
    }
    const signal = spec.signal;
    if (signal !== undefined) {
      this.#signal = signal;
      if (signal.aborted) this.#abortPending = signal;
      else signal.addEventListener("abort", this.#onAbort, { once: true });
    }
  }

  /**
   * Sends a signal to the command.
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @returns True if the signal was sent (or queued until the command starts); false once it exited.
   * @throws {TypeError} For an unknown signal (`ERR_UNKNOWN_SIGNAL`).
   */
  kill(signal?: NodeJS.Signals | number): boolean {
    return this.#send(signal === 0 ? "0" : validSignal(signal === undefined ? "SIGTERM" : signal), "pid");
  }

  /**
   * Sends a signal to the command and every process it started (an extension): all of them where the command was
   * spawned with `killTree` on a native worker, which keeps them within its reach; otherwise those its worker can
   * still find (a JavaScript worker signals the command's process group).
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @returns True if the signal was sent (or queued until the command starts); false once it exited.
   * @throws {TypeError} For an unknown signal (`ERR_UNKNOWN_SIGNAL`).
   *
   * @example Ending a shell and the jobs it left in the background
   * ```ts ignore
   * import { type ChildProcess, spawn } from "@spawnpool/spawnpool/node";
   *
   * // The drop-in is typed as node:child_process: its extensions need a cast.
   * const options = { killTree: true } as object;
   * const child = spawn("sh", ["-c", "sleep 100 & sleep 100"], options) as unknown as ChildProcess;
   * child.on("exit", (_code, signal) => console.log(signal)); // "SIGTERM"
   * child.killTree(); // true
   * ```
   */
  killTree(signal?: NodeJS.Signals | number): boolean {
    return this.#send(signal === 0 ? "0" : validSignal(signal === undefined ? "SIGTERM" : signal), "tree");
  }

  /**
   * Which of its `limits` ended the command (an extension), once `'exit'` was emitted and when its worker can tell:
   * "cpu", "fileSize", "memory" or "processes"; undefined otherwise.
   */
  get limit(): ExceededLimit | undefined {
    return this.#limit;
  }

  static {
    killGroup = (child, signal) => child.#send(signal, "group");
  }

  /** Sends a signal (a name, or "0" to send none) to the command, its process group or its tree, as `kill()` does. */
  #send(name: string, scope: KillScope): boolean {
    if (this.#settled || this.#execution === undefined) return false;
    if (name !== "0") this.#execution.kill(name, scope);
    this.killed = true;
    return true;
  }

  /**
   * Node's second step after `new ChildProcess()`, starting the command.
   *
   * @throws {TypeError} Always (`ERR_METHOD_NOT_IMPLEMENTED`): pooled children come from `spawn()`, `execFile()`
   * or `exec()`.
   */
  spawn(_options?: unknown): never {
    throw nodeError(
      TypeError,
      "ERR_METHOD_NOT_IMPLEMENTED",
      "ChildProcess.prototype.spawn() is not implemented by spawnpool/node: use spawn(), execFile() or exec()",
    );
  }

  /** Lets the command keep the host alive (the default). */
  ref(): void {
    this.#unrefed = false;
    this.#updateRef();
  }

  /**
   * Lets the host exit while the command runs. As in Node, a piped output still keeps the host alive until
   * it ends, while it is being read or its buffer has room (Node reads a pipe until its buffer is full).
   */
  unref(): void {
    this.#unrefed = true;
    if (!this.#watchingStreams) {
      this.#watchingStreams = true;
      for (const stream of this.#outputs) {
        for (const event of ["pause", "resume", "end", "close"]) stream.on(event, () => this.#updateRef());
        stream.onPressure = () => this.#updateRef();
      }
    }
    this.#updateRef();
  }

  #updateRef(): void {
    const reading = this.#outputs.some((stream) =>
      stream.refed && !stream.destroyed && !stream.readableEnded &&
      (stream.readableFlowing === true || stream.readableLength < stream.readableHighWaterMark)
    );
    if (!this.#unrefed || reading) this.#execution?.ref();
    else this.#execution?.unref();
  }

  /** Queues an event for user code: in its own microtask, or after the spawn's turn while that lasts. */
  #deliver(event: () => void): void {
    if (this.#afterSpawn !== undefined) this.#afterSpawn.push(event);
    else queueMicrotask(event);
  }

  /**
   * What the command used (an extension, shaped as Bun's `Subprocess.resourceUsage()`): set once it has exited, on
   * native and Bun workers; undefined before, and on Node and Deno workers.
   */
  resourceUsage(): ResourceUsage | undefined {
    const usage = this.#execution?.usage;
    return usage === undefined ? undefined : resourceUsage(usage);
  }

  /** Kills the command unless it was already killed, as Node's `ChildProcess[Symbol.dispose]`. */
  [Symbol.dispose](): void {
    if (!this.killed) this.kill();
  }

  #onSpawn(pid: number): void {
    this.#spawned = true;
    this.pid = pid;
    this.emit("spawn");
    const aborted = this.#abortPending;
    this.#abortPending = undefined;
    if (aborted !== undefined) this.#abort(aborted);
  }

  #abort(signal: AbortSignal): void {
    if (this.kill(this.#abortSignal as NodeJS.Signals)) {
      this.emit("error", new AbortError(undefined, { cause: signal.reason }));
    }
  }

  #onExit(info: ExitInfo): void {
    this.#settle();
    const { code, signal, reason } = info;
    this.exitCode = signal === null ? code : null;
    this.signalCode = signal as NodeJS.Signals | null;
    this.#limit = info.limit;
    if (reason === "timeout") this.killed = true;
    // Input still unwritten when the command exited had no reader: EPIPE, as on a real pipe.
    this.stdin?.destroy(this.#stdinPending > 0 ? epipe() : undefined);
    // Nor has an output's write side a reader now (a write into a pipe fails once the command has let go of it).
    for (const output of this.#outputs) output.hangUp();
    this.emit("exit", this.exitCode, this.signalCode);
    this.#exitDelivered = true;
    this.#maybeFlush();
    this.#maybeClose();
  }

  #onFail(error: unknown): void {
    if (this.#exitReported) {
      // The command exited; what failed is only the rest of its output (the pool closed with `drain: false`, its
      // worker died). No 'error' for a command that ran and exited, before or after its 'exit': its outputs have
      // ended (their sinks heard the failure first), and 'exit' and 'close' follow as for any exit.
      return;
    }
    const afterExit = this.#settled;
    this.#settle();
    let reported = error;
    if (error instanceof SpawnError) {
      const failure = nodeSpawnError(error, this.spawnfile, this.spawnargs.slice(1));
      if (failure.errno !== undefined) this.exitCode = failure.errno;
      reported = failure;
    }
    // Nothing ran (or its worker is gone): the streams close without waiting for a reader, and their
    // 'close' events lead to the child's.
    this.stdin?.destroy();
    for (const output of this.#outputs) output.destroy();
    for (const output of this.#relayed) output.destroy();
    this.emit("error", reported);
    if (!afterExit) this.#maybeClose();
  }

  #settle(): void {
    this.#settled = true;
    this.#abortPending = undefined;
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }

  #ended(output: OutputReadable): void {
    output.finish();
    this.#outputsEnded.add(output);
    this.#maybeFlush();
  }

  /**
   * Node flushes unread outputs on the tick after `'exit'`; here that waits until each output's end has arrived
   * too, and a macrotask more. The worker may report the exit before an output's end: code still reading the
   * other output to its end must find this one unread when it gets to it, not resumed into nobody.
   */
  #maybeFlush(): void {
    if (!this.#exitDelivered || this.#flushScheduled) return;
    if (!this.#outputs.every((stream) => stream.destroyed || this.#outputsEnded.has(stream))) return;
    this.#flushScheduled = true;
    setImmediate(() => this.#flushStdio());
  }

  /** After exit, lets output nobody is reading (or that was paused) drain, so `'close'` can follow, as Node does. */
  #flushStdio(): void {
    for (const stream of this.#outputs) if (stream.readable) stream.resume();
  }

  #maybeClose(): void {
    this.#closesGot++;
    if (this.#closesGot === this.#closesNeeded) this.emit("close", this.exitCode, this.signalCode);
  }

  #stdinWritable(execution: Execution): InputWritable {
    const send = (bytes: Uint8Array, callback: (error?: Error | null) => void): void => {
      this.#stdinPending++;
      execution.write(bytes).then((ok) => {
        this.#stdinPending--;
        callback(ok ? null : epipe());
      }, callback);
    };
    return new InputWritable(send, () => execution.endStdin());
  }
}

/**
 * One pooled command as the host sees it, independent of the API shape it was started through:
 * pid, output streams with credit-based flow control, stdin, exit, kill.
 *
 * @module
 */

import { SpawnError, SpawnPoolError } from "./errors.ts";
import {
  concatBytes,
  encodeCredit,
  encodeJson,
  EXIT_TAIL_WINDOWS,
  type ExitInfo,
  FD_PAYLOAD,
  Frame,
  MAX_PAYLOAD_BYTES,
  ProtocolError,
  type SpawnRequest,
  type StreamFd,
  type WireSpawnFailure,
  type WireUsage,
} from "./frame.ts";
import { MAX_TIMER_MS } from "./options.ts";
import { pumpStdin, type StdinSource, writableStdin } from "./stdin.ts";
import {
  type OutputControls,
  type OutputReadableStream,
  type OutputSink,
  type OutputSinkFactory,
  OutputStream,
} from "./output_stream.ts";
import type { RequestChannel, RequestSink } from "./request_sink.ts";
import { Deferred } from "./deferred.ts";
import type { Scheduler, Submission } from "./scheduler.ts";

/** Size of stdin chunks sent to a worker. */
const STDIN_CHUNK_BYTES = 256 * 1024;

/** What a completed execution reports. */
export interface Completion {
  /** Exit status and why the worker stopped the child, if it did. */
  info: ExitInfo;
  /** Collected stdout (buffered requests only; empty otherwise). */
  stdout: Uint8Array;
  /** Collected stderr (buffered requests only; empty otherwise). */
  stderr: Uint8Array;
}

/**
 * How long past a command's timeout and forced kill the host waits for its worker to report the exit before it
 * stops waiting for that worker (`Execution.#overdue`). Generous: a worker on a loaded machine is slow, not stuck.
 */
const BACKSTOP_GRACE_MS = 2000;

/**
 * What a kill signals: the command ("pid"), its process group ("group"), or its whole tree ("tree": every process it
 * started, where its worker can reach them; a command spawned with `killTree` keeps them all within reach).
 */
export type KillScope = "pid" | "group" | "tree";

/** The Kill frame's prefix for each scope. */
const KILL_PREFIX: Readonly<Record<KillScope, string>> = { pid: "", group: "-", tree: "*" };

/** Options of an {@linkcode Execution} beyond its spawn request. */
export interface ExecutionOptions {
  /** Input to pump into stdin (only with `stdin: "piped"`); without it a writable `stdin` is offered. */
  stdinSource?: StdinSource;
  /** Kills the child with SIGTERM when aborted. */
  signal?: AbortSignal;
  /** Makes the sinks of streamed outputs; without it they are web `ReadableStream`s (`stdout`, `stderr`). */
  output?: OutputSinkFactory;
  /** Told of each step as it arrives from the worker, in order with the output sinks' calls. */
  events?: ExecutionEvents;
}

/** Steps of an execution, as they arrive; the promises `spawned`, `exited` and `completed` carry the same. */
export interface ExecutionEvents {
  /** The child started. */
  spawned(pid: number): void;
  /** The child exited (streamed requests: possibly before its streams ended). Always before completion. */
  exited(info: ExitInfo): void;
  /** The request failed: the child could not start, or the pool failed it. */
  failed(error: unknown): void;
}

/** A pooled command in flight. */
export class Execution implements RequestSink, Submission {
  /** The request id on its worker, once a worker took the request (0 before). */
  id = 0;
  /** What was asked of the worker. */
  readonly request: SpawnRequest;
  /** The spawn frame's payload: the request as JSON, encoded once. */
  readonly payload: Uint8Array;
  /** Resolves with the pid once the worker started the child; rejects with a {@linkcode SpawnError} or a pool error. */
  readonly spawned: Promise<number>;
  /** Resolves when the request completed; rejects with a {@linkcode SpawnError} or a pool error. */
  readonly completed: Promise<Completion>;
  /** Stdout, when streamed and piped. */
  readonly stdout: OutputReadableStream | undefined;
  /** Stderr, when streamed and piped. */
  readonly stderr: OutputReadableStream | undefined;
  /** The child's pid once known. */
  pid: number | undefined;
  /** Whether `kill()` sent a signal. */
  killed = false;

  #worker: RequestChannel | undefined;
  #assigned = new Deferred<RequestChannel>();
  #spawned = new Deferred<number>();
  /** Made on first use of `exited`: most callers only await `completed`. */
  #exitedDeferred: Deferred<ExitInfo> | undefined;
  /** Set when the child exited. */
  #exitInfo: ExitInfo | undefined;
  /** What the command used, as its worker last reported it. */
  #usage: WireUsage | undefined;
  #completed = new Deferred<Completion>();
  #outputs: [undefined, OutputSink | undefined, OutputSink | undefined] = [undefined, undefined, undefined];
  #stdin: WritableStream<Uint8Array> | undefined;
  #stdinWritable: boolean;
  #collected: [Uint8Array[], Uint8Array[], Uint8Array[]] = [[], [], []];
  /** Streamed bytes received per stream and not yet credited back: never more than the window a worker may use. */
  #unacked: [number, number, number] = [0, 0, 0];
  /** Buffered bytes received: never more than `maxBuffer`, past which the worker must stop the command. */
  #collectedBytes = 0;
  /** The host's own deadline for a command with a timeout, in case its worker cannot keep it (`#overdue`). */
  #backstop: ReturnType<typeof setTimeout> | undefined;
  #acks: Array<Deferred<boolean>> = [];
  #ref = true;
  #done = false;
  #signal: AbortSignal | undefined;
  #events: ExecutionEvents | undefined;
  #onAbort = (): void => this.kill("SIGTERM");

  /** Creates an execution and submits it to `scheduler`. */
  constructor(scheduler: Scheduler, request: SpawnRequest, options: ExecutionOptions = {}) {
    scheduler.admit?.(request);
    this.request = request;
    this.spawned = this.#spawned.promise;
    this.completed = this.#completed.promise;
    this.#events = options.events;
    const streams: [undefined, OutputStream | undefined, OutputStream | undefined] = [undefined, undefined, undefined];
    if (!request.buffered) {
      for (const fd of [1, 2] as const) {
        if ((fd === 1 ? request.stdout : request.stderr) !== "piped") continue;
        const controls: OutputControls = {
          credit: (bytes) => {
            this.#unacked[fd] = Math.max(0, this.#unacked[fd] - bytes);
            this.#send(Frame.Credit, encodeCredit(fd, bytes));
          },
          release: () => {
            if (!this.#done) this.#send(Frame.Release, FD_PAYLOAD[fd]);
          },
          window: request.window,
        };
        if (options.output !== undefined) this.#outputs[fd] = options.output(fd, controls);
        else this.#outputs[fd] = streams[fd] = new OutputStream(controls);
      }
    }
    this.stdout = streams[1]?.readable;
    this.stderr = streams[2]?.readable;
    this.payload = encodeJson(request);
    if (this.payload.byteLength > MAX_PAYLOAD_BYTES) {
      // Sent, it would end the worker's channel and every command on it: it fails alone, as an exec past the
      // system's limit on arguments would.
      const failure = {
        code: "E2BIG",
        errno: -7,
        message: `Argument list too long: the request's arguments, environment and options take ` +
          `${this.payload.byteLength} bytes, more than a frame's ${MAX_PAYLOAD_BYTES}`,
      };
      this.#stdinWritable = false;
      this.#fail(new SpawnError(failure, request.cmd, request.args));
      return;
    }
    this.#stdinWritable = request.stdin === "piped" && options.stdinSource === undefined;
    if (request.stdin === "piped" && options.stdinSource !== undefined) void pumpStdin(this, options.stdinSource);
    const signal = options.signal;
    if (signal !== undefined) {
      if (signal.aborted) {
        this.#fail(signal.reason);
        return;
      }
      this.#signal = signal;
      signal.addEventListener("abort", this.#onAbort, { once: true });
    }
    scheduler.submit(this);
  }

  /** Called by the scheduler once a worker took the request. */
  assign(worker: RequestChannel): void {
    this.id = worker.begin(this, this.#ref);
    this.#worker = worker;
    this.#assigned.resolve(worker);
    const { timeout, forceKillAfterDelay } = this.request;
    if (timeout !== undefined) {
      const delay = Math.min(timeout + forceKillAfterDelay + BACKSTOP_GRACE_MS, MAX_TIMER_MS);
      this.#backstop = setTimeout(() => this.#overdue(), delay);
      (this.#backstop as { unref?: () => void }).unref?.(); // the request itself keeps the host alive
    }
  }

  /**
   * The worker did not report the exit of a command with a timeout, long after it should have stopped it: a worker
   * that is stopped (SIGSTOP), stuck or broken. The caller is not left waiting on it: the request fails with
   * ERR_TIMEOUT, and the worker is given up on (killed with its commands, this one's group included, and replaced).
   */
  #overdue(): void {
    this.#backstop = undefined;
    if (this.#done || this.#exitInfo !== undefined) return;
    const { cmd, timeout } = this.request;
    this.#fail(
      new SpawnPoolError(
        "ERR_TIMEOUT",
        `Command "${cmd}" timed out (${timeout} ms) and its worker did not stop it; the worker was killed`,
        { command: cmd },
      ),
    );
    this.#worker?.abandon(`did not stop command "${cmd}" ${BACKSTOP_GRACE_MS} ms past its timeout`);
  }

  /**
   * Resolves when the child exited, which for a streamed request may come before its output ended (a
   * grandchild can hold a pipe); rejects with a {@linkcode SpawnError} or a pool error if that never comes.
   */
  get exited(): Promise<ExitInfo> {
    if (this.#exitedDeferred === undefined) {
      // Done without an exit: it failed, and `completed` was rejected with the failure.
      if (this.#done && this.#exitInfo === undefined) return this.#completed.promise as Promise<never>;
      this.#exitedDeferred = new Deferred<ExitInfo>();
      if (this.#exitInfo !== undefined) this.#exitedDeferred.resolve(this.#exitInfo);
    }
    return this.#exitedDeferred.promise;
  }

  /** Sends a signal to the child, its process group or its tree ({@linkcode KillScope}); queued until it exists. */
  kill(signal: string, scope: KillScope = "pid"): void {
    if (this.#done || this.#exitInfo !== undefined) return;
    this.killed = true;
    const text = new TextEncoder().encode(KILL_PREFIX[scope] + signal);
    void this.#assigned.promise.then((worker) => worker.send(Frame.Kill, this.id, text), () => {});
  }

  /** Lets the execution keep the host alive (the default). */
  ref(): void {
    if (this.#ref) return;
    this.#ref = true;
    if (!this.#done) this.#worker?.ref();
  }

  /** Stops the execution keeping the host alive. */
  unref(): void {
    if (!this.#ref) return;
    this.#ref = false;
    if (!this.#done) this.#worker?.unrefRequest();
  }

  /** Fails a queued execution that will never run (pool closed, queue full). */
  reject(error: SpawnPoolError): void {
    this.#fail(error);
  }

  // RequestSink

  /** @internal */
  onSpawned(pid: number): void {
    this.pid = pid;
    this.#spawned.resolve(pid);
    this.#events?.spawned(pid);
  }

  /**
   * What the command used, once its worker reported its exit, where the worker can tell (native and Bun workers);
   * undefined before, and on Node and Deno workers.
   */
  get usage(): WireUsage | undefined {
    return this.#usage;
  }

  /** @internal */
  onExited(info: ExitInfo): void {
    if (info.usage !== undefined) this.#usage = info.usage;
    if (this.#exitInfo !== undefined || this.#done) return;
    this.#exitInfo = info;
    if (this.#backstop !== undefined) clearTimeout(this.#backstop);
    this.#backstop = undefined;
    this.#exitedDeferred?.resolve(info);
    this.#events?.exited(info);
  }

  /** @internal */
  onSpawnError(failure: WireSpawnFailure): void {
    this.#fail(new SpawnError(failure, this.request.cmd, this.request.args));
  }

  /** @internal */
  onData(fd: StreamFd, chunk: Uint8Array): void {
    if (this.#done) return; // late output of a request that already failed
    const stream = this.#outputs[fd];
    if (stream !== undefined) {
      this.#unacked[fd] += chunk.byteLength;
      // Once the command exited, its worker may send a window more: what it left in its pipe (EXIT_TAIL_WINDOWS).
      const allowed = this.request.window * (this.#exitInfo === undefined ? 1 : EXIT_TAIL_WINDOWS);
      if (this.#unacked[fd] > allowed) {
        throw new ProtocolError(
          `Worker sent ${this.#unacked[fd]} bytes of stream ${fd} ahead of credit, past the ${allowed}-byte window`,
        );
      }
      stream.push(chunk);
    } else {
      // Output of a streamed request's stream that is not piped: nobody reads it, and nothing would bound it.
      if (!this.request.buffered) throw new ProtocolError(`Worker sent output of stream ${fd}, which is not piped`);
      this.#checkBuffered(chunk.byteLength);
      this.#collected[fd].push(chunk);
    }
  }

  /** Counts buffered output: a worker that sends more than `maxBuffer` broke the protocol (it must stop there). */
  #checkBuffered(bytes: number): void {
    this.#collectedBytes += bytes;
    const { maxBuffer } = this.request;
    if (maxBuffer !== undefined && this.#collectedBytes > maxBuffer) {
      throw new ProtocolError(`Worker sent ${this.#collectedBytes} bytes of output, past maxBuffer ${maxBuffer}`);
    }
  }

  /** @internal */
  onStreamEnd(fd: StreamFd): void {
    this.#outputs[fd]?.end();
  }

  /** @internal */
  onStdinAck(written: boolean): void {
    this.#acks.shift()?.resolve(written);
  }

  /** @internal */
  onExit(info: ExitInfo, stdout: Uint8Array, stderr: Uint8Array): void {
    if (this.#done) return; // the late end of a request that already failed
    this.#checkBuffered(stdout.byteLength + stderr.byteLength);
    this.#outputs[1]?.end();
    this.#outputs[2]?.end();
    if (stdout.byteLength > 0) this.#collected[1].push(stdout);
    if (stderr.byteLength > 0) this.#collected[2].push(stderr);
    this.onExited(info);
    this.#finish();
    const done = { info, stdout: concatBytes(this.#collected[1]), stderr: concatBytes(this.#collected[2]) };
    this.#collected = [[], [], []];
    this.#completed.resolve(done);
  }

  /** @internal */
  onFail(error: SpawnPoolError): void {
    this.#fail(error);
  }

  #fail(error: unknown): void {
    if (this.#done) return;
    this.#finish();
    this.#outputs[1]?.error(error);
    this.#outputs[2]?.error(error);
    this.#assigned.reject(error);
    this.#spawned.reject(error);
    this.#exitedDeferred?.reject(error); // no effect once it exited
    this.#completed.reject(error);
    this.#events?.failed(error);
  }

  #finish(): void {
    this.#done = true;
    if (this.#backstop !== undefined) clearTimeout(this.#backstop);
    this.#backstop = undefined;
    this.#signal?.removeEventListener("abort", this.#onAbort);
    for (const ack of this.#acks.splice(0)) ack.resolve(false);
    if (this.#ref) this.#worker?.unrefRequest();
  }

  #send(
    type:
      | typeof Frame.Credit
      | typeof Frame.Release
      | typeof Frame.Stdin
      | typeof Frame.StdinEnd
      | typeof Frame.Terminal,
    payload?: Uint8Array,
  ): void {
    if (this.#worker !== undefined) this.#worker.send(type, this.id, payload);
    else void this.#assigned.promise.then((worker) => worker.send(type, this.id, payload), () => {});
  }

  /** Stdin as a web `WritableStream`, when piped without a source (created on first use). */
  get stdin(): WritableStream<Uint8Array> | undefined {
    if (!this.#stdinWritable) return undefined;
    this.#stdin ??= writableStdin(this);
    return this.#stdin;
  }

  /**
   * Writes to the child's stdin (piped, without a source); resolves once the worker has written it,
   * or with false when the child closed its stdin or the request is done. The chunk must not change
   * until then.
   */
  async write(chunk: Uint8Array): Promise<boolean> {
    for (let offset = 0; offset < chunk.byteLength; offset += STDIN_CHUNK_BYTES) {
      if (this.#done) return false;
      const ack = new Deferred<boolean>();
      this.#acks.push(ack);
      this.#send(Frame.Stdin, chunk.subarray(offset, offset + STDIN_CHUNK_BYTES));
      if (!(await ack.promise)) return false;
    }
    return true;
  }

  /** Closes the child's stdin. */
  endStdin(): void {
    if (!this.#done) this.#send(Frame.StdinEnd);
  }

  /** Sends a Terminal frame (a request with `terminal`): `payload` is encodeResize's or encodeRawMode's. */
  control(payload: Uint8Array): void {
    if (!this.#done) this.#send(Frame.Terminal, payload);
  }
}

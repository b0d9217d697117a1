/**
 * The worker's main loop, runtime-neutral: reads spawn requests from the host, runs them through the
 * runtime adapter and streams the children's output back. When the channel closes (the host died or
 * closed the pool) or the worker is told to terminate, every child's process group is killed first.
 *
 * @module
 */

import {
  type Adapter,
  asChildStartError,
  type ByteChannel,
  ChildStartError,
  type RuntimeName,
  type SpawnedChild,
} from "../core/adapter.ts";
import {
  decodeFd,
  decodeU32,
  encodeExit,
  encodeJson,
  encodeU32,
  type ExitInfo,
  Frame,
  FrameDecoder,
  keepBytes,
  PROTOCOL_VERSION,
  ProtocolError,
  type SpawnRequest,
  type StopReason,
} from "../core/frame.ts";
import { FrameWriter } from "../core/frame_writer.ts";
import { setTimer } from "../core/timer.ts";
import { Job, parseRequest, type StdinOp } from "./job.ts";
import { OutputSender } from "./_output_sender.ts";

const STDIN_OK = new Uint8Array([0]);
const STDIN_CLOSED = new Uint8Array([1]);

/** The requests of one channel, and what the worker does for each frame and each child event. */
class Server {
  readonly #adapter: Adapter;
  readonly #writer: FrameWriter;
  readonly #jobs = new Map<number, Job>();
  readonly #channel: ByteChannel;
  /** Whether this loop runs inside the host ({@linkcode serve}'s `inHost`). */
  readonly #inHost: boolean;
  /** Inside the host: whether its commands keep it alive (the host's requests do). */
  #keepAlive = true;
  #stopping = false;
  readonly #output: OutputSender;

  constructor(adapter: Adapter, channel: ByteChannel, inHost: boolean) {
    this.#adapter = adapter;
    this.#channel = channel;
    this.#inHost = inHost;
    const writer = this.#writer = new FrameWriter(channel);
    this.#output = new OutputSender({
      writer,
      // The adapter's unref'd timer where it has one (the job's child and its pipes keep the process alive meanwhile).
      timer: (ms, callback) =>
        adapter.unrefTimer !== undefined ? adapter.unrefTimer(ms, callback) : setTimer(ms, callback),
      finish: (job) => this.#finish(job),
      stopFor: (job, reason, signal) => this.#stopFor(job, reason, signal),
      killGroupForGood: (job) => this.#killGroupForGood(job),
    });
  }

  /** Says hello to the host: the protocol version, this runtime and this process's id. */
  hello(): void {
    const { runtime } = this.#adapter;
    this.#writer.send(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime, pid: this.#adapter.pid() }));
  }

  /**
   * Kills every command but the detached ones (their groups, for good), then exits; inside the host, closes the
   * channel instead and forgets its commands.
   */
  stop(code: number): void {
    if (this.#stopping) return;
    this.#stopping = true;
    for (const job of this.#jobs.values()) {
      if (job.child && !job.request.detached) this.#killGroupForGood(job);
    }
    if (!this.#inHost) {
      this.#adapter.killOwnGroup?.();
      this.#adapter.exit(code);
    }
    for (const job of this.#jobs.values()) {
      for (const timer of job.timers) clearTimeout(timer);
      job.grace?.();
    }
    this.#jobs.clear();
    this.#channel.close();
  }

  /** Inside the host: lets its commands keep it alive, or not. */
  keepAlive(on: boolean): void {
    this.#keepAlive = on;
    for (const job of this.#jobs.values()) job.child?.keepAlive?.(on);
  }

  /** Handles one frame from the host; a ProtocolError closes the channel. */
  onFrame(type: number, id: number, payload: Uint8Array, lent: boolean): void {
    if (type === Frame.Spawn) {
      if (this.#jobs.has(id) || id === 0) throw new ProtocolError(`Request id ${id} is already in use`);
      const job = new Job(id, parseRequest(payload));
      this.#jobs.set(id, job);
      void this.#start(job);
      return;
    }
    const job = this.#jobs.get(id);
    // Frames for requests that already completed are normal (a kill racing an exit): ignore them.
    if (job === undefined) {
      if (type < Frame.Spawn || type > Frame.Terminal) throw new ProtocolError(`Unknown frame type ${type}`);
      return;
    }
    switch (type) {
      case Frame.Stdin:
      case Frame.StdinEnd: {
        const op: StdinOp = type === Frame.Stdin ? keepBytes(payload, lent) : "end";
        if (job.child) this.#writeStdin(job, op);
        else job.early.push(op);
        return;
      }
      case Frame.Kill: {
        const text = new TextDecoder().decode(payload);
        // A tree ("*") is signalled as the process group ("-"), as far as a JavaScript worker reaches: it cannot
        // make a command a subreaper, so what left the group, or was orphaned, is out of its reach.
        const group = text.startsWith("-") || text.startsWith("*");
        const signal = group ? text.slice(1) : text;
        if (job.child) this.#killChild(job, signal, group);
        else job.early.push({ signal, group });
        return;
      }
      case Frame.Release: {
        const fd = decodeFd(payload);
        if (!job.streams[fd].open) return;
        this.#output.closeStream(job, fd, false);
        if (job.child) job.child.release(fd);
        else job.early.push({ release: fd });
        return;
      }
      case Frame.Credit: {
        const fd = decodeFd(payload);
        const stream = job.streams[fd];
        stream.unacked = Math.max(0, stream.unacked - decodeU32(payload, 1));
        if (stream.open) this.#output.sendHeld(job, fd);
        if (job.exit) this.#output.armGrace(job); // its reader is still there: the quiet period starts again
        return;
      }
      case Frame.Terminal:
        return; // no job here has a terminal: refuseNativeOnly failed them
      default:
        throw new ProtocolError(`Unknown frame type ${type}`);
    }
  }

  /** Spawns a job's child; the host hears Spawned (or SpawnError) before any of its output or its exit. */
  async #start(job: Job): Promise<void> {
    const { request } = job;
    // Events the adapter reports before its spawn() promise settles wait here, until `job.child` is set.
    const early: Array<() => void> = [];
    let child: SpawnedChild;
    try {
      refuseNativeOnly(request, this.#adapter.runtime);
      child = await this.#adapter.spawn(request, {
        // Once started (the usual case) output goes straight through, with no closure per chunk.
        data: (fd, chunk) =>
          job.child ? this.#output.onData(job, fd, chunk) : void early.push(() => this.#output.onData(job, fd, chunk)),
        end: (fd) => job.child ? this.#output.onEnd(job, fd) : void early.push(() => this.#output.onEnd(job, fd)),
        exit: (code, signal) =>
          job.child ? this.#onExit(job, code, signal) : void early.push(() => this.#onExit(job, code, signal)),
      }, this.#inHost);
    } catch (error) {
      // Thrown or rejected, the runtime's own error or a ChildStartError: the host hears its failure (SpawnError).
      this.#jobs.delete(job.id);
      this.#writer.send(Frame.SpawnError, job.id, encodeJson(asChildStartError(error).failure));
      return;
    }
    job.child = child;
    child.keepAlive?.(this.#keepAlive);
    if (this.#stopping) {
      // Stopped while the command started (inside the host, which goes on): it goes the way of the others.
      if (!request.detached) this.#killGroupForGood(job);
      return;
    }
    this.#writer.send(Frame.Spawned, job.id, encodeU32(child.pid));
    if (request.timeout !== undefined) {
      job.timers.push(setTimeout(() => this.#stopFor(job, "timeout", request.killSignal), request.timeout));
    }
    for (const event of early) event(); // usually none
    for (const op of job.early) {
      if (op === "end" || op instanceof Uint8Array) this.#writeStdin(job, op);
      else if ("release" in op) child.release(op.release);
      else this.#killChild(job, op.signal, op.group);
    }
    job.early = [];
  }

  #onExit(job: Job, code: number | null, signal: string | null): void {
    job.exit = { code, signal };
    if (!job.request.buffered && job.anyOpen) {
      this.#writer.send(Frame.Exited, job.id, encodeExit(this.#exitInfo(job)));
      // From here its output may run a window further ahead of the host (OutputSender): paused streams resume, and
      // held output whose end had come goes out with that end, which may complete the request here.
      for (const fd of [1, 2] as const) if (job.streams[fd].open) this.#output.sendHeld(job, fd);
      if (this.#jobs.get(job.id) !== job) return;
    }
    this.#output.armGrace(job);
    this.#finish(job);
  }

  /** Sends the Exit frame (with a buffered request's output) once the child exited and both streams closed. */
  #finish(job: Job): void {
    if (!job.exit || job.anyOpen || this.#jobs.get(job.id) !== job) return;
    for (const timer of job.timers) clearTimeout(timer);
    job.grace?.();
    this.#jobs.delete(job.id);
    // Buffered output leaves as the chunks it was read in (views of at most _output_sender.ts MAX_CHUNK_BYTES): no copy here.
    const [, stdout, stderr] = job.streams;
    this.#writer.send(Frame.Exit, job.id, encodeExit(this.#exitInfo(job), stdout.collected, stderr.collected));
  }

  /** A job's exit as the host hears it: status, why the worker stopped it, and what it used where the runtime tells. */
  #exitInfo(job: Job): ExitInfo {
    const info: ExitInfo = { ...job.exit!, reason: job.reason };
    const usage = job.child?.usage?.();
    if (usage !== undefined) info.usage = usage;
    return info;
  }

  #killChild(job: Job, signal: string, group: boolean): void {
    if (job.exit) return;
    try {
      job.child!.kill(signal, group);
    } catch {
      // The child may have exited between the check and the signal.
    }
  }

  /**
   * SIGKILLs a command's group, also after the command exited while a stream of its job is still open: a
   * grandchild in the group may hold it (a process group's id is not reused while a member lives).
   */
  #killGroupForGood(job: Job): void {
    job.forcePending = false;
    // After the exit only a group of its own is left to signal: in the host, the command shares the host's group.
    if (job.exit && (!job.anyOpen || this.#inHost)) return;
    try {
      job.child!.kill("SIGKILL", true);
    } catch {
      // The group is gone.
    }
  }

  /** Stops a command the worker itself gave up on (timeout, maxBuffer): its signal, then SIGKILL after the delay. */
  #stopFor(job: Job, reason: StopReason, signal: string): void {
    if (job.exit || job.reason !== null) return;
    job.reason = reason;
    this.#killChild(job, signal, true);
    job.forcePending = true;
    job.timers.push(setTimeout(() => this.#killGroupForGood(job), job.request.forceKillAfterDelay));
  }

  #writeStdin(job: Job, op: StdinOp): void {
    const child = job.child!;
    if (op === "end") {
      job.stdinChain = job.stdinChain.then(() => child.closeStdin());
      return;
    }
    // A write can finish after the request completed (the child exited with stdin unread): the host has
    // let go of the request by then, so no ack.
    const ack = (ok: boolean) => {
      if (this.#jobs.get(job.id) === job) this.#writer.send(Frame.StdinAck, job.id, ok ? STDIN_OK : STDIN_CLOSED);
    };
    job.stdinChain = job.stdinChain.then(() => child.write(op)).then(ack, () => ack(false));
  }
}

/**
 * Fails a request that needs what only the native worker gives, before the child exists: `killTree` (a subreaper),
 * `limits` (rlimits set between fork and exec) and `terminal` (a pseudo-terminal made the child's controlling
 * terminal), which no JavaScript runtime's spawn offers. Bun's `Terminal` is not used: its `data` callback cannot be
 * paused, so a slow reader could not hold the program back (the worker would buffer its output without bound).
 *
 * @throws {ChildStartError} ENOTSUP, naming the option.
 */
function refuseNativeOnly(request: SpawnRequest, runtime: RuntimeName): void {
  const option = request.killTree === true
    ? "killTree"
    : request.limits !== undefined
    ? "limits"
    : request.terminal !== undefined
    ? "terminal"
    : undefined;
  if (option === undefined) return;
  throw new ChildStartError({
    code: "ENOTSUP",
    message: `${option} is not supported by ${runtime} workers; it needs the native worker ` +
      `(runtime: "native", the default where it is installed)`,
  });
}

/**
 * Serves spawn requests arriving on `channel` until it closes, then kills what is left and exits.
 *
 * @param adapter The runtime adapter of this worker process.
 * @param channel The channel to the host.
 * @param inHost Whether the loop runs inside the host itself (its first commands): it then neither listens for
 *   termination signals nor exits, and its commands stay in the host's process group unless they need one of their
 *   own.
 * @returns What stops the loop (its commands are killed, but the detached ones, and its channel closes), and inside
 *   the host what says whether its commands keep the host alive.
 */
export function serve(
  adapter: Adapter,
  channel: ByteChannel,
  inHost = false,
): { stop(): void; keepAlive(on: boolean): void } {
  const server = new Server(adapter, channel, inHost);
  const decoder = new FrameDecoder(
    (type, id, payload, lent) => server.onFrame(type, id, payload, lent),
    { lent: channel.lendsChunks === true, allocate: channel.allocate },
  );
  channel.start({
    data(chunk) {
      try {
        decoder.push(chunk);
      } catch (error) {
        console.error(`spawnpool worker: ${error instanceof Error ? error.message : error}; closing`);
        server.stop(1);
      }
    },
    close() {
      server.stop(0);
    },
  });
  if (!inHost) adapter.onTerminate(() => server.stop(0));
  server.hello();
  return { stop: () => server.stop(0), keepAlive: (on) => server.keepAlive(on) };
}

/**
 * The worker's main loop, runtime-neutral: reads spawn requests from the host, runs them through the
 * runtime adapter and streams the children's output back. When the channel closes (the host died or
 * closed the pool) or the worker is told to terminate, every child's process group is killed first.
 *
 * @module
 */

import { type Adapter, type ByteChannel, type ChildEvents, type SpawnedChild, spawnFailed } from "../core/adapter.ts";
import {
  decodeFd,
  decodeJson,
  decodeU32,
  encodeExit,
  encodeJson,
  encodeU32,
  FD_PAYLOAD,
  Frame,
  FrameDecoder,
  keepBytes,
  PROTOCOL_VERSION,
  ProtocolError,
  type SpawnRequest,
  type StopReason,
  type StreamFd,
} from "../core/frame.ts";
import { FrameWriter } from "../core/frame_writer.ts";

/**
 * Output travels in frames of at most this many bytes, whatever a runtime read at once: Bun can hand over
 * tens to hundreds of MB in one chunk under load (69-205 MB from `yes` on a busy worker), and one frame of
 * that would pass the host's frame limit and, streamed, its flow-control window. Buffered output is sent
 * ahead rather than let grow past it.
 */
const MAX_CHUNK_BYTES = 1024 * 1024;
/** After exit, how long a piped stream may stay silent before it is released (a grandchild holds it). */
const STREAM_GRACE_MS = 200;

const STDIN_OK = new Uint8Array([0]);
const STDIN_CLOSED = new Uint8Array([1]);

type StdinOp = Uint8Array | "end";

class Job {
  readonly id: number;
  readonly request: SpawnRequest;
  child: SpawnedChild | undefined;
  /** Stdin writes, kills and releases that arrived before the child was spawned. */
  early: Array<StdinOp | { signal: string; group: boolean } | { release: StreamFd }> = [];
  /** Bytes sent per stream that the host has not credited yet (streamed mode). */
  unacked: [number, number, number] = [0, 0, 0];
  /** Streamed output read from the child but not sent: it waits for the host's credit. */
  held: [undefined, Uint8Array[], Uint8Array[]] = [undefined, [], []];
  /** The child's stream ended while output was held; the end is sent after it. */
  ended: [boolean, boolean, boolean] = [false, false, false];
  /** Reading the child's stream is paused: the window is full, or output is held. */
  paused: [boolean, boolean, boolean] = [false, false, false];
  open: [boolean, boolean, boolean];
  collected: [Uint8Array[], Uint8Array[], Uint8Array[]] = [[], [], []];
  collectedBytes = 0;
  totalBytes = 0;
  exit: { code: number | null; signal: string | null } | undefined;
  reason: StopReason = null;
  stdinChain: Promise<unknown> = Promise.resolve();
  timers: ReturnType<typeof setTimeout>[] = [];
  grace: ReturnType<typeof setTimeout> | undefined;

  constructor(id: number, request: SpawnRequest) {
    this.id = id;
    this.request = request;
    this.open = [false, request.stdout === "piped", request.stderr === "piped"];
  }
}

function parseRequest(payload: Uint8Array): SpawnRequest {
  const raw = decodeJson(payload);
  const isStringArray = (v: unknown) => Array.isArray(v) && v.every((s) => typeof s === "string");
  const isMode = (v: unknown) => v === "piped" || v === "inherit" || v === "null";
  const isCount = (v: unknown) => typeof v === "number" && Number.isFinite(v) && v >= 0;
  if (
    typeof raw.cmd !== "string" || !isStringArray(raw.args) ||
    !(raw.cwd === undefined || typeof raw.cwd === "string") ||
    !(raw.env === undefined ||
      (typeof raw.env === "object" && raw.env !== null && !Array.isArray(raw.env) &&
        Object.values(raw.env).every((v) => typeof v === "string"))) ||
    !isMode(raw.stdin) || !isMode(raw.stdout) || !isMode(raw.stderr) ||
    typeof raw.buffered !== "boolean" || typeof raw.killSignal !== "string" ||
    !isCount(raw.forceKillAfterDelay) || !isCount(raw.window) || raw.window === 0 ||
    !(raw.timeout === undefined || isCount(raw.timeout)) ||
    !(raw.maxBuffer === undefined || isCount(raw.maxBuffer)) ||
    !(raw.argv0 === undefined || typeof raw.argv0 === "string") ||
    !(raw.uid === undefined || Number.isInteger(raw.uid)) ||
    !(raw.gid === undefined || Number.isInteger(raw.gid)) ||
    !(raw.detached === undefined || typeof raw.detached === "boolean") ||
    typeof raw.group !== "boolean"
  ) {
    throw new ProtocolError("Spawn request is malformed");
  }
  return raw as unknown as SpawnRequest;
}

/**
 * Serves spawn requests arriving on `channel` until it closes, then kills what is left and exits.
 *
 * @param adapter The runtime adapter of this worker process.
 * @param channel The channel to the host.
 */
export function serve(adapter: Adapter, channel: ByteChannel): void {
  const writer = new FrameWriter(channel);
  const jobs = new Map<number, Job>();
  let stopping = false;

  const stop = (code: number): void => {
    if (stopping) return;
    stopping = true;
    for (const job of jobs.values()) {
      if (job.child && !job.request.detached) killGroupForGood(job);
    }
    adapter.killOwnGroup?.();
    adapter.exit(code);
  };

  const finish = (job: Job): void => {
    if (!job.exit || job.open[1] || job.open[2]) return;
    for (const timer of job.timers) clearTimeout(timer);
    if (job.grace !== undefined) clearTimeout(job.grace);
    jobs.delete(job.id);
    // Buffered output leaves as the chunks it was read in (views of at most MAX_CHUNK_BYTES of them): no copy here.
    writer.send(
      Frame.Exit,
      job.id,
      encodeExit({ ...job.exit, reason: job.reason }, job.collected[1], job.collected[2]),
    );
  };

  const flushCollected = (job: Job): void => {
    for (const fd of [1, 2] as const) {
      const chunks = job.collected[fd];
      if (chunks.length > 0) writer.send(fd === 1 ? Frame.Stdout : Frame.Stderr, job.id, chunks);
      job.collected[fd] = [];
    }
    job.collectedBytes = 0;
  };

  /**
   * Arms the quiet-period timer that releases streams a grandchild keeps open after exit: once the child exited,
   * while a stream is still open and none is paused.
   */
  const armGrace = (job: Job): void => {
    if (job.grace !== undefined) clearTimeout(job.grace);
    job.grace = undefined;
    if (!job.exit || !(job.open[1] || job.open[2]) || job.paused[1] || job.paused[2]) return;
    job.grace = setTimeout(() => {
      job.grace = undefined;
      job.child?.release();
      for (const fd of [1, 2] as const) if (job.open[fd]) closeStream(job, fd);
    }, STREAM_GRACE_MS);
  };

  /**
   * Ends a stream for good: nothing more is read, held or paused on it, so if it was paused, the grace may now run
   * for the other one (a grandchild's). The host hears StreamEnd unless the request is buffered or the host
   * released it.
   */
  const closeStream = (job: Job, fd: StreamFd, tell = !job.request.buffered): void => {
    const wasPaused = job.paused[fd];
    job.open[fd] = false;
    job.held[fd].length = 0;
    job.paused[fd] = false;
    if (wasPaused) armGrace(job);
    if (tell) writer.send(Frame.StreamEnd, job.id, FD_PAYLOAD[fd]);
    finish(job);
  };

  /**
   * Sends the held output of a streamed `fd` as far as the host's credit goes, then ends the stream if the
   * child's end was waiting for it; reading from the child is paused while the window is full or output is
   * held, and resumed once neither holds.
   */
  const sendHeld = (job: Job, fd: StreamFd): void => {
    const held = job.held[fd];
    const window = job.request.window;
    while (held.length > 0 && job.unacked[fd] < window) {
      // As much of the oldest read as the window has room for, in a frame of at most MAX_CHUNK_BYTES; the rest
      // stays first in line.
      let piece = held[0];
      const room = Math.min(window - job.unacked[fd], MAX_CHUNK_BYTES);
      if (piece.byteLength > room) {
        held[0] = piece.subarray(room);
        piece = piece.subarray(0, room);
      } else {
        held.shift();
      }
      writer.send(fd === 1 ? Frame.Stdout : Frame.Stderr, job.id, piece);
      job.unacked[fd] += piece.byteLength;
    }
    if (held.length === 0 && job.ended[fd]) {
      closeStream(job, fd);
      return;
    }
    const full = held.length > 0 || job.unacked[fd] >= window;
    if (full === job.paused[fd]) return;
    job.paused[fd] = full;
    if (full) {
      job.child?.pause(fd);
    } else {
      job.child?.resume(fd);
      armGrace(job);
    }
  };

  /** Collects buffered output in pieces of at most MAX_CHUNK_BYTES, flushed before they would pass it. */
  const collect = (job: Job, fd: StreamFd, chunk: Uint8Array): void => {
    const { maxBuffer } = job.request;
    for (let offset = 0; offset < chunk.byteLength; offset += MAX_CHUNK_BYTES) {
      const piece = chunk.byteLength <= MAX_CHUNK_BYTES ? chunk : chunk.subarray(offset, offset + MAX_CHUNK_BYTES);
      job.totalBytes += piece.byteLength;
      if (maxBuffer !== undefined && job.totalBytes > maxBuffer) {
        stopFor(job, "maxBuffer", "SIGKILL");
        return;
      }
      if (job.collectedBytes + piece.byteLength > MAX_CHUNK_BYTES) flushCollected(job);
      job.collected[fd].push(piece);
      job.collectedBytes += piece.byteLength;
    }
  };

  const killChild = (job: Job, signal: string, group: boolean): void => {
    if (job.exit) return;
    try {
      job.child!.kill(signal, group);
    } catch {
      // The child may have exited between the check and the signal.
    }
  };

  /**
   * SIGKILLs a command's group, also after the command exited while a stream of its job is still open: a
   * grandchild in the group may hold it (a process group's id is not reused while a member lives).
   */
  const killGroupForGood = (job: Job): void => {
    if (job.exit && !job.open[1] && !job.open[2]) return;
    try {
      job.child!.kill("SIGKILL", true);
    } catch {
      // The group is gone.
    }
  };

  const stopFor = (job: Job, reason: StopReason, signal: string): void => {
    if (job.exit || job.reason !== null) return;
    job.reason = reason;
    killChild(job, signal, true);
    const force = setTimeout(() => killGroupForGood(job), job.request.forceKillAfterDelay);
    job.timers.push(force);
  };

  const writeStdin = (job: Job, op: StdinOp): void => {
    const child = job.child!;
    if (op === "end") {
      job.stdinChain = job.stdinChain.then(() => child.closeStdin());
      return;
    }
    // A write can finish after the request completed (the child exited with stdin unread): the host has
    // let go of the request by then, so no ack.
    const ack = (ok: boolean) => {
      if (jobs.get(job.id) === job) writer.send(Frame.StdinAck, job.id, ok ? STDIN_OK : STDIN_CLOSED);
    };
    job.stdinChain = job.stdinChain.then(() => child.write(op)).then(ack, () => ack(false));
  };

  const start = async (job: Job): Promise<void> => {
    const { request } = job;
    let child: SpawnedChild;
    // The host must hear "spawned" before any output or exit: events the adapter reports before its
    // spawn() promise settles wait here, until `job.child` is set.
    const early: Array<() => void> = [];
    const events: ChildEvents = {
      data(fd, chunk) {
        if (!job.open[fd]) return; // released, or after the grace
        if (!request.buffered) {
          job.held[fd].push(chunk);
          sendHeld(job, fd);
        } else {
          collect(job, fd, chunk);
        }
        if (job.exit) armGrace(job);
      },
      end(fd) {
        if (!job.open[fd]) return;
        if (job.held[fd].length > 0) job.ended[fd] = true;
        else closeStream(job, fd);
      },
      exit(code, signal) {
        job.exit = { code, signal };
        if (!request.buffered && (job.open[1] || job.open[2])) {
          writer.send(Frame.Exited, job.id, encodeExit({ ...job.exit, reason: job.reason }));
        }
        armGrace(job);
        finish(job);
      },
    };
    try {
      child = await adapter.spawn(request, {
        // Once started (the usual case) output goes straight through, with no closure per chunk.
        data: (fd, chunk) => job.child ? events.data(fd, chunk) : void early.push(() => events.data(fd, chunk)),
        end: (fd) => job.child ? events.end(fd) : void early.push(() => events.end(fd)),
        exit: (code, signal) =>
          job.child ? events.exit(code, signal) : void early.push(() => events.exit(code, signal)),
      });
    } catch (error) {
      // Thrown or rejected, the runtime's own error or a SpawnFailed: the host hears it as a SpawnFailed.
      jobs.delete(job.id);
      writer.send(Frame.SpawnError, job.id, encodeJson(spawnFailed(error).failure));
      return;
    }
    job.child = child;
    writer.send(Frame.Spawned, job.id, encodeU32(child.pid));
    if (request.timeout !== undefined) {
      job.timers.push(setTimeout(() => stopFor(job, "timeout", request.killSignal), request.timeout));
    }
    for (const event of early) event(); // usually none
    for (const op of job.early) {
      if (op === "end" || op instanceof Uint8Array) writeStdin(job, op);
      else if ("release" in op) child.release(op.release);
      else killChild(job, op.signal, op.group);
    }
    job.early = [];
  };

  const onFrame = (type: number, id: number, payload: Uint8Array, lent: boolean): void => {
    if (type === Frame.Spawn) {
      if (jobs.has(id) || id === 0) throw new ProtocolError(`Request id ${id} is already in use`);
      const job = new Job(id, parseRequest(payload));
      jobs.set(id, job);
      void start(job);
      return;
    }
    const job = jobs.get(id);
    // Frames for requests that already completed are normal (a kill racing an exit): ignore them.
    if (job === undefined) {
      if (type < Frame.Spawn || type > Frame.Release) throw new ProtocolError(`Unknown frame type ${type}`);
      return;
    }
    switch (type) {
      case Frame.Stdin:
      case Frame.StdinEnd: {
        const op: StdinOp = type === Frame.Stdin ? keepBytes(payload, lent) : "end";
        if (job.child) writeStdin(job, op);
        else job.early.push(op);
        return;
      }
      case Frame.Kill: {
        const text = new TextDecoder().decode(payload);
        const group = text.startsWith("-");
        const signal = group ? text.slice(1) : text;
        if (job.child) killChild(job, signal, group);
        else job.early.push({ signal, group });
        return;
      }
      case Frame.Release: {
        const fd = decodeFd(payload);
        if (!job.open[fd]) return;
        closeStream(job, fd, false);
        if (job.child) job.child.release(fd);
        else job.early.push({ release: fd });
        return;
      }
      case Frame.Credit: {
        const fd = decodeFd(payload);
        job.unacked[fd] = Math.max(0, job.unacked[fd] - decodeU32(payload, 1));
        if (job.open[fd]) sendHeld(job, fd);
        return;
      }
      default:
        throw new ProtocolError(`Unknown frame type ${type}`);
    }
  };

  const decoder = new FrameDecoder(onFrame, { lent: channel.lendsChunks === true, allocate: channel.allocate });
  channel.start({
    data(chunk) {
      try {
        decoder.push(chunk);
      } catch (error) {
        console.error(`spawnpool worker: ${error instanceof Error ? error.message : error}; closing`);
        stop(1);
      }
    },
    close() {
      stop(0);
    },
  });
  adapter.onTerminate(() => stop(0));
  writer.send(
    Frame.Hello,
    0,
    encodeJson({ version: PROTOCOL_VERSION, runtime: adapter.runtime, pid: adapter.pid() }),
  );
}

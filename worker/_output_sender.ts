/**
 * A job's output on its way to the host: streamed within the host's credit (held while the window is full, reading
 * paused), or collected for the exit of a buffered request; maxBuffer; and the grace that releases the streams a
 * grandchild still holds once the command exited.
 *
 * @module
 */

import { EXIT_TAIL_WINDOWS, FD_PAYLOAD, Frame, type StopReason, type StreamFd } from "../core/frame.ts";
import type { FrameWriter } from "../core/frame_writer.ts";
import type { Job } from "./job.ts";

/**
 * Output travels in frames of at most this many bytes, whatever a runtime read at once: Bun can hand over
 * tens to hundreds of MB in one chunk under load (69-205 MB from `yes` on a busy worker), and one frame of
 * that would pass the host's frame limit and, streamed, its flow-control window. Buffered output is sent
 * ahead rather than let grow past it.
 */
const MAX_CHUNK_BYTES = 1024 * 1024;
/**
 * After exit, how long a piped stream may stay quiet (nothing read from the command, nothing credited by the host)
 * before it is released: a grandchild holds it, or nobody reads it any more.
 */
const STREAM_GRACE_MS = 200;

const OUTPUT_FRAME = [undefined, Frame.Stdout, Frame.Stderr] as const;

/** What the output of a job needs of the loop that runs it (worker/serve.ts). */
export interface OutputOwner {
  /** The channel to the host. */
  readonly writer: FrameWriter;
  /** Calls `callback` after `ms`, unless the returned function is called first. */
  timer(ms: number, callback: () => void): () => void;
  /** Sends the Exit frame once the child exited and both streams closed. */
  finish(job: Job): void;
  /** Stops a command the worker gave up on, for `reason`: `signal`, then SIGKILL after the delay. */
  stopFor(job: Job, reason: StopReason, signal: string): void;
  /** SIGKILLs the command's group, also after its exit while a stream of its job is still open. */
  killGroupForGood(job: Job): void;
}

/** The output of the jobs of one channel: what the worker sends of it, and when it stops reading. */
export class OutputSender {
  readonly #owner: OutputOwner;

  constructor(owner: OutputOwner) {
    this.#owner = owner;
  }

  /** Output read from the child: sent within the host's credit (streamed) or collected (buffered). */
  onData(job: Job, fd: StreamFd, chunk: Uint8Array): void {
    const stream = job.streams[fd];
    if (!stream.open) return; // released, or after the grace
    if (!job.request.buffered) {
      stream.held.push(chunk);
      this.sendHeld(job, fd);
      this.#countStreamed(job, chunk.byteLength);
    } else {
      this.#collect(job, fd, chunk);
    }
    if (job.exit) this.armGrace(job);
  }

  /** The child's stream ended: closed now, or once its held output has gone. */
  onEnd(job: Job, fd: StreamFd): void {
    const stream = job.streams[fd];
    if (!stream.open) return;
    if (stream.held.length > 0) stream.ended = true;
    else this.closeStream(job, fd);
  }

  /** Sends a buffered request's collected output ahead of its exit. */
  #flushCollected(job: Job): void {
    for (const fd of [1, 2] as const) {
      const stream = job.streams[fd];
      if (stream.collected.length > 0) this.#owner.writer.send(OUTPUT_FRAME[fd], job.id, stream.collected);
      stream.collected = [];
    }
    job.collectedBytes = 0;
  }

  /**
   * Arms the quiet-period timer that releases streams still open after the exit (a grandchild holds them, or nobody
   * reads them): once the child exited, while a stream is still open. Output read and credit from the host restart
   * it, so it runs out only once nothing was read and nothing credited for STREAM_GRACE_MS: a paused stream whose
   * reader has gone does not hold its request and its pipes for ever.
   */
  armGrace(job: Job): void {
    job.grace?.();
    job.grace = undefined;
    if (!job.exit || !job.anyOpen) return;
    job.grace = this.#owner.timer(STREAM_GRACE_MS, () => {
      job.grace = this.#afterPoll(() => {
        job.grace = undefined;
        this.releaseStreams(job);
      });
    });
  }

  /**
   * Lets go of the command's output streams that are still open: nothing more is read from them. For a command the
   * worker stopped, what still holds them gets the forced SIGKILL now rather than never (the request ends here).
   */
  releaseStreams(job: Job): void {
    if (job.forcePending) this.#owner.killGroupForGood(job);
    job.child?.release();
    for (const fd of [1, 2] as const) if (job.streams[fd].open) this.closeStream(job, fd);
  }

  /**
   * Calls `callback` once the event loop has read what was ready when the grace ran out, unless the returned function
   * is called first. A grace's timer may fire before the loop reads output that reached a pipe while the loop was held
   * (by the host's own synchronous work, when this loop runs in the host, or a worker left off the CPU), which the
   * release would then lose: Node runs due timers before it polls, and Bun ran a due timer and the `setImmediate` it
   * queued before such a read (measured). A timer queued from the grace's own callback runs after that poll on both.
   */
  #afterPoll(callback: () => void): () => void {
    return this.#owner.timer(1, callback);
  }

  /**
   * Ends a stream for good: nothing more is read, held or paused on it, so if it was paused, the grace may now run
   * for the other one (a grandchild's). The host hears StreamEnd unless the request is buffered or the host
   * released it.
   */
  closeStream(job: Job, fd: StreamFd, tell: boolean = !job.request.buffered): void {
    const stream = job.streams[fd];
    const wasPaused = stream.paused;
    stream.open = false;
    stream.held.length = 0;
    stream.paused = false;
    if (wasPaused) this.armGrace(job);
    if (tell) this.#owner.writer.send(Frame.StreamEnd, job.id, FD_PAYLOAD[fd]);
    this.#owner.finish(job);
  }

  /**
   * Sends the held output of a streamed `fd` as far as the host's credit goes, then ends the stream if the
   * child's end was waiting for it; reading from the child is paused while the window is full or output is
   * held, and resumed once neither holds.
   */
  sendHeld(job: Job, fd: StreamFd): void {
    const stream = job.streams[fd];
    const { held } = stream;
    const window = this.#aheadAllowed(job);
    while (held.length > 0 && stream.unacked < window) {
      // As much of the oldest read as the window has room for, in a frame of at most MAX_CHUNK_BYTES; the rest
      // stays first in line.
      let piece = held[0];
      const room = Math.min(window - stream.unacked, MAX_CHUNK_BYTES);
      if (piece.byteLength > room) {
        held[0] = piece.subarray(room);
        piece = piece.subarray(0, room);
      } else {
        held.shift();
      }
      this.#owner.writer.send(OUTPUT_FRAME[fd], job.id, piece);
      stream.unacked += piece.byteLength;
    }
    if (held.length === 0 && stream.ended) {
      this.closeStream(job, fd);
      return;
    }
    const full = held.length > 0 || stream.unacked >= window;
    if (full === stream.paused) return;
    stream.paused = full;
    if (full) {
      job.child?.pause(fd);
    } else {
      job.child?.resume(fd);
      this.armGrace(job);
    }
  }

  /**
   * Bytes a streamed output may be ahead of the host's credit: the window while the command runs, twice that once it
   * exited (EXIT_TAIL_WINDOWS), so that what it left in its pipe is read to its end without waiting for a reader who
   * may never come.
   */
  #aheadAllowed(job: Job): number {
    return job.exit ? job.request.window * EXIT_TAIL_WINDOWS : job.request.window;
  }

  /** Streamed output counts against maxBuffer too (the Bun shape's, as Bun's): past it, the command gets killSignal. */
  #countStreamed(job: Job, bytes: number): void {
    const { maxBuffer } = job.request;
    if (maxBuffer === undefined) return;
    job.totalBytes += bytes;
    if (job.totalBytes > maxBuffer && !job.exit) this.#owner.stopFor(job, "maxBuffer", job.request.killSignal);
  }

  /** Collects buffered output in pieces of at most MAX_CHUNK_BYTES, flushed before they would pass it. */
  #collect(job: Job, fd: StreamFd, chunk: Uint8Array): void {
    const { maxBuffer } = job.request;
    for (let offset = 0; offset < chunk.byteLength; offset += MAX_CHUNK_BYTES) {
      const piece = chunk.byteLength <= MAX_CHUNK_BYTES ? chunk : chunk.subarray(offset, offset + MAX_CHUNK_BYTES);
      job.totalBytes += piece.byteLength;
      if (maxBuffer !== undefined && job.totalBytes > maxBuffer) {
        this.#passedMaxBuffer(job);
        return;
      }
      if (job.collectedBytes + piece.byteLength > MAX_CHUNK_BYTES) this.#flushCollected(job);
      job.streams[fd].collected.push(piece);
      job.collectedBytes += piece.byteLength;
    }
  }

  /**
   * Past maxBuffer the request ends with that reason whenever the limit is passed: a command still running is stopped
   * (what it writes until it is gone is not kept); after its exit (a background job of its wrote the rest) its
   * streams are let go, as Node's execFile destroys them, so that the request ends now.
   */
  #passedMaxBuffer(job: Job): void {
    if (!job.exit) {
      this.#owner.stopFor(job, "maxBuffer", "SIGKILL");
      return;
    }
    job.reason ??= "maxBuffer";
    this.releaseStreams(job);
  }
}

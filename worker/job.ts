/**
 * A spawn request as the worker holds it while it runs: the request, its child, and the state of each output
 * stream (what the host has not credited, what waits for credit, what a buffered request collected).
 *
 * @module
 */

import type { SpawnedChild } from "../core/adapter.ts";
import type { SpawnRequest, StopReason, StreamFd } from "../core/frame.ts";

/** A write to the child's stdin, or its end. */
export type StdinOp = Uint8Array | "end";

/** One output stream (stdout or stderr) of a job. */
export class OutputState {
  /** Still read from the child: piped, and neither ended, released, nor given up after the grace. */
  open: boolean;
  /** Reading from the child is paused: the window is full, or output is held. */
  paused = false;
  /** The child's stream ended while output was held; the end is sent after it. */
  ended = false;
  /** Streamed output read from the child but not sent: it waits for the host's credit. */
  held: Uint8Array[] = [];
  /** Bytes sent that the host has not credited yet (streamed requests). */
  unacked = 0;
  /** Output of a buffered request, sent with the exit. */
  collected: Uint8Array[] = [];

  constructor(open: boolean) {
    this.open = open;
  }
}

/** A request in the worker, from its Spawn frame until its Exit (or SpawnError) frame. */
export class Job {
  readonly id: number;
  readonly request: SpawnRequest;
  child: SpawnedChild | undefined;
  /** Stdin writes, kills and releases that arrived before the child was spawned. */
  early: Array<StdinOp | { signal: string; group: boolean } | { release: StreamFd }> = [];
  /** Stdout and stderr, by fd. */
  readonly streams: readonly [undefined, OutputState, OutputState];
  /** Bytes collected and not yet sent ahead (buffered requests). */
  collectedBytes = 0;
  /** Bytes of output read in all (buffered requests), for maxBuffer. */
  totalBytes = 0;
  exit: { code: number | null; signal: string | null } | undefined;
  reason: StopReason = null;
  /** Whether the forced SIGKILL of a command the worker stopped is still to come. */
  forcePending = false;
  stdinChain: Promise<unknown> = Promise.resolve();
  timers: ReturnType<typeof setTimeout>[] = [];
  /** Cancels the quiet-period timer of the grace (worker/_output_sender.ts), while one is armed. */
  grace: (() => void) | undefined;

  constructor(id: number, request: SpawnRequest) {
    this.id = id;
    this.request = request;
    this.streams = [
      undefined,
      new OutputState(request.stdout === "piped"),
      new OutputState(request.stderr === "piped"),
    ];
  }

  /** Whether stdout or stderr is still open. */
  get anyOpen(): boolean {
    return this.streams[1].open || this.streams[2].open;
  }

  /** Whether stdout or stderr is paused. */
  get anyPaused(): boolean {
    return this.streams[1].paused || this.streams[2].paused;
  }
}

/** Decodes and checks a Spawn frame's payload (core/request_check.ts, the one check the agent makes too). */
export { parseRequest } from "../core/request_check.ts";

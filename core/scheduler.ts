/**
 * What an execution is submitted to: a scheduler (a local pool's core, a remote pool) and the request as it sees it.
 *
 * @module
 */

import type { SpawnPoolError } from "./errors.ts";
import type { SpawnRequest, WireSpawnFailure } from "./frame.ts";
import type { RequestDefaults } from "./options.ts";
import type { RequestChannel } from "./request_sink.ts";

/** A request as a scheduler sees it: what to send, and where to say what became of it. */
export interface Submission {
  /** What is asked. */
  readonly request: SpawnRequest;
  /** The spawn frame's payload. */
  readonly payload: Uint8Array;
  /** The request's id on its channel, once assigned. */
  readonly id: number;
  /** Called once something took the request: registers it there (which sets `id`). */
  assign(channel: RequestChannel): void;
  /** Fails a request that will never run (pool closed, queue full). */
  reject(error: SpawnPoolError): void;
}

/** The scheduler an execution is submitted to. */
export interface Scheduler {
  /** What the pool gives its commands unless they say otherwise (its `killTree`, `limits`): for `buildRequest`. */
  readonly defaults?: RequestDefaults;
  /**
   * Checks that the host may start `request` at all (a Deno host's run permission), before anything is sent;
   * throws as the runtime's own spawn would.
   */
  admit?(request: SpawnRequest): void;
  /**
   * The failure a spawn of `request` is certain to meet, as far as the host can tell at once (a program not on
   * PATH, a missing cwd): for the shapes whose runtime throws those at the call.
   */
  preflight?(request: SpawnRequest): WireSpawnFailure | undefined;
  /** Assigns the request a worker (now or when one is ready) and sends its spawn frame. */
  submit(submission: Submission): void;
}

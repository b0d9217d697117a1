/**
 * One request's side of a channel: the sink its frames go to, what it runs on, and the checks every frame a worker or
 * an agent sends of a request passes before its sink hears it ({@linkcode deliverFrame}).
 *
 * @module
 */

import type { SpawnPoolError } from "./errors.ts";
import {
  decodeExit,
  decodeFd,
  decodeJson,
  decodeU32,
  type ExitInfo,
  Frame,
  type FrameType,
  keepBytes,
  ProtocolError,
  type SpawnRequest,
  type StreamFd,
  type WireSpawnFailure,
} from "./frame.ts";

/** Receives the frames of one request. */
export interface RequestSink {
  /** The command's pid, once the worker reported it. */
  readonly pid: number | undefined;
  /** What was asked of the worker. */
  readonly request: SpawnRequest;
  /** The child started. */
  onSpawned(pid: number): void;
  /** The child could not start. */
  onSpawnError(failure: WireSpawnFailure): void;
  /** Output arrived; the sink may keep `chunk`. */
  onData(fd: StreamFd, chunk: Uint8Array): void;
  /** A stream ended. */
  onStreamEnd(fd: StreamFd): void;
  /** A stdin write finished. */
  onStdinAck(written: boolean): void;
  /** The child exited (streamed requests; its streams may still be open). */
  onExited(info: ExitInfo): void;
  /** The request completed; the sink may keep `stdout` and `stderr`. */
  onExit(info: ExitInfo, stdout: Uint8Array, stderr: Uint8Array): void;
  /** The request failed in the pool (worker died, pool closed). */
  onFail(error: SpawnPoolError): void;
}

/**
 * What a request runs on, as its {@linkcode RequestSink} sees it: a local worker's channel, or a remote agent's
 * subjects.
 */
export interface RequestChannel {
  /** Registers a request and returns its id; `ref` says whether it keeps the host alive. */
  begin(sink: RequestSink, ref: boolean): number;
  /** Sends a frame for a request. */
  send(type: FrameType, id: number, payload?: Uint8Array | readonly Uint8Array[]): void;
  /** Takes one keep-alive reference. */
  ref(): void;
  /** Drops one keep-alive reference. */
  unrefRequest(): void;
  /**
   * Gives up on what runs the request, which stopped doing its job (`why`): the command is killed and every request
   * still in flight there fails.
   */
  abandon(why: string): void;
}

/**
 * The largest pid a system gives: Linux's PID_MAX_LIMIT (2^22; macOS stops at 99,998). A larger one is a lie, and
 * past 2^31 - 1 a runtime's kill() may cut it to 32 bits and signal another process.
 */
const MAX_PID = 0x40_0000;

/**
 * Hands a frame a worker sent to its request's sink; returns true when it completed the request. What a worker says of
 * a request is checked against where that request is: a command is spawned once, and before anything else is said of
 * it; its pid is one the host may signal as a group (never 0 or 1, which kill() reads as "my group" and "everyone",
 * nor the worker itself, `workerPid`). Output is kept here, out of a payload the channel may reuse (`lent`).
 *
 * @throws {ProtocolError} For a frame the request cannot take now, or an unknown type.
 */
export function deliverFrame(
  sink: RequestSink,
  type: number,
  id: number,
  payload: Uint8Array,
  lent: boolean,
  workerPid: number,
): boolean {
  if (type === Frame.Spawned) {
    const pid = decodeU32(payload);
    if (sink.pid !== undefined) throw new ProtocolError(`Request ${id} was spawned twice`);
    if (pid <= 1 || pid > MAX_PID || pid === workerPid) {
      throw new ProtocolError(`Request ${id} names pid ${pid} as its command`);
    }
    sink.onSpawned(pid);
    return false;
  }
  if (sink.pid === undefined && type !== Frame.SpawnError) {
    throw new ProtocolError(`Frame of type ${type} for request ${id} before its spawn`);
  }
  if (type === Frame.SpawnError && sink.pid !== undefined) {
    throw new ProtocolError(`Request ${id} failed to spawn after it was spawned`);
  }
  switch (type) {
    case Frame.SpawnError: {
      const raw = decodeJson(payload);
      if (typeof raw.code !== "string" || typeof raw.message !== "string") {
        throw new ProtocolError("Spawn error frame is malformed");
      }
      sink.onSpawnError(raw as unknown as WireSpawnFailure);
      return true;
    }
    case Frame.Stdout:
      sink.onData(1, keepBytes(payload, lent));
      return false;
    case Frame.Stderr:
      sink.onData(2, keepBytes(payload, lent));
      return false;
    case Frame.StreamEnd:
      sink.onStreamEnd(decodeFd(payload));
      return false;
    case Frame.StdinAck:
      sink.onStdinAck(payload[0] === 0);
      return false;
    case Frame.Exited:
      sink.onExited(decodeExit(payload).info);
      return false;
    case Frame.Exit: {
      const { info, stdout, stderr } = decodeExit(payload);
      // Handed over before the caller forgets the request: a sink that finds the frame breaks the protocol throws,
      // and the request is still there for the shutdown to fail.
      sink.onExit(info, keepBytes(stdout, lent), keepBytes(stderr, lent));
      return true;
    }
    default:
      throw new ProtocolError(`Unknown frame type ${type}`);
  }
}

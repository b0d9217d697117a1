/**
 * How a command's frames travel between a caller and an agent over NATS. Each message is
 *
 * ```text
 * u32 sequence number | frames (core/frame.ts's layout, each whole)
 * ```
 *
 * Each direction of each command numbers its messages from 0, heartbeats included, so a lost message shows as a gap
 * at the next one and is never silent corruption. The frames are the local protocol's, request id 1, plus a few
 * that only a remote command needs ({@linkcode RemoteFrame}).
 *
 * Subjects, for a pool's `subject` S: callers send spawn requests to S (agents listen in a queue group, so one
 * takes each); the agent answers on the caller's reply subject (one per command) and names the command's control
 * subject, `S.ctl.<agent id>.<token>` with an unguessable token, which takes the caller's stdin, kill, credit and
 * release. `S.agents` reaches every agent (a caller's `ready()`).
 *
 * @module
 */

import {
  concatBytes,
  decodeU32,
  encodeHeader,
  encodeU32,
  FrameDecoder,
  HEADER_BYTES,
  ProtocolError,
} from "../core/frame.ts";

/** Frame types only a remote command uses (the local protocol's end at 24). */
export const RemoteFrame = {
  /** agent -> caller, first: the agent took the command; payload is the JSON {@linkcode Accepted}. */
  Accepted: 32,
  /** agent -> caller, alone: the agent runs as many commands as it may; the caller tries again. */
  Busy: 33,
  /** both ways: nothing to say, still here (a heartbeat). */
  Ping: 34,
  /** agent -> caller: the command failed on the agent; payload is the JSON {@linkcode Failure}. */
  Failed: 35,
  /** caller -> agent: the caller gave up on the command; the agent kills it and forgets it. */
  Cancel: 36,
} as const;

/** The request id of every frame of a remote command: each command has subjects of its own. */
export const REMOTE_ID = 1;

/** What an agent says when it takes a command. */
export interface Accepted {
  /** The command's control subject. */
  control: string;
  /** The agent: its id, host name, process id and worker runtime. */
  agent: AgentInfo;
}

/** An agent, as it describes itself. */
export interface AgentInfo {
  /** Unique per agent process. */
  id: string;
  /** The agent's name (`--name`, else its host name). */
  name: string;
  /** The agent's process id, on its machine. */
  pid: number;
}

/** A command's failure on the agent. */
export interface Failure {
  /** A `SpawnPoolError` code. */
  code: string;
  /** What happened. */
  message: string;
}

/** How often each side says something about a command it has not spoken of for that long. */
export const HEARTBEAT_MS = 250;
/** A caller that has heard nothing of an accepted command for this long takes its agent for dead. */
export const AGENT_SILENCE_MS = 1_500;
/** An agent that has heard nothing from a command's caller for this long kills the command. */
export const CALLER_SILENCE_MS = 3_000;

/**
 * Calls `tick(now, judge)` every {@linkcode HEARTBEAT_MS}, `now` from `Date.now()`. `judge` is false on the first
 * round after this process was itself stalled (its timer late by more than a round: a long garbage collection, a
 * synchronous task, a starved machine): what the peer sent meanwhile is still unread, since due timers run before the
 * event loop reads its sockets, so that round judges no silence; the next one does, the messages read by then.
 */
export function startHeartbeat(tick: (now: number, judge: boolean) => void): ReturnType<typeof setInterval> {
  let last = performance.now();
  let waited = false;
  return setInterval(() => {
    const at = performance.now();
    const stalled = at - last > 2 * HEARTBEAT_MS;
    last = at;
    const judge = !stalled || waited;
    waited = !judge;
    tick(Date.now(), judge);
  }, HEARTBEAT_MS);
}

/** Encodes one message: the sequence number, then the frames already encoded in `parts`. */
export function encodeMessage(seq: number, parts: readonly Uint8Array[]): Uint8Array {
  return concatBytes([encodeU32(seq), ...parts]);
}

/** A message's size when the connection does not say (NATS's default `max_payload`). */
const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

/** The largest message a connection's servers take. */
export function maxPayloadOf(nc: { info?: { max_payload: number } } | undefined): number {
  return nc?.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
}

/** The most payload one frame can carry in a message of at most `maxPayload` bytes. */
export function frameRoom(maxPayload: number): number {
  return maxPayload - 4 - HEADER_BYTES;
}

/** A frame's parts: its header and payload, ready for {@linkcode encodeMessage}. */
export function frameParts(type: number, payload?: Uint8Array): Uint8Array[] {
  const length = payload?.byteLength ?? 0;
  const header = encodeHeader(type as never, REMOTE_ID, length);
  return length === 0 ? [header] : [header, payload!];
}

/** One decoded frame of a message. */
export interface MessageFrame {
  /** Its type. */
  type: number;
  /** Its payload (a view of the message). */
  payload: Uint8Array;
}

/**
 * Decodes a message: its sequence number and whole frames, each for request {@linkcode REMOTE_ID}.
 *
 * @throws {ProtocolError} For a message too short, a frame cut off or for another request.
 */
export function decodeMessage(data: Uint8Array): { seq: number; frames: MessageFrame[] } {
  if (data.byteLength < 4) throw new ProtocolError(`Message of ${data.byteLength} bytes has no sequence number`);
  const seq = decodeU32(data);
  const frames: MessageFrame[] = [];
  const decoder = new FrameDecoder((type, id, payload) => {
    if (id !== REMOTE_ID) throw new ProtocolError(`Frame for request ${id} in a remote command's message`);
    frames.push({ type, payload });
  });
  decoder.push(data.subarray(4));
  if (decoder.buffered > 0) throw new ProtocolError("Message ends inside a frame");
  return { seq, frames };
}

/** Checks that messages arrive numbered 0, 1, 2, ... */
export class Sequence {
  #next = 0;

  /** Takes the next message's number; false for a gap (or a repeat): a message was lost. */
  accept(seq: number): boolean {
    if (seq !== this.#next) return false;
    this.#next = (this.#next + 1) >>> 0;
    return true;
  }
}

/** Bytes of a 128-bit random token as base64url: unguessable names for control subjects and agents. */
export function randomToken(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  let text = "";
  for (const byte of bytes) text += String.fromCharCode(byte);
  return btoa(text).replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "");
}

/** Whether a string is a usable subject for a pool: dot-separated tokens without wildcards or spaces. */
export function validSubject(subject: string): boolean {
  return /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/.test(subject);
}

/** The NATS client's inbox prefix: every caller's reply subjects are under `_INBOX.` (its `inboxPrefix` is too). */
export const INBOX_PREFIX = "_INBOX";

/**
 * Whether `subject` is a caller's inbox, under `_INBOX.`: the only reply subjects an agent answers, spawn requests and
 * discovery (`S.agents`) alike. An agent publishes as itself, with its permissions: a caller must not point it at
 * another subject (one that the caller may not publish to, or that other clients listen on).
 */
export function isInbox(subject: string | undefined): subject is string {
  return subject !== undefined && subject.length > INBOX_PREFIX.length + 1 && subject.startsWith(`${INBOX_PREFIX}.`);
}

/** An error's message, or what was thrown as a string. */
export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The wire protocol between a host and its workers: binary frames over one duplex byte stream.
 *
 * A frame is a 9-byte header followed by a payload:
 *
 * ```text
 * u32 payload length | u8 type | u32 request id | payload
 * ```
 *
 * Integers are big-endian. Request id 0 is the channel itself (hello). Payload bytes of stdio frames are
 * the process's bytes, never re-encoded. The decoder treats its input as untrusted: an unknown type, an
 * oversized length or a malformed payload is a {@linkcode ProtocolError}, never a crash.
 *
 * @module
 */

import { EXCEEDED_LIMITS, type ExceededLimit, type Limits } from "./limits.ts";

/** Version of the frame protocol; the worker states it in its hello and the host refuses a mismatch. */
export const PROTOCOL_VERSION = 6;

/**
 * Once a streamed command has exited (its Exited frame sent), its output may run this many windows ahead of the host's
 * credit, not one: the worker reads what the command left in its pipe to its end (a pipe holds at most 1 MiB for an
 * unprivileged process, 64 KiB by default) whether or not anyone reads it, so that an output nobody reads any more
 * never holds the request, the worker's slot, the zombie or the pipes.
 */
export const EXIT_TAIL_WINDOWS = 2;

/** Bytes in a frame header. */
export const HEADER_BYTES = 9;

/** Largest payload a decoder accepts. Larger frames close the channel. */
export const MAX_PAYLOAD_BYTES: number = 64 * 1024 * 1024;

/** Frame types. Values below 16 travel host to worker, 16 and above worker to host. */
export const Frame = {
  /** host -> worker: start a command; payload is the JSON {@linkcode SpawnRequest}. */
  Spawn: 1,
  /** host -> worker: bytes for the child's stdin. */
  Stdin: 2,
  /** host -> worker: close the child's stdin. */
  StdinEnd: 3,
  /**
   * host -> worker: send a signal; payload is the signal name, prefixed with "-" for the command's process group or
   * with "*" for its whole tree (a `killTree` command's every descendant; elsewhere as much of it as the worker can
   * reach).
   */
  Kill: 4,
  /** host -> worker: the host consumed bytes of a stream; payload is u8 fd, u32 byte count. */
  Credit: 5,
  /**
   * host -> worker: nobody reads a stream any more; payload is u8 fd. The worker closes its end of the
   * pipe, so the child sees EPIPE (or SIGPIPE) on its next write, as with a pipe whose reader went away.
   */
  Release: 6,
  /**
   * host -> worker: a command's terminal (a request with `terminal`); payload is u8 {@linkcode TerminalOp}, then for
   * Resize u16 columns and u16 rows, for Raw u8 1 (on) or 0 (off). Ignored for a command without one.
   */
  Terminal: 7,
  /** worker -> host: the worker is ready; payload is the JSON {@linkcode Hello}. */
  Hello: 16,
  /** worker -> host: the child started; payload is u32 pid. */
  Spawned: 17,
  /** worker -> host: the child could not start; payload is the JSON {@linkcode WireSpawnFailure}. */
  SpawnError: 18,
  /** worker -> host: bytes the child wrote to stdout. */
  Stdout: 19,
  /** worker -> host: bytes the child wrote to stderr. */
  Stderr: 20,
  /** worker -> host: a stream of the child ended; payload is u8 fd. */
  StreamEnd: 21,
  /** worker -> host: a stdin write finished; payload is u8 status (0 written, 1 the child closed stdin). */
  StdinAck: 22,
  /** worker -> host: the request is complete; payload is {@linkcode encodeExit}'s layout. */
  Exit: 23,
  /**
   * worker -> host: the child exited, though its streams may still be open (streamed requests only);
   * payload is {@linkcode encodeExit}'s layout with no output. `Exit` still follows.
   */
  Exited: 24,
} as const;

/** A frame type number. */
export type FrameType = typeof Frame[keyof typeof Frame];

/** Stdio stream numbers used in frames. */
export type StreamFd = 1 | 2;

/** What a worker says first. */
export interface Hello {
  /** Protocol version, {@linkcode PROTOCOL_VERSION}. */
  version: number;
  /** The worker's runtime. */
  runtime: string;
  /** The worker's process id. */
  pid: number;
  /** Why the worker cannot serve (a pool `cgroup` it cannot use): it exits after this hello. */
  error?: string;
}

/**
 * Why a child could not start, as the worker's runtime reported it: the payload of a {@linkcode Frame}.SpawnError, from
 * which the host makes the public `SpawnError` (core/errors.ts).
 */
export interface WireSpawnFailure {
  /** Error code such as `ENOENT` or `EACCES`. */
  code: string;
  /** Negative errno where known. */
  errno?: number;
  /** Human-readable message from the worker's runtime. */
  message: string;
}

/** @deprecated The former name of {@linkcode WireSpawnFailure}, while core/worker_handle.ts still uses it. */
export type SpawnFailure = WireSpawnFailure;

/** How a stdio slot of a pooled command is connected. */
export type StdioMode = "piped" | "inherit" | "null";

/** The spawn request a host sends a worker (JSON). */
export interface SpawnRequest {
  /** Program to run. */
  cmd: string;
  /** Arguments, passed exactly. */
  args: string[];
  /** Working directory. */
  cwd?: string;
  /** Variables to set on top of the worker's environment (or alone with `clearEnv`). */
  env?: Record<string, string>;
  /** Start from an empty environment. */
  clearEnv?: boolean;
  /** Stdin mode. */
  stdin: StdioMode;
  /** Stdout mode. */
  stdout: StdioMode;
  /** Stderr mode. */
  stderr: StdioMode;
  /** Collect output in the worker and return it with the exit frame. */
  buffered: boolean;
  /** Kill the child after this many milliseconds. */
  timeout?: number;
  /** Signal for `timeout`. */
  killSignal: string;
  /** After `killSignal`, send SIGKILL if the child is still running this many milliseconds later. */
  forceKillAfterDelay: number;
  /** Kill the child if buffered output exceeds this many bytes. */
  maxBuffer?: number;
  /** Bytes of streamed output the worker may send ahead of the host's credit, per stream. */
  window: number;
  /** The child's `argv[0]`, when it should differ from `cmd`. */
  argv0?: string;
  /** User id to run the child as. */
  uid?: number;
  /** Group id to run the child as. */
  gid?: number;
  /** Leave the child running when the worker stops (it is killed with the worker otherwise). */
  detached?: boolean;
  /**
   * The child gets a process group of its own, so a group kill reaches its descendants: set when the request has
   * a timeout, is detached, or comes from an API that signals the group. Workers may give every child a group.
   */
  group: boolean;
  /**
   * Piped stdio as socketpairs, as Node's child_process and Bun.spawn give a child (a writer whose reader went away
   * fails with ECONNRESET), instead of pipes, as Deno.Command gives (where it dies of SIGPIPE). The native worker
   * honours it; JS workers give what their runtime gives.
   */
  sockets?: boolean;
  /**
   * Keep everything the command starts reachable (the native worker makes it a child subreaper), and end its whole
   * tree whenever the worker ends it: a kill, its timeout, `maxBuffer`, the worker's stop. Sent only when true. Native
   * workers only: JavaScript workers fail the request with ENOTSUP.
   */
  killTree?: boolean;
  /** Resource limits set in the child before its program starts (native workers only, as `killTree`). */
  limits?: Limits;
  /**
   * Run the command on a pseudo-terminal of its own: its stdin, stdout and stderr and its controlling terminal, in a
   * session of its own. Its output is stream 1 (`stdout` must be "piped", `stderr` "null"); with `stdin` "piped" the
   * host types into it. Native workers only (JavaScript workers fail the request with ENOTSUP); not with `detached`.
   */
  terminal?: WireTerminal;
}

/** A command's terminal as a request asks for it. */
export interface WireTerminal {
  /** Columns, 1 to 65535. */
  cols: number;
  /** Rows, 1 to 65535. */
  rows: number;
  /** Start in raw mode (no echo, no line editing, no signal keys). Sent only when true. */
  raw?: boolean;
}

/**
 * Whether a decoded request's `terminal` is one a worker accepts (native/host_frames.c `valid_terminal`): `{ cols,
 * rows, raw? }`, each size an integer from 1 to 65535, on a command whose stdout is "piped", stderr "null", and that is
 * not detached.
 */
export function isWireTerminal(request: Record<string, unknown>): boolean {
  const terminal = request.terminal;
  if (typeof terminal !== "object" || terminal === null || Array.isArray(terminal)) return false;
  const t = terminal as Record<string, unknown>;
  const isSize = (v: unknown) => typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 65535;
  return Object.keys(t).every((key) => key === "cols" || key === "rows" || key === "raw") &&
    isSize(t.cols) && isSize(t.rows) && (t.raw === undefined || typeof t.raw === "boolean") &&
    request.stdout === "piped" && request.stderr === "null" && request.detached !== true;
}

/** What a {@linkcode Frame.Terminal} frame does. */
export const TerminalOp = {
  /** Set the terminal's size (the command's foreground process group gets SIGWINCH). */
  Resize: 1,
  /** Turn raw mode on or off. */
  Raw: 2,
} as const;

/** Whether `payload` is a Terminal frame's a worker accepts: a resize to 1-65535 each way, or raw mode 0 or 1. */
export function isTerminalControl(payload: Uint8Array): boolean {
  if (payload.byteLength === 5 && payload[0] === TerminalOp.Resize) {
    return (payload[1] | payload[2]) !== 0 && (payload[3] | payload[4]) !== 0;
  }
  return payload.byteLength === 2 && payload[0] === TerminalOp.Raw && payload[1] <= 1;
}

/** A Terminal frame's payload that resizes the terminal to `cols` x `rows` (each 1 to 65535). */
export function encodeResize(cols: number, rows: number): Uint8Array {
  return new Uint8Array([TerminalOp.Resize, cols >> 8, cols & 0xff, rows >> 8, rows & 0xff]);
}

/** A Terminal frame's payload that turns raw mode on or off. */
export function encodeRawMode(on: boolean): Uint8Array {
  return new Uint8Array([TerminalOp.Raw, on ? 1 : 0]);
}

/** Why a completed request's child was stopped by the worker, if it was. */
export type StopReason = "timeout" | "maxBuffer" | null;

/** The decoded head of an exit frame. */
export interface ExitInfo {
  /** Exit code, or null when a signal ended the child. */
  code: number | null;
  /** Terminating signal name, or null. */
  signal: string | null;
  /** Set when the worker stopped the child itself. */
  reason: StopReason;
  /** What the command used, where its worker can tell (native workers, and Bun's); undefined elsewhere. */
  usage?: WireUsage;
  /** Which of its `limits` ended the command, when its worker can tell; undefined otherwise. */
  limit?: ExceededLimit;
}

/**
 * A command's resource usage as the worker reports it (its `getrusage` fields): CPU times in microseconds, `maxRSS`
 * in bytes, the rest counts.
 */
export interface WireUsage {
  user: number;
  system: number;
  maxRSS: number;
  vcsw: number;
  ivcsw: number;
  inblock: number;
  oublock: number;
  msgsnd: number;
  msgrcv: number;
  nsignals: number;
  nswap: number;
  shm: number;
}

/** The fields of {@linkcode WireUsage}, each a count a worker must give. */
const USAGE_FIELDS = [
  "user",
  "system",
  "maxRSS",
  "vcsw",
  "ivcsw",
  "inblock",
  "oublock",
  "msgsnd",
  "msgrcv",
  "nsignals",
  "nswap",
  "shm",
] as const;

/** A worker's usage report, checked: an object of exactly the known counts (each a non-negative safe integer). */
function checkUsage(raw: unknown): WireUsage {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new ProtocolError("Exit frame has a malformed usage");
  }
  const usage = Object.create(null) as Record<string, number>;
  for (const field of USAGE_FIELDS) {
    const value = (raw as Record<string, unknown>)[field];
    if (!Number.isSafeInteger(value) || (value as number) < 0) {
      throw new ProtocolError("Exit frame has a malformed usage");
    }
    usage[field] = value as number;
  }
  if (Object.keys(raw).length !== USAGE_FIELDS.length) throw new ProtocolError("Exit frame has a malformed usage");
  return usage as unknown as WireUsage;
}

/** A decoding failure: the channel that produced it must be closed. */
export class ProtocolError extends Error {
  /** Creates a protocol error. */
  constructor(message: string) {
    super(message);
    this.name = "ProtocolError";
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Encodes a frame header. The payload is written separately so large payloads are never copied here. */
export function encodeHeader(type: FrameType, id: number, length: number): Uint8Array {
  const header = new Uint8Array(HEADER_BYTES);
  const view = new DataView(header.buffer);
  view.setUint32(0, length);
  header[4] = type;
  view.setUint32(5, id);
  return header;
}

/** Encodes a JSON payload. */
export function encodeJson(value: unknown): Uint8Array {
  return encoder.encode(JSON.stringify(value));
}

/** Decodes a JSON payload that must be an object. */
export function decodeJson(payload: Uint8Array): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(payload));
  } catch {
    throw new ProtocolError("Frame payload is not valid JSON");
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new ProtocolError("Frame payload is not a JSON object");
  }
  return value as Record<string, unknown>;
}

/** Encodes a u32. */
export function encodeU32(value: number): Uint8Array {
  const bytes = new Uint8Array(4);
  new DataView(bytes.buffer).setUint32(0, value);
  return bytes;
}

/** Decodes a u32 payload. */
export function decodeU32(payload: Uint8Array, offset = 0): number {
  if (payload.byteLength < offset + 4) throw new ProtocolError("Frame payload is too short");
  return new DataView(payload.buffer, payload.byteOffset, payload.byteLength).getUint32(offset);
}

/** Encodes a credit payload: stream fd and bytes consumed. */
export function encodeCredit(fd: StreamFd, bytes: number): Uint8Array {
  const out = new Uint8Array(5);
  out[0] = fd;
  new DataView(out.buffer).setUint32(1, bytes);
  return out;
}

/** The one-byte payloads naming a stream (StreamEnd, Release). Never modified. */
export const FD_PAYLOAD: Readonly<Record<StreamFd, Uint8Array>> = { 1: new Uint8Array([1]), 2: new Uint8Array([2]) };

/** Decodes a stream fd (first payload byte). */
export function decodeFd(payload: Uint8Array): StreamFd {
  const fd = payload[0];
  if (payload.byteLength < 1 || (fd !== 1 && fd !== 2)) throw new ProtocolError("Frame names no stream");
  return fd;
}

/**
 * Encodes an exit frame payload: u32 JSON length, JSON {@linkcode ExitInfo}, u32 stdout length, stdout,
 * stderr. The trailing bytes are the buffered output not yet sent in stdout/stderr frames, given as the
 * chunks it was read in: they go on the wire as they are, never joined here.
 */
export function encodeExit(
  info: ExitInfo,
  stdout: readonly Uint8Array[] = [],
  stderr: readonly Uint8Array[] = [],
): Uint8Array[] {
  const json = encodeJson(info);
  const head = new Uint8Array(8 + json.byteLength);
  const view = new DataView(head.buffer);
  view.setUint32(0, json.byteLength);
  head.set(json, 4);
  let outLength = 0;
  for (const chunk of stdout) outLength += chunk.byteLength;
  view.setUint32(4 + json.byteLength, outLength);
  return [head, ...stdout, ...stderr];
}

/** Decodes an exit frame payload. */
export function decodeExit(payload: Uint8Array): { info: ExitInfo; stdout: Uint8Array; stderr: Uint8Array } {
  const jsonLength = decodeU32(payload, 0);
  if (payload.byteLength < 8 + jsonLength) throw new ProtocolError("Exit frame is truncated");
  const raw = decodeJson(payload.subarray(4, 4 + jsonLength));
  const code = raw.code;
  const signal = raw.signal;
  const reason = raw.reason;
  if (
    !(code === null || (typeof code === "number" && Number.isInteger(code))) ||
    !(signal === null || typeof signal === "string") ||
    !(reason === null || reason === "timeout" || reason === "maxBuffer")
  ) {
    throw new ProtocolError("Exit frame has a malformed status");
  }
  const outLength = decodeU32(payload, 4 + jsonLength);
  const start = 8 + jsonLength;
  if (payload.byteLength < start + outLength) throw new ProtocolError("Exit frame is truncated");
  const info: ExitInfo = { code, signal, reason };
  if (raw.usage !== undefined) info.usage = checkUsage(raw.usage);
  if (raw.limit !== undefined) {
    if (!(EXCEEDED_LIMITS as readonly unknown[]).includes(raw.limit)) {
      throw new ProtocolError("Exit frame names an unknown limit");
    }
    info.limit = raw.limit as ExceededLimit;
  }
  return {
    info,
    stdout: payload.subarray(start, start + outLength),
    stderr: payload.subarray(start + outLength),
  };
}

/**
 * Makes a buffer the decoder fills completely before anything reads it, so it need not be zeroed. It must be new
 * memory of exactly `length` bytes that nothing else uses.
 */
export type Allocate = (length: number) => Uint8Array;

/**
 * Receives decoded frames. `lent` says the payload is a view of a chunk its channel overwrites once the
 * callback returns: a handler that keeps bytes past the call keeps them with {@linkcode keepBytes}.
 */
export type FrameHandler = (type: number, id: number, payload: Uint8Array, lent: boolean) => void;

/**
 * Incremental frame decoder. Payloads of frames that arrive whole in one chunk are zero-copy views of it; a
 * frame split across chunks is assembled in a buffer of its own size. Only the bytes a handler keeps out of
 * a lent chunk are copied again, by {@linkcode keepBytes}, so each kept byte is copied at most once.
 */
export class FrameDecoder {
  #onFrame: FrameHandler;
  /** Header bytes of a frame whose header was split across chunks. */
  #head = new Uint8Array(HEADER_BYTES);
  #headFilled = 0;
  /** The payload being assembled, once its header is known; undefined between frames. */
  #payload: Uint8Array | undefined;
  #payloadFilled = 0;
  #type = 0;
  #id = 0;
  #lent: boolean;
  #allocate: Allocate;

  /**
   * Creates a decoder that calls `onFrame` for each complete frame.
   *
   * @param options.lent The chunks pushed are lent: the caller overwrites them after {@linkcode push}
   *   returns, and payloads that are views of them are passed to `onFrame` as lent.
   * @param options.allocate Makes the buffer a split frame's payload is assembled in (a channel's
   *   `allocate`); `new Uint8Array(length)` by default.
   */
  constructor(
    onFrame: FrameHandler,
    options: { lent?: boolean; allocate?: Allocate } = {},
  ) {
    this.#onFrame = onFrame;
    this.#lent = options.lent ?? false;
    this.#allocate = options.allocate ?? ((length) => new Uint8Array(length));
  }

  /** Bytes held while waiting for the rest of a frame. */
  get buffered(): number {
    return this.#headFilled + (this.#payload === undefined ? 0 : HEADER_BYTES + this.#payloadFilled);
  }

  /**
   * The request id of the frame whose payload is being assembled (its header arrived, not all of its payload), if any.
   */
  get pendingId(): number | undefined {
    return this.#payload === undefined ? undefined : this.#id;
  }

  /**
   * The unfilled rest of the payload being assembled when it is at least `min` bytes, for a channel to read into
   * directly: a chunk that is a view of it (at its start) is then {@linkcode FrameDecoder.push | pushed} without a copy.
   * Undefined between frames or for a shorter rest.
   */
  readTarget(min: number): Uint8Array | undefined {
    const payload = this.#payload;
    if (payload === undefined || payload.byteLength - this.#payloadFilled < min) return undefined;
    return payload.subarray(this.#payloadFilled);
  }

  /**
   * Feeds bytes; throws {@linkcode ProtocolError} on a malformed frame. A chunk may be a view of what
   * {@linkcode FrameDecoder.readTarget} returned, filled in place.
   */
  push(chunk: Uint8Array): void {
    let offset = 0;
    if (this.#headFilled > 0) {
      offset = Math.min(HEADER_BYTES - this.#headFilled, chunk.byteLength);
      this.#head.set(chunk.subarray(0, offset), this.#headFilled);
      this.#headFilled += offset;
      if (this.#headFilled < HEADER_BYTES) return;
      this.#headFilled = 0;
      const view = new DataView(this.#head.buffer);
      this.#begin(view.getUint32(0), this.#head[4], view.getUint32(5));
    }
    if (this.#payload !== undefined) {
      const payload = this.#payload;
      const take = Math.min(payload.byteLength - this.#payloadFilled, chunk.byteLength - offset);
      // Read into the payload itself (readTarget): the bytes are in place.
      const inPlace = offset === 0 && chunk.buffer === payload.buffer &&
        chunk.byteOffset === payload.byteOffset + this.#payloadFilled;
      if (!inPlace) payload.set(chunk.subarray(offset, offset + take), this.#payloadFilled);
      this.#payloadFilled += take;
      offset += take;
      if (this.#payloadFilled < payload.byteLength) return;
      this.#payload = undefined;
      this.#payloadFilled = 0;
      this.#onFrame(this.#type, this.#id, payload, false);
    }
    const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    while (chunk.byteLength - offset >= HEADER_BYTES) {
      const length = view.getUint32(offset);
      const type = chunk[offset + 4];
      const id = view.getUint32(offset + 5);
      const start = offset + HEADER_BYTES;
      if (start + length > chunk.byteLength) {
        this.#begin(length, type, id);
        this.#payload!.set(chunk.subarray(start));
        this.#payloadFilled = chunk.byteLength - start;
        return;
      }
      checkLength(length);
      this.#onFrame(type, id, chunk.subarray(start, start + length), this.#lent);
      offset = start + length;
    }
    if (offset < chunk.byteLength) {
      this.#head.set(chunk.subarray(offset));
      this.#headFilled = chunk.byteLength - offset;
    }
  }

  /** Starts a frame whose header is complete: an empty one is delivered, others wait for their payload. */
  #begin(length: number, type: number, id: number): void {
    checkLength(length);
    if (length === 0) {
      this.#onFrame(type, id, new Uint8Array(0), false);
      return;
    }
    this.#type = type;
    this.#id = id;
    this.#payload = this.#allocate(length);
  }
}

function checkLength(length: number): void {
  if (length > MAX_PAYLOAD_BYTES) {
    throw new ProtocolError(`Frame of ${length} bytes exceeds the ${MAX_PAYLOAD_BYTES}-byte limit`);
  }
}

/** Concatenates byte chunks. */
export function concatBytes(chunks: readonly Uint8Array[], total?: number): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  if (chunks.length === 0) return new Uint8Array(0);
  const size = total ?? chunks.reduce((sum, c) => sum + c.byteLength, 0);
  const out = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/**
 * A received payload (or part of one) as bytes the receiver may keep: a copy when it is `lent` (its buffer
 * is about to be overwritten) or a small part of a larger buffer, which keeping would pin; otherwise the
 * view itself, as a plain `Uint8Array`.
 */
export function keepBytes(view: Uint8Array, lent = false): Uint8Array {
  // An empty view gets an empty buffer of its own: keeping the view would pin its buffer, and one empty array
  // shared by every result would be detached for all of them by a user who transfers one.
  if (view.byteLength === 0) return new Uint8Array(0);
  if (lent || view.byteLength * 2 < view.buffer.byteLength) return new Uint8Array(view);
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}

/**
 * One caller's command on an agent ({@linkcode Relay}): a submission to the agent's local pool, the sink of its
 * worker's frames, and the relay of both ways' frames between that worker and the caller's NATS messages.
 *
 * @module
 */

import type { SpawnPoolError } from "../core/errors.ts";
import type { Submission } from "../core/scheduler.ts";
import {
  concatBytes,
  decodeU32,
  encodeCredit,
  encodeExit,
  encodeJson,
  encodeU32,
  type ExitInfo,
  FD_PAYLOAD,
  Frame,
  type FrameType,
  HEADER_BYTES,
  isTerminalControl,
  type SpawnRequest,
  type StreamFd,
  type WireSpawnFailure,
} from "../core/frame.ts";
import type { RequestChannel, RequestSink } from "../core/request_sink.ts";
import { killGroups, startTimeOf } from "../adapters/_process.ts";
import type { AgentEvent } from "./agent.ts";
import {
  CALLER_SILENCE_MS,
  decodeMessage,
  encodeMessage,
  frameParts,
  frameRoom,
  HEARTBEAT_MS,
  messageOf,
  RemoteFrame,
  Sequence,
} from "./wire.ts";

/**
 * Stdin a caller may have on its way to the command before it waits for an acknowledgement: a caller writes one chunk
 * of at most 256 KiB at a time (in several frames when the servers take smaller messages), and waits.
 */
const MAX_STDIN_AHEAD_BYTES = 1024 * 1024;
const MAX_STDIN_AHEAD_FRAMES = 256;

/** How long the Accepted frame may wait to leave with the command's next frame. */
const ACCEPT_DELAY_MS = 20;

/** Signal names a caller may send: "SIGTERM", "-SIGTERM" for the process group, or "*SIGTERM" for the tree. */
const SIGNAL_TEXT = /^[-*]?SIG[A-Z0-9+]{1,12}$/;

/** What a relay needs of its agent. */
export interface RelayAgent {
  /** Publishes; false when the client refused (a closed connection, a message too large). */
  publish(subject: string, data: Uint8Array, reply?: string): boolean;
  /** The largest message the servers take. */
  readonly maxPayload: number;
  /** Logs an event of the command's. */
  log(event: AgentEvent): void;
  /** The local pool is done with the command: it no longer counts against the agent's concurrency. */
  done(relay: Relay): void;
}

/** One caller's command on this agent: a submission to the local pool, and the sink of its frames. */
export class Relay implements Submission, RequestSink {
  readonly request: SpawnRequest;
  readonly payload: Uint8Array;
  id = 0;
  pid: number | undefined;
  readonly #agent: RelayAgent;
  readonly #reply: string;
  /** The command's control subject. */
  readonly control: string;
  readonly #name: string;
  #worker: RequestChannel | undefined;
  /** The caller's frames that came before the local pool took the command. */
  #pending: Array<[FrameType, Uint8Array | undefined]> = [];
  #received = new Sequence();
  #sent = 0;
  #parts: Uint8Array[] = [];
  #partsBytes = 0;
  #scheduled = false;
  /** Bytes sent per stream, and the caller's cumulative credit last seen (mod 2^32). */
  #sentBytes = [0, 0, 0];
  #credited = [0, 0, 0];
  /** Stdin frames the caller sent that the command has not yet acknowledged. */
  #stdinInFlight: number[] = [];
  #stdinAheadBytes = 0;
  #heardAt = Date.now();
  #sentAt = 0;
  #acceptTimer: ReturnType<typeof setTimeout> | undefined;
  readonly #startedAt = Date.now();
  /** The command's start time (/proc), for a kill of its group that must not reach a pid reused since. */
  #started: string | undefined;
  /** Killed for its caller: its frames go nowhere. */
  #killed = false;
  /** The caller heard the command's end: nothing more goes to it. */
  #told = false;
  /** The local pool is done with the command. */
  #finished = false;

  constructor(agent: RelayAgent, request: SpawnRequest, reply: string, control: string, name: string) {
    this.#agent = agent;
    this.request = request;
    this.payload = encodeJson(request);
    this.#reply = reply;
    this.control = control;
    this.#name = name;
  }

  // Submission

  assign(channel: RequestChannel): void {
    this.id = channel.begin(this, true);
    this.#worker = channel;
    // After the spawn frame, which the pool sends once this returns.
    queueMicrotask(() => {
      for (const [type, payload] of this.#pending.splice(0)) channel.send(type, this.id, payload);
    });
  }

  reject(error: SpawnPoolError): void {
    this.onFail(error);
  }

  // The caller's side

  /** A message from the caller. */
  receive(data: Uint8Array): void {
    if (this.#told || this.#killed) return;
    try {
      const { seq, frames } = decodeMessage(data);
      if (!this.#received.accept(seq)) return this.#lost("A message from the caller was lost");
      this.#heardAt = Date.now();
      for (const { type, payload } of frames) this.#frame(type, payload);
    } catch (error) {
      this.end("ERR_PROTOCOL", `The caller broke the protocol: ${messageOf(error)}`);
    }
  }

  #frame(type: number, payload: Uint8Array): void {
    switch (type) {
      case RemoteFrame.Ping:
        return;
      case RemoteFrame.Cancel:
        return this.kill("its caller cancelled it");
      case Frame.Stdin:
        // A caller waits for each write's acknowledgement; one that does not would have the worker queue without end.
        this.#stdinInFlight.push(payload.byteLength);
        this.#stdinAheadBytes += payload.byteLength;
        if (this.#stdinAheadBytes > MAX_STDIN_AHEAD_BYTES || this.#stdinInFlight.length > MAX_STDIN_AHEAD_FRAMES) {
          return this.end("ERR_PROTOCOL", `The caller sent more stdin ahead of its acknowledgements than it may`);
        }
        return this.#toWorker(Frame.Stdin, new Uint8Array(payload));
      case Frame.StdinEnd:
        return this.#toWorker(Frame.StdinEnd, undefined);
      case Frame.Kill: {
        const text = new TextDecoder().decode(payload);
        if (!SIGNAL_TEXT.test(text)) throw new Error(`Bad signal "${text.slice(0, 20)}"`);
        return this.#toWorker(Frame.Kill, new Uint8Array(payload));
      }
      case Frame.Terminal:
        if (!isTerminalControl(payload)) throw new Error("Bad terminal frame");
        return this.#toWorker(Frame.Terminal, new Uint8Array(payload));
      case Frame.Release:
        if (payload.byteLength !== 1 || (payload[0] !== 1 && payload[0] !== 2)) throw new Error("Bad release frame");
        return this.#toWorker(Frame.Release, FD_PAYLOAD[payload[0] as StreamFd]);
      case Frame.Credit: {
        if (payload.byteLength !== 5 || (payload[0] !== 1 && payload[0] !== 2)) throw new Error("Bad credit frame");
        const fd = payload[0] as StreamFd;
        const offset = decodeU32(payload, 1);
        // A cumulative offset: what it adds, never past what was sent (a caller cannot widen the window).
        const gained = (offset - this.#credited[fd]) >>> 0;
        const owed = (this.#sentBytes[fd] - this.#credited[fd]) >>> 0;
        if (gained === 0) return;
        if (gained > owed) return this.end("ERR_PROTOCOL", "The caller credited output that was never sent");
        this.#credited[fd] = offset;
        return this.#toWorker(Frame.Credit, encodeCredit(fd, gained));
      }
      default:
        throw new Error(`Unexpected frame type ${type}`);
    }
  }

  #toWorker(type: FrameType, payload: Uint8Array | undefined): void {
    if (this.#worker === undefined) this.#pending.push([type, payload]);
    else this.#worker.send(type, this.id, payload);
  }

  /**
   * Heartbeat: a word to a caller that heard nothing for a while; a caller silent for too long loses its command
   * (judged only when `judge`: see {@linkcode startHeartbeat}).
   */
  tick(now: number, judge: boolean): void {
    if (this.#finished || this.#told || this.#killed) return;
    if (judge && now - this.#heardAt > CALLER_SILENCE_MS) {
      return this.kill(`its caller was silent for ${now - this.#heardAt} ms`);
    }
    if (now - this.#sentAt >= HEARTBEAT_MS) this.out(RemoteFrame.Ping);
  }

  /** Kills the command's process group for a caller that will not hear of it again, and stops relaying. */
  kill(why: string): void {
    if (this.#finished || this.#killed) return;
    this.#killed = true;
    this.#agent.log({ event: "killed", id: this.#name, cmd: this.request.cmd, pid: this.pid, reason: why });
    // A killTree command's tree, which may have left its group; the group of any other.
    this.#toWorker(Frame.Kill, new TextEncoder().encode(this.request.killTree ? "*SIGKILL" : "-SIGKILL"));
    this.#toWorker(Frame.Release, FD_PAYLOAD[1]);
    this.#toWorker(Frame.Release, FD_PAYLOAD[2]);
    // The worker signals only a command still running; its process group may outlive it (a shell's background job),
    // and a command whose caller is gone leaves nothing behind. The group is the command's own (checkRequest); a
    // JavaScript worker may have reaped the command already, so the group is signalled only while the process of that
    // pid is still the one that started then, or none (a group's id is not taken while any of its members lives).
    if (this.pid !== undefined && this.#started !== undefined) killGroups([{ pid: this.pid, start: this.#started }]);
  }

  /** Forgets a command the local pool will say no more of (it closed). */
  forget(): void {
    this.#finish();
  }

  #lost(message: string): void {
    this.end("ERR_REMOTE_LOST", message);
  }

  /** Fails the command for its caller (`code`, `message`) and kills it. */
  end(code: string, message: string): void {
    this.#fail(code, message);
    this.kill(message);
  }

  // The local worker's side (RequestSink)

  onSpawned(pid: number): void {
    this.pid = pid;
    this.#started = startTimeOf(pid);
    this.#agent.log({ event: "start", id: this.#name, cmd: this.request.cmd, args: this.request.args, pid });
    this.out(Frame.Spawned, encodeU32(pid));
  }

  onSpawnError(failure: WireSpawnFailure): void {
    this.#agent.log({ event: "failed", id: this.#name, cmd: this.request.cmd, reason: failure.code });
    this.out(Frame.SpawnError, encodeJson(failure));
    this.#told = true;
    this.#finish();
  }

  onData(fd: StreamFd, chunk: Uint8Array): void {
    this.#data(fd, chunk, this.request.buffered);
  }

  /** Output, in frames a message can carry; counted against the caller's credit when streamed. */
  #data(fd: StreamFd, chunk: Uint8Array, buffered: boolean): void {
    if (!buffered) this.#sentBytes[fd] = (this.#sentBytes[fd] + chunk.byteLength) >>> 0;
    const most = this.#frameRoom();
    for (let offset = 0; offset < chunk.byteLength; offset += most) {
      this.out(fd === 1 ? Frame.Stdout : Frame.Stderr, chunk.subarray(offset, offset + most));
    }
  }

  onStreamEnd(fd: StreamFd): void {
    this.out(Frame.StreamEnd, FD_PAYLOAD[fd]);
  }

  onStdinAck(written: boolean): void {
    this.#stdinAheadBytes -= this.#stdinInFlight.shift() ?? 0;
    this.out(Frame.StdinAck, new Uint8Array([written ? 0 : 1]));
  }

  onExited(info: ExitInfo): void {
    this.out(Frame.Exited, concatBytes(encodeExit(info)));
  }

  onExit(info: ExitInfo, stdout: Uint8Array, stderr: Uint8Array): void {
    this.#agent.log({
      event: "exit",
      id: this.#name,
      cmd: this.request.cmd,
      pid: this.pid,
      code: info.code,
      signal: info.signal,
      ms: Date.now() - this.#startedAt,
    });
    // Buffered output too large for one message goes ahead as output frames: the caller collects those as well.
    if (stdout.byteLength + stderr.byteLength + 256 > this.#frameRoom()) {
      this.#data(1, stdout, true);
      this.#data(2, stderr, true);
      stdout = stderr = new Uint8Array(0);
    }
    this.out(Frame.Exit, concatBytes(encodeExit(info, [stdout], [stderr])));
    this.#told = true;
    this.#finish();
  }

  onFail(error: SpawnPoolError): void {
    this.#fail(error.code, error.message);
    this.#finish();
  }

  /** Tells the caller the command failed here; nothing more goes to it. */
  #fail(code: string, message: string): void {
    if (this.#told) return;
    this.#agent.log({ event: "failed", id: this.#name, cmd: this.request.cmd, reason: `${code}: ${message}` });
    this.out(RemoteFrame.Failed, encodeJson({ code, message }));
    this.#told = true;
  }

  /** The local pool is done with the command: it no longer counts against the agent's concurrency. */
  #finish(): void {
    if (this.#finished) return;
    this.#finished = true;
    this.#agent.done(this);
  }

  /** The most payload one frame of a message may carry. */
  #frameRoom(): number {
    return frameRoom(this.#agent.maxPayload);
  }

  /**
   * Queues the Accepted frame, which leaves with the next (Spawned, usually, a moment later: one message where there
   * would be two), or alone after {@linkcode ACCEPT_DELAY_MS} if the local pool is slow to start the command.
   */
  accept(payload: Uint8Array): void {
    this.#parts.push(...frameParts(RemoteFrame.Accepted, payload));
    this.#partsBytes += HEADER_BYTES + payload.byteLength;
    this.#acceptTimer = setTimeout(() => this.#flush(), ACCEPT_DELAY_MS);
  }

  /** Queues a frame for the caller; the frames of one turn leave together, in messages the servers take. */
  out(type: number, payload?: Uint8Array): void {
    if (this.#killed || this.#told) return;
    const parts = frameParts(type, payload);
    const bytes = HEADER_BYTES + (payload?.byteLength ?? 0);
    if (this.#partsBytes + bytes > this.#frameRoom() + HEADER_BYTES) this.#flush();
    this.#parts.push(...parts);
    this.#partsBytes += bytes;
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => {
        this.#scheduled = false;
        this.#flush();
      });
    }
  }

  #flush(): void {
    clearTimeout(this.#acceptTimer);
    if (this.#parts.length === 0) return;
    const message = encodeMessage(this.#sent++, this.#parts);
    this.#parts = [];
    this.#partsBytes = 0;
    this.#sentAt = Date.now();
    // The control subject as the reply: a caller whose inbox is gone makes the server say so there.
    this.#agent.publish(this.#reply, message, this.control);
  }
}

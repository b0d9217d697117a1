/**
 * One command of a remote pool ({@linkcode RemoteCommand}): its offer to the pool's agents, and, once one took it, the
 * request channel its execution talks to, relayed in NATS messages.
 *
 * @module
 */

import { SpawnPoolError, type SpawnPoolErrorCode } from "../core/errors.ts";
import type { Submission } from "../core/scheduler.ts";
import {
  concatBytes,
  decodeJson,
  decodeU32,
  encodeCredit,
  Frame,
  type FrameType,
  ProtocolError,
} from "../core/frame.ts";
import { deliverFrame, type RequestChannel, type RequestSink } from "../core/request_sink.ts";
import { type NatsMsg, noResponders } from "./_nats.ts";
import {
  type Accepted,
  AGENT_SILENCE_MS,
  type AgentInfo,
  decodeMessage,
  encodeMessage,
  frameParts,
  frameRoom,
  HEARTBEAT_MS,
  messageOf,
  REMOTE_ID,
  RemoteFrame,
  Sequence,
  validSubject,
} from "./wire.ts";

/** Codes an agent may report a command's failure with; anything else is a broken agent. */
const AGENT_FAILURES: ReadonlySet<string> = new Set<SpawnPoolErrorCode>([
  "ERR_WORKER_DIED",
  "ERR_WORKER_START",
  "ERR_QUEUE_FULL",
  "ERR_POOL_CLOSED",
  "ERR_REMOTE_LOST",
  "ERR_PROTOCOL",
]);

/** A busy agent's command is offered again after this long, doubled each time up to the most. */
const BUSY_RETRY_MS = 5;
const BUSY_RETRY_MAX_MS = 200;

/** What a command needs of its pool. */
export interface CommandPool {
  /** The subject agents listen on. */
  readonly subject: string;
  /** The largest message the servers take. */
  readonly maxPayload: number;
  /** A new reply subject for an offer of `command`. */
  register(command: RemoteCommand): string;
  /** Forgets a reply subject. */
  unregister(reply: string): void;
  /** Forgets a reply subject after `ms`. */
  unregisterLater(reply: string, ms: number): void;
  /** The command ended. */
  ended(command: RemoteCommand): void;
  /** Publishes a message; false when it could not go. */
  publish(subject: string, data: Uint8Array, reply: string): boolean;
  /** Counts an agent's command. */
  agentStarted(info: AgentInfo): void;
  /** Counts an agent's command done. */
  agentDone(info: AgentInfo): void;
}

/** One command of a remote pool: the request channel its execution talks to, once an agent took it. */
export class RemoteCommand implements RequestChannel {
  readonly #pool: CommandPool;
  readonly #submission: Submission;
  #sink: RequestSink | undefined;
  /** The reply subject of the current offer ("" before the first). */
  #reply = "";
  #control: string | undefined;
  #agent: AgentInfo | undefined;
  #received = new Sequence();
  #sent = 0;
  /** Frames waiting to go, each frame's parts together. */
  #frames: Uint8Array[][] = [];
  #scheduled = false;
  /** Bytes consumed per stream, as the cumulative offsets the agent is told (mod 2^32). */
  #consumed = [0, 0, 0];
  /** For each stdin write in flight, the frames it went in: its acknowledgement is theirs, together. */
  #stdinParts: Array<{ left: number; written: boolean }> = [];
  #offeredAt = 0;
  #heardAt = 0;
  #sentAt = 0;
  #busy = 0;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #done = false;

  constructor(pool: CommandPool, submission: Submission) {
    this.#pool = pool;
    this.#submission = submission;
  }

  get accepted(): boolean {
    return this.#control !== undefined;
  }

  get cmd(): string {
    return this.#submission.request.cmd;
  }

  /** Whether `subject` is this command's control subject. */
  controls(subject: string): boolean {
    return this.#control === subject;
  }

  begin(sink: RequestSink): number {
    this.#sink = sink;
    return REMOTE_ID;
  }

  /** Offers the command to the agents (again, after a busy one). */
  offer(): void {
    if (this.#done) return;
    const { payload } = this.#submission;
    if (payload.byteLength > frameRoom(this.#pool.maxPayload)) {
      this.#submission.assign(this);
      this.#end();
      return this.#sink?.onSpawnError({
        code: "E2BIG",
        errno: -7,
        message: `Argument list too long: the request takes ${payload.byteLength} bytes, more than a NATS message's ` +
          `${this.#pool.maxPayload}`,
      });
    }
    this.#reply = this.#pool.register(this);
    this.#received = new Sequence();
    this.#offeredAt = this.#heardAt = Date.now();
    if (!this.#pool.publish(this.#pool.subject, encodeMessage(0, frameParts(Frame.Spawn, payload)), this.#reply)) {
      this.fail(this.#error("ERR_REMOTE_LOST", "The request could not be sent: the connection to NATS is closed"));
    }
  }

  send(type: FrameType, _id: number, payload?: Uint8Array | readonly Uint8Array[]): void {
    if (this.#done) return;
    let bytes = payload === undefined || payload instanceof Uint8Array ? payload : concatBytes(payload);
    if (type === Frame.Credit && bytes !== undefined) {
      // Credit travels as the cumulative offset consumed: a later credit covers an earlier one.
      const fd = bytes[0] as 1 | 2;
      this.#consumed[fd] = (this.#consumed[fd] + decodeU32(bytes, 1)) >>> 0;
      bytes = encodeCredit(fd, this.#consumed[fd]);
    }
    if (type === Frame.Stdin && bytes !== undefined) {
      // A write larger than a message goes in several frames, acknowledged as one.
      const room = frameRoom(this.#pool.maxPayload);
      const count = Math.max(1, Math.ceil(bytes.byteLength / room));
      this.#stdinParts.push({ left: count, written: true });
      for (let i = 0; i < count; i++) this.#frames.push(frameParts(type, bytes.subarray(i * room, (i + 1) * room)));
    } else {
      this.#frames.push(frameParts(type, bytes));
    }
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  /** Sends the waiting frames, in as few messages as the servers take. */
  #flush(): void {
    this.#scheduled = false;
    if (this.#control === undefined || this.#frames.length === 0) return;
    const frames = this.#frames;
    this.#frames = [];
    const limit = this.#pool.maxPayload - 4;
    let parts: Uint8Array[] = [];
    let bytes = 0;
    const send = () => {
      if (parts.length === 0) return;
      this.#sentAt = Date.now();
      const ok = this.#pool.publish(this.#control!, encodeMessage(this.#sent++, parts), this.#reply);
      parts = [];
      bytes = 0;
      if (!ok) this.#end(this.#error("ERR_REMOTE_LOST", "A message to the agent could not be sent"));
    };
    for (const frame of frames) {
      const size = frame.reduce((sum, part) => sum + part.byteLength, 0);
      if (bytes + size > limit) send();
      parts.push(...frame);
      bytes += size;
    }
    send();
  }

  ref(): void {}

  unrefRequest(): void {}

  abandon(why: string): void {
    this.fail(new SpawnPoolError("ERR_WORKER_DIED", `Agent ${this.#agentName()} ${why}; the command was cancelled`));
  }

  /**
   * Heartbeat: a word to a silent agent, and the end of a command whose agent went silent (judged only when `judge`:
   * see startHeartbeat in wire.ts).
   */
  tick(now: number, judge: boolean): void {
    if (this.#done || this.#reply === "") return;
    if (this.#control === undefined) {
      if (judge && this.#retry === undefined && now - this.#offeredAt > AGENT_SILENCE_MS) {
        this.fail(this.#error("ERR_REMOTE_LOST", `No agent answered the request in ${AGENT_SILENCE_MS} ms`));
      }
      return;
    }
    if (judge && now - this.#heardAt > AGENT_SILENCE_MS) {
      return this.fail(
        this.#error("ERR_WORKER_DIED", `Agent ${this.#agentName()} went silent for ${now - this.#heardAt} ms`),
      );
    }
    if (now - this.#sentAt >= HEARTBEAT_MS) this.send(RemoteFrame.Ping as FrameType, REMOTE_ID);
  }

  /** A message from the agent (or the server's word that nobody listens). */
  receive(msg: NatsMsg): void {
    if (this.#done) return this.#late(msg);
    if (noResponders(msg)) {
      return this.fail(
        this.#control === undefined
          ? this.#error("ERR_NO_AGENTS", `No agent listens on subject "${this.#pool.subject}"`)
          : this.#error("ERR_WORKER_DIED", `Agent ${this.#agentName()} is gone`),
      );
    }
    try {
      const { seq, frames } = decodeMessage(msg.data);
      if (!this.#received.accept(seq)) {
        return this.fail(this.#error("ERR_REMOTE_LOST", `A message from agent ${this.#agentName()} was lost`));
      }
      this.#heardAt = Date.now();
      if (this.#control === undefined) return this.#answer(frames);
      for (const { type, payload } of frames) {
        if (this.#done) return;
        this.#frame(type, payload);
      }
    } catch (error) {
      this.fail(
        this.#error("ERR_PROTOCOL", `Agent ${this.#agentName()} broke the protocol: ${messageOf(error)}`, error),
      );
    }
  }

  /**
   * An agent's answer to the offer: Busy or Failed alone (a refusal), or Accepted first, with the frames that came
   * with it.
   */
  #answer(frames: ReadonlyArray<{ type: number; payload: Uint8Array }>): void {
    const first = frames[0];
    if (first !== undefined && frames.length === 1 && first.type === RemoteFrame.Busy) return this.#busyAgent();
    if (first !== undefined && frames.length === 1 && first.type === RemoteFrame.Failed) {
      return this.#end(this.#failure(first.payload));
    }
    if (first === undefined || first.type !== RemoteFrame.Accepted) {
      throw new ProtocolError(`Frame of type ${first?.type} before the agent accepted`);
    }
    const { control, agent } = this.#accepted(first.payload);
    this.#control = control;
    this.#agent = agent;
    this.#pool.agentStarted(agent);
    this.#sentAt = Date.now();
    // The request runs now: the execution is assigned (its timeout backstop starts), and what it queued leaves.
    this.#submission.assign(this);
    for (const { type, payload } of frames.slice(1)) {
      if (this.#done) return;
      this.#frame(type, payload);
    }
  }

  /** Checks an Accepted frame: its control subject must be under the pool's subject and the agent's id. */
  #accepted(payload: Uint8Array): Accepted {
    const accepted = decodeJson(payload) as unknown as Accepted;
    const agent = accepted.agent;
    if (
      typeof agent !== "object" || agent === null || typeof agent.id !== "string" || !/^[\w-]{1,64}$/.test(agent.id) ||
      typeof agent.name !== "string" || agent.name.length > 256 || !Number.isInteger(agent.pid) ||
      typeof accepted.control !== "string" || !validSubject(accepted.control) ||
      !accepted.control.startsWith(`${this.#pool.subject}.ctl.${agent.id}.`)
    ) {
      throw new ProtocolError("Accepted frame is malformed");
    }
    return { control: accepted.control, agent: { id: agent.id, name: agent.name, pid: agent.pid } };
  }

  #frame(type: number, payload: Uint8Array): void {
    switch (type) {
      case RemoteFrame.Ping:
        return;
      case RemoteFrame.Failed:
        return this.#end(this.#failure(payload));
      case RemoteFrame.Accepted:
      case RemoteFrame.Busy:
        throw new ProtocolError(`Frame of type ${type} after the agent accepted`);
      case Frame.StdinAck: {
        // One acknowledgement per write, once the last of its frames is acknowledged.
        const write = this.#stdinParts[0];
        if (write === undefined) throw new ProtocolError("Stdin acknowledged that was never written");
        write.written &&= payload[0] === 0;
        if (--write.left > 0) return;
        this.#stdinParts.shift();
        payload = new Uint8Array([write.written ? 0 : 1]);
      }
    }
    // Kept as copies: the NATS client may read the next message into the same memory.
    if (deliverFrame(this.#sink!, type, REMOTE_ID, payload, true, -1)) this.#end();
  }

  /** A Failed frame's error, its code one an agent may report. */
  #failure(payload: Uint8Array): SpawnPoolError {
    const failure = decodeJson(payload);
    const code = String(failure.code);
    if (!AGENT_FAILURES.has(code) || typeof failure.message !== "string") {
      throw new ProtocolError("Failed frame is malformed");
    }
    return this.#error(code as SpawnPoolErrorCode, `Agent ${this.#agentName()}: ${failure.message.slice(0, 1000)}`);
  }

  /** A busy agent refused the command: it is offered again, after a while, to whichever agent takes it. */
  #busyAgent(): void {
    this.#pool.unregister(this.#reply);
    const delay = Math.min(BUSY_RETRY_MAX_MS, BUSY_RETRY_MS * 2 ** this.#busy++);
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      this.offer();
    }, delay);
  }

  /**
   * A message for an offer this command gave up on: an agent that accepted it late is told to cancel it at once
   * (rather than run it until it notices its caller's silence).
   */
  #late(msg: NatsMsg): void {
    try {
      const first = decodeMessage(msg.data).frames[0];
      if (first?.type !== RemoteFrame.Accepted) return;
      const { control } = this.#accepted(first.payload);
      this.#pool.unregister(this.#reply);
      this.#pool.publish(control, encodeMessage(0, frameParts(RemoteFrame.Cancel)), this.#reply);
    } catch {
      // Nothing to cancel.
    }
  }

  /** The command failed here: the agent is told to kill it, and the execution hears why. */
  fail(error: SpawnPoolError): void {
    if (this.#done) return;
    if (this.#control !== undefined) {
      this.#frames = [frameParts(RemoteFrame.Cancel)];
      this.#flush();
    }
    this.#end(error);
  }

  /** Done, with `error` or after the frame that completed the request. */
  #end(error?: SpawnPoolError): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#retry);
    if (this.#control === undefined && this.#reply !== "" && this.#retry === undefined) {
      // An offer may have reached an agent whose answer is on its way: the reply subject stays a while, to cancel it.
      this.#pool.unregisterLater(this.#reply, 2 * AGENT_SILENCE_MS);
    } else {
      this.#pool.unregister(this.#reply);
    }
    this.#pool.ended(this);
    if (this.#agent !== undefined) this.#pool.agentDone(this.#agent);
    if (error === undefined) return;
    if (this.#sink !== undefined) this.#sink.onFail(error);
    else this.#submission.reject(error);
  }

  #agentName(): string {
    return this.#agent === undefined ? "(none yet)" : `"${this.#agent.name}" (pid ${this.#agent.pid})`;
  }

  #error(code: SpawnPoolErrorCode, message: string, cause?: unknown): SpawnPoolError {
    return new SpawnPoolError(code, message, { command: this.cmd, cause });
  }
}

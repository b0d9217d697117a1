/**
 * The caller's side of a remote pool: each command goes to one of the agents listening on the pool's subject,
 * and its frames travel in NATS messages ({@linkcode ./wire.ts}). The API shapes see a scheduler like the local
 * pool's.
 *
 * @module
 */

import { SpawnPoolError, type SpawnPoolErrorCode } from "../core/errors.ts";
import type { Scheduler, Submission } from "../core/execution.ts";
import {
  concatBytes,
  decodeJson,
  decodeU32,
  encodeCredit,
  Frame,
  type FrameType,
  ProtocolError,
} from "../core/frame.ts";
import type { PoolStats } from "../core/pool_core.ts";
import { deliverFrame, type RequestChannel, type RequestSink } from "../core/worker_handle.ts";
import { connectNats, type NatsConnection, type NatsMsg, newInbox, noResponders } from "./_nats.ts";
import { checkRemoteOptions, type RemoteOptions } from "./options.ts";
import {
  type Accepted,
  AGENT_SILENCE_MS,
  type AgentInfo,
  decodeMessage,
  encodeMessage,
  frameParts,
  HEARTBEAT_MS,
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

/**
 * A pool with no command for this long closes its connection (and opens another for its next command): like a local
 * pool's idle workers, an idle remote pool does not keep its process alive.
 */
const IDLE_CLOSE_MS = 1_000;

/** A busy agent's command is offered again after this long, doubled each time up to the most. */
const BUSY_RETRY_MS = 5;
const BUSY_RETRY_MAX_MS = 200;

/** The caller's side of a remote pool. */
export class RemotePool implements Scheduler {
  readonly #options: RemoteOptions & { subject: string };
  readonly #maxQueue: number;
  #connecting: Promise<NatsConnection> | undefined;
  #nc: NatsConnection | undefined;
  #inbox = "";
  #next = 0;
  /** Commands by the reply subject of their current offer. */
  readonly #commands = new Map<string, RemoteCommand>();
  /** Agents that took commands: what they run and have run. */
  readonly #agents = new Map<string, { info: AgentInfo; inFlight: number; completed: number }>();
  #timer: ReturnType<typeof setInterval> | undefined;
  #idle: ReturnType<typeof setTimeout> | undefined;
  #closed: Promise<void> | undefined;
  /** Closed, and done closing: no agent is the pool's any more. */
  #shut = false;

  /**
   * Creates a remote pool; it connects on its first command or `ready()`.
   *
   * @throws {TypeError} For bad options.
   */
  constructor(options: RemoteOptions, maxQueue: number = Infinity) {
    this.#options = checkRemoteOptions(options);
    this.#maxQueue = maxQueue;
  }

  /** The pool's subject. */
  get subject(): string {
    return this.#options.subject;
  }

  /** Resolves once connected and an agent answered; rejects with `ERR_NO_AGENTS` when none listens. */
  async ready(): Promise<void> {
    if (this.#closed) throw poolClosed();
    const nc = await this.#connect();
    try {
      await nc.request(`${this.subject}.agents`, new Uint8Array(0), { timeout: 2_000 });
    } catch (error) {
      throw new SpawnPoolError("ERR_NO_AGENTS", `No agent answers on subject "${this.subject}"`, { cause: error });
    }
  }

  /** @internal Sends a command to an agent, once connected. */
  submit(submission: Submission): void {
    if (this.#closed) return submission.reject(poolClosed(submission.request.cmd));
    if (this.#waiting() >= this.#maxQueue) {
      return submission.reject(
        new SpawnPoolError("ERR_QUEUE_FULL", `Pool queue is full (maxQueue ${this.#maxQueue})`, {
          command: submission.request.cmd,
        }),
      );
    }
    const command = new RemoteCommand(this, submission);
    submission.assign(command);
    this.#connect().then(
      () => command.offer(),
      (error) => command.fail(error instanceof SpawnPoolError ? error : connectFailed(error)),
    );
  }

  /** Counts of commands, and per agent that ran some (none once the pool is closed). */
  stats(): PoolStats {
    let inFlight = 0;
    let queued = 0;
    for (const command of new Set(this.#commands.values())) command.accepted ? inFlight++ : queued++;
    return {
      runtime: "remote",
      inFlight,
      queued,
      started: this.#agents.size,
      workers: this.#shut ? [] : [...this.#agents.values()].map((agent) => ({
        pid: agent.info.pid,
        ready: true,
        inFlight: agent.inFlight,
        completed: agent.completed,
        agent: agent.info.name,
      })),
    };
  }

  /**
   * Closes the pool: with `drain` (the default) running commands finish first; otherwise they are cancelled (their
   * agents kill them) and fail with `ERR_POOL_CLOSED`. Resolves once the connection is closed.
   */
  close(options: { drain?: boolean } = {}): Promise<void> {
    this.#closed ??= this.#shutdown(options.drain ?? true);
    return this.#closed;
  }

  async #shutdown(drain: boolean): Promise<void> {
    await Promise.resolve();
    while (drain && this.#commands.size > 0) await new Promise((resolve) => setTimeout(resolve, 5));
    for (const command of new Set(this.#commands.values())) command.fail(poolClosed(command.cmd));
    clearInterval(this.#timer);
    clearTimeout(this.#idle);
    const nc = this.#nc ?? await this.#connecting?.catch(() => undefined);
    await nc?.drain().catch(() => nc.close());
    this.#shut = true;
  }

  /** Closes the connection of a pool that has had no command for a while; the next command connects again. */
  #closeIdle(): void {
    this.#idle = undefined;
    const nc = this.#nc;
    if (nc === undefined || this.#commands.size > 0 || this.#closed) return;
    this.#forget(nc);
    void nc.drain().catch(() => nc.close());
  }

  /** Stops using a connection: the next command makes another. */
  #forget(nc: NatsConnection): void {
    if (this.#nc !== nc) return;
    this.#nc = undefined;
    this.#connecting = undefined;
    clearInterval(this.#timer);
  }

  #waiting(): number {
    let waiting = 0;
    for (const command of this.#commands.values()) if (!command.accepted) waiting++;
    return waiting;
  }

  #connect(): Promise<NatsConnection> {
    clearTimeout(this.#idle);
    this.#idle = undefined;
    this.#connecting ??= (async () => {
      const nc = await connectNats(this.#options, "spawnpool");
      this.#inbox = await newInbox();
      nc.subscribe(`${this.#inbox}.*`, { callback: (_error, msg) => this.#commands.get(msg.subject)?.receive(msg) });
      this.#nc = nc;
      this.#timer = setInterval(() => {
        const now = Date.now();
        for (const command of new Set(this.#commands.values())) command.tick(now);
      }, HEARTBEAT_MS);
      (this.#timer as { unref?: () => void }).unref?.();
      void nc.closed().then((error) => {
        // Closed by close() or when idle, or for good by the client (it retries forever otherwise): what runs is lost.
        if (this.#nc !== nc) return;
        this.#forget(nc);
        const lost = new SpawnPoolError("ERR_REMOTE_LOST", "The connection to NATS closed", { cause: error });
        for (const command of new Set(this.#commands.values())) command.fail(this.#closed ? poolClosed() : lost);
      });
      this.#idleLater();
      return nc;
    })();
    this.#connecting.catch(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /** @internal A new reply subject for a command's offer. */
  register(command: RemoteCommand): string {
    const reply = `${this.#inbox}.${(this.#next++).toString(36)}`;
    this.#commands.set(reply, command);
    return reply;
  }

  /** @internal Forgets a reply subject. */
  unregister(reply: string): void {
    this.#commands.delete(reply);
    this.#idleLater();
  }

  /** Arms the idle close, when nothing runs. */
  #idleLater(): void {
    if (this.#commands.size === 0 && this.#idle === undefined && this.#nc !== undefined && !this.#closed) {
      this.#idle = setTimeout(() => this.#closeIdle(), IDLE_CLOSE_MS);
      (this.#idle as { unref?: () => void }).unref?.();
    }
  }

  /** @internal Publishes a message. */
  publish(subject: string, data: Uint8Array, reply: string): boolean {
    if (this.#nc === undefined) return false;
    this.#nc.publish(subject, data, { reply });
    return true;
  }

  /** @internal The largest message the servers take. */
  get maxPayload(): number {
    return this.#nc?.info?.max_payload ?? 1024 * 1024;
  }

  /** @internal Counts an agent's command. */
  agentStarted(info: AgentInfo): void {
    const agent = this.#agents.get(info.id) ?? { info, inFlight: 0, completed: 0 };
    agent.inFlight++;
    this.#agents.set(info.id, agent);
  }

  /** @internal Counts an agent's command done. */
  agentDone(info: AgentInfo): void {
    const agent = this.#agents.get(info.id);
    if (agent === undefined) return;
    agent.inFlight--;
    agent.completed++;
  }
}

/** One command of a remote pool: the request channel its execution talks to. */
class RemoteCommand implements RequestChannel {
  readonly #pool: RemotePool;
  readonly #submission: Submission;
  #sink: RequestSink | undefined;
  /** The reply subject of the current offer. */
  #reply = "";
  #control: string | undefined;
  #agent: AgentInfo | undefined;
  #received = new Sequence();
  #sent = 0;
  /** Frames waiting to go (all of them until the agent named the control subject). */
  #parts: Uint8Array[] = [];
  #scheduled = false;
  /** Bytes consumed per stream, as the cumulative offsets the agent is told (mod 2^32). */
  #consumed = [0, 0, 0];
  #offeredAt = 0;
  #heardAt = 0;
  #sentAt = 0;
  #busy = 0;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #done = false;

  constructor(pool: RemotePool, submission: Submission) {
    this.#pool = pool;
    this.#submission = submission;
  }

  get accepted(): boolean {
    return this.#control !== undefined;
  }

  get cmd(): string {
    return this.#submission.request.cmd;
  }

  begin(sink: RequestSink): number {
    this.#sink = sink;
    return REMOTE_ID;
  }

  /** Offers the command to the agents (again, after a busy one). */
  offer(): void {
    if (this.#done) return;
    const { payload } = this.#submission;
    if (payload.byteLength + 64 > this.#pool.maxPayload) {
      this.#done = true;
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
    this.#pool.publish(this.#pool.subject, encodeMessage(0, frameParts(Frame.Spawn, payload)), this.#reply);
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
    this.#parts.push(...frameParts(type, bytes));
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(() => this.#flush());
    }
  }

  #flush(): void {
    this.#scheduled = false;
    if (this.#control === undefined || this.#done || this.#parts.length === 0) return;
    const parts = this.#parts;
    this.#parts = [];
    this.#sentAt = Date.now();
    this.#pool.publish(this.#control, encodeMessage(this.#sent++, parts), this.#reply);
  }

  ref(): void {}

  unrefRequest(): void {}

  abandon(why: string): void {
    this.fail(new SpawnPoolError("ERR_WORKER_DIED", `Agent ${this.#agentName()} ${why}; the command was cancelled`));
  }

  /** Heartbeat: a word to a silent agent, and the end of a command whose agent went silent. */
  tick(now: number): void {
    if (this.#done) return;
    if (this.#control === undefined) {
      if (this.#retry === undefined && now - this.#offeredAt > AGENT_SILENCE_MS) {
        this.fail(this.#error("ERR_REMOTE_LOST", `No agent answered the request in ${AGENT_SILENCE_MS} ms`));
      }
      return;
    }
    if (now - this.#heardAt > AGENT_SILENCE_MS) {
      return this.fail(
        this.#error("ERR_WORKER_DIED", `Agent ${this.#agentName()} went silent for ${now - this.#heardAt} ms`),
      );
    }
    if (now - this.#sentAt >= HEARTBEAT_MS) this.send(RemoteFrame.Ping as never, REMOTE_ID);
  }

  /** A message from the agent (or the server's word that nobody listens). */
  receive(msg: NatsMsg): void {
    if (this.#done) return;
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

  #frame(type: number, payload: Uint8Array): void {
    if (this.#control === undefined) {
      if (type === RemoteFrame.Busy) return this.#busyAgent();
      if (type !== RemoteFrame.Accepted) throw new ProtocolError(`Frame of type ${type} before the agent accepted`);
      const accepted = decodeJson(payload) as unknown as Accepted;
      const agent = accepted.agent;
      if (
        typeof accepted.control !== "string" || !accepted.control.startsWith(`${this.#pool.subject}.ctl.`) ||
        !validSubject(accepted.control) || typeof agent !== "object" || agent === null ||
        typeof agent.id !== "string" || typeof agent.name !== "string" || typeof agent.pid !== "number"
      ) {
        throw new ProtocolError("Accepted frame is malformed");
      }
      this.#control = accepted.control;
      this.#agent = { id: agent.id, name: agent.name, pid: agent.pid };
      this.#pool.agentStarted(this.#agent);
      this.#sentAt = Date.now();
      if (this.#parts.length > 0) this.#flush();
      return;
    }
    switch (type) {
      case RemoteFrame.Ping:
        return;
      case RemoteFrame.Failed: {
        const failure = decodeJson(payload);
        const code = String(failure.code);
        if (!AGENT_FAILURES.has(code) || typeof failure.message !== "string") {
          throw new ProtocolError("Failed frame is malformed");
        }
        return this.#end(this.#error(code as SpawnPoolErrorCode, `Agent ${this.#agentName()}: ${failure.message}`));
      }
      case RemoteFrame.Accepted:
      case RemoteFrame.Busy:
        throw new ProtocolError(`Frame of type ${type} after the agent accepted`);
    }
    if (deliverFrame(this.#sink!, type, REMOTE_ID, payload, false, -1)) this.#end();
  }

  /** A busy agent refused the command: it is offered again, after a while, to whichever agent takes it. */
  #busyAgent(): void {
    this.#pool.unregister(this.#reply);
    const delay = Math.min(BUSY_RETRY_MAX_MS, BUSY_RETRY_MS * 2 ** this.#busy++);
    this.#reply = this.#pool.register(this); // still counted as queued while it waits
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      this.#pool.unregister(this.#reply);
      this.offer();
    }, delay);
  }

  /** The command failed here: the agent is told to kill it, and the execution hears why. */
  fail(error: SpawnPoolError): void {
    if (this.#done) return;
    if (this.#control !== undefined) {
      this.#parts = frameParts(RemoteFrame.Cancel);
      this.#flush();
    }
    this.#end(error);
  }

  /** Done, with `error` or after the frame that completed the request. */
  #end(error?: SpawnPoolError): void {
    if (this.#done) return;
    this.#done = true;
    clearTimeout(this.#retry);
    this.#pool.unregister(this.#reply);
    if (this.#agent !== undefined) this.#pool.agentDone(this.#agent);
    if (error !== undefined) this.#sink?.onFail(error);
  }

  #agentName(): string {
    return this.#agent === undefined ? "(none yet)" : `"${this.#agent.name}" (pid ${this.#agent.pid})`;
  }

  #error(code: SpawnPoolErrorCode, message: string, cause?: unknown): SpawnPoolError {
    return new SpawnPoolError(code, message, { command: this.cmd, cause });
  }
}

function poolClosed(command?: string): SpawnPoolError {
  return new SpawnPoolError("ERR_POOL_CLOSED", "Pool is closed", { command });
}

function connectFailed(error: unknown): SpawnPoolError {
  return new SpawnPoolError("ERR_REMOTE_CONNECT", `Could not connect to NATS: ${messageOf(error)}`, { cause: error });
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

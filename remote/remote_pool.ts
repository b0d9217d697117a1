/**
 * The caller's side of a remote pool: each command goes to one of the agents listening on the pool's subject,
 * and its frames travel in NATS messages ({@linkcode ./wire.ts}). The API shapes see a scheduler like the local
 * pool's.
 *
 * @module
 */

import { poolClosed, SpawnPoolError } from "../core/errors.ts";
import type { Scheduler, Submission } from "../core/scheduler.ts";
import type { SpawnRequest } from "../core/frame.ts";
import type { PoolStats } from "../core/pool_stats.ts";
import { type CommandPool, RemoteCommand } from "./_remote_command.ts";
import { connectNats, type NatsConnection, newInbox } from "./_nats.ts";
import { checkRemoteOptions, type RemoteOptions } from "./options.ts";
import { type AgentInfo, maxPayloadOf, messageOf, randomToken, startHeartbeat } from "./wire.ts";

/**
 * A pool with no command for this long closes its connection (and opens another for its next command): like a local
 * pool's idle workers, an idle remote pool does not keep its process alive.
 */
const IDLE_CLOSE_MS = 1_000;

/** Agents remembered for `stats()` once they run nothing for this pool (the busy ones are always listed). */
const IDLE_AGENTS_KEPT = 64;

/** The caller's side of a remote pool. */
export class RemotePool implements Scheduler, CommandPool {
  readonly #options: RemoteOptions & { subject: string };
  readonly #maxQueue: number;
  readonly #admit: ((request: SpawnRequest, resolve?: boolean) => void) | undefined;
  #connecting: Promise<NatsConnection> | undefined;
  #nc: NatsConnection | undefined;
  #inbox = "";
  /** Every command from its submission to its end. */
  readonly #live = new Set<RemoteCommand>();
  /** Commands (and the offers of cancelled ones) by the reply subject of their offer. */
  readonly #replies = new Map<string, RemoteCommand>();
  /** Agents that took commands: what they run and have run. */
  readonly #agents = new Map<string, { info: AgentInfo; inFlight: number; completed: number }>();
  #agentsSeen = 0;
  #timer: ReturnType<typeof setInterval> | undefined;
  #idle: ReturnType<typeof setTimeout> | undefined;
  /** The timers of reply subjects kept a while after their commands ended ({@linkcode RemotePool.unregisterLater}). */
  readonly #lingering = new Set<ReturnType<typeof setTimeout>>();
  /** Calls that need the connection while no command runs (`ready()`): no idle close meanwhile. */
  #holds = 0;
  #closed: Promise<void> | undefined;
  /** Closed, and done closing: no agent is the pool's any more. */
  #shut = false;

  /**
   * Creates a remote pool; it connects on its first command or `ready()`.
   *
   * @throws {TypeError} For bad options.
   */
  constructor(
    options: RemoteOptions,
    maxQueue: number = Infinity,
    admit?: (request: SpawnRequest, resolve?: boolean) => void,
  ) {
    this.#options = checkRemoteOptions(options);
    this.#maxQueue = maxQueue;
    this.#admit = admit;
  }

  /**
   * @internal Applies the host runtime's rules for starting a command (a Deno host's run permission): the caller's
   * permissions bind what it asks of agents as they bind what it asks of local workers.
   */
  admit(request: SpawnRequest): void {
    this.#admit?.(request, false);
  }

  /** The pool's subject. */
  get subject(): string {
    return this.#options.subject;
  }

  /** Resolves once connected and an agent answered; rejects with `ERR_NO_AGENTS` when none listens. */
  async ready(): Promise<void> {
    if (this.#closed) throw poolClosed();
    this.#holds++;
    try {
      const nc = await this.#connect();
      try {
        await nc.request(`${this.subject}.agents`, new Uint8Array(0), { timeout: 2_000 });
      } catch (error) {
        throw new SpawnPoolError("ERR_NO_AGENTS", `No agent answers on subject "${this.subject}"`, { cause: error });
      }
    } finally {
      this.#holds--;
      this.#idleLater();
    }
  }

  /** @internal Sends a command to an agent, once connected. */
  submit(submission: Submission): void {
    if (this.#closed) return submission.reject(poolClosed(submission.request.cmd));
    if (this.#maxQueue !== Infinity && this.#waiting() >= this.#maxQueue) {
      return submission.reject(
        new SpawnPoolError("ERR_QUEUE_FULL", `Pool queue is full (maxQueue ${this.#maxQueue})`, {
          command: submission.request.cmd,
        }),
      );
    }
    const command = new RemoteCommand(this, submission);
    this.#live.add(command);
    clearTimeout(this.#idle);
    this.#idle = undefined;
    this.#connect().then(
      () => command.offer(),
      (error) => command.fail(error instanceof SpawnPoolError ? error : connectFailed(error)),
    );
  }

  /** Counts of commands, and per agent that ran some (none once the pool is closed). */
  stats(): PoolStats {
    let inFlight = 0;
    for (const command of this.#live) if (command.accepted) inFlight++;
    return {
      runtime: "remote",
      inFlight,
      queued: this.#live.size - inFlight,
      started: this.#agentsSeen,
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
   * Closes the pool: with `drain` (the default) running and waiting commands finish first; otherwise they are
   * cancelled (their agents kill them) and fail with `ERR_POOL_CLOSED`. Resolves once the connection is closed.
   */
  close(options: { drain?: boolean } = {}): Promise<void> {
    this.#closed ??= this.#shutdown(options.drain ?? true);
    return this.#closed;
  }

  async #shutdown(drain: boolean): Promise<void> {
    await Promise.resolve();
    while (drain && this.#live.size > 0) await new Promise((resolve) => setTimeout(resolve, 5));
    for (const command of [...this.#live]) command.fail(poolClosed(command.cmd));
    clearInterval(this.#timer);
    clearTimeout(this.#idle);
    for (const timer of this.#lingering) clearTimeout(timer);
    this.#lingering.clear();
    const nc = this.#nc ?? await this.#connecting?.catch(() => undefined);
    await nc?.drain().catch(() => nc.close());
    this.#shut = true;
  }

  #waiting(): number {
    let waiting = 0;
    for (const command of this.#live) if (!command.accepted) waiting++;
    return waiting;
  }

  #connect(): Promise<NatsConnection> {
    this.#connecting ??= (async () => {
      const nc = await connectNats(this.#options, this.#options.name ?? "spawnpool");
      this.#inbox = await newInbox(this.#options.inboxPrefix);
      nc.subscribe(`${this.#inbox}.*`, {
        callback: (error, msg) => {
          if (error === null) this.#replies.get(msg.subject)?.receive(msg);
        },
      });
      this.#nc = nc;
      this.#timer = startHeartbeat((now, judge) => {
        for (const command of [...this.#live]) command.tick(now, judge);
      });
      (this.#timer as { unref?: () => void }).unref?.();
      void nc.closed().then((error) => {
        // Closed by close() or when idle, or for good by the client (it retries forever otherwise): what runs is lost.
        if (this.#nc !== nc) return;
        this.#forget(nc);
        const lost = new SpawnPoolError("ERR_REMOTE_LOST", "The connection to NATS closed", { cause: error });
        for (const command of [...this.#live]) command.fail(this.#closed ? poolClosed() : lost);
      });
      void this.#watch(nc);
      this.#idleLater();
      return nc;
    })();
    this.#connecting.catch(() => (this.#connecting = undefined));
    return this.#connecting;
  }

  /**
   * Fails the commands a permissions violation stops, at once and saying so, rather than when their agent's silence
   * runs out: a spawn subject this caller may not publish to fails the commands not yet taken; a control subject, its
   * command; an inbox it may not subscribe to, every command.
   */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      const error = status.error;
      if (status.type !== "error" || error?.operation === undefined || error.subject === undefined) continue;
      const { operation, subject } = error;
      const denied = new SpawnPoolError(
        "ERR_REMOTE_CONNECT",
        `NATS refused to let this caller ${operation === "publish" ? "publish to" : "subscribe to"} "${subject}": ` +
          `grant it in the servers' permissions (docs/remote.md#security)`,
        { cause: error },
      );
      for (const command of [...this.#live]) {
        if (
          operation === "subscription" || (subject === this.subject ? !command.accepted : command.controls(subject))
        ) {
          command.fail(denied);
        }
      }
    }
  }

  /** Arms the idle close, when nothing runs or waits. */
  #idleLater(): void {
    if (this.#live.size > 0 || this.#holds > 0 || this.#idle !== undefined || this.#nc === undefined) return;
    if (this.#closed) return;
    this.#idle = setTimeout(() => this.#closeIdle(), IDLE_CLOSE_MS);
    (this.#idle as { unref?: () => void }).unref?.();
  }

  /** Closes the connection of a pool that has had no command for a while; the next command connects again. */
  #closeIdle(): void {
    this.#idle = undefined;
    const nc = this.#nc;
    if (nc === undefined || this.#live.size > 0 || this.#holds > 0 || this.#closed) return;
    this.#forget(nc);
    this.#replies.clear(); // offers of cancelled commands: their agents see the inbox gone
    void nc.drain().catch(() => nc.close());
  }

  /** Stops using a connection: the next command makes another. */
  #forget(nc: NatsConnection): void {
    if (this.#nc !== nc) return;
    this.#nc = undefined;
    this.#connecting = undefined;
    clearInterval(this.#timer);
  }

  /** @internal A new reply subject for a command's offer: random, so that no agent can guess another's. */
  register(command: RemoteCommand): string {
    const reply = `${this.#inbox}.${randomToken()}`;
    this.#replies.set(reply, command);
    return reply;
  }

  /** @internal Forgets a reply subject. */
  unregister(reply: string): void {
    this.#replies.delete(reply);
  }

  /**
   * @internal Forgets a reply subject after `ms`: an offer may have reached an agent whose answer is on its way, to be
   * cancelled when it comes. The wait never keeps the process alive, and close() ends it (the connection goes).
   */
  unregisterLater(reply: string, ms: number): void {
    const timer = setTimeout(() => {
      this.#lingering.delete(timer);
      this.unregister(reply);
    }, ms);
    (timer as { unref?: () => void }).unref?.();
    this.#lingering.add(timer);
  }

  /** @internal A command ended (it may keep its reply subject a while, to cancel a late acceptance). */
  ended(command: RemoteCommand): void {
    this.#live.delete(command);
    this.#idleLater();
  }

  /**
   * @internal Publishes a message; false when it could not go (no connection, or the client refused it, as a message
   * larger than the servers take).
   */
  publish(subject: string, data: Uint8Array, reply: string): boolean {
    if (this.#nc === undefined) return false;
    try {
      this.#nc.publish(subject, data, { reply });
      return true;
    } catch {
      return false;
    }
  }

  /** @internal The largest message the servers take. */
  get maxPayload(): number {
    return maxPayloadOf(this.#nc);
  }

  /** @internal Counts an agent's command. */
  agentStarted(info: AgentInfo): void {
    let agent = this.#agents.get(info.id);
    if (agent === undefined) {
      agent = { info, inFlight: 0, completed: 0 };
      this.#agents.set(info.id, agent);
      this.#agentsSeen++;
    }
    agent.inFlight++;
  }

  /** @internal Counts an agent's command done; an idle agent is forgotten once many are remembered. */
  agentDone(info: AgentInfo): void {
    const agent = this.#agents.get(info.id);
    if (agent === undefined) return;
    agent.inFlight--;
    agent.completed++;
    if (agent.inFlight === 0 && this.#agents.size > IDLE_AGENTS_KEPT) this.#agents.delete(info.id);
  }
}

function connectFailed(error: unknown): SpawnPoolError {
  return new SpawnPoolError("ERR_REMOTE_CONNECT", `Could not connect to NATS: ${messageOf(error)}`, { cause: error });
}

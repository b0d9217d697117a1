/**
 * The agent's side of a remote pool: takes commands from the callers of its subject (one agent of the queue group
 * takes each), runs them on a local pool, and relays their frames both ways ({@linkcode ./wire.ts}).
 *
 * @module
 */

import type { Platform } from "../core/adapter.ts";
import { encodeJson, Frame, type SpawnRequest } from "../core/frame.ts";
import { PoolCore } from "../core/pool_core.ts";
import type { PoolOptions } from "../core/pool_options.ts";
import { checkRequest } from "./_agent_request.ts";
import { connectNats, type NatsConnection, type NatsMsg, type NatsSubscription, noResponders } from "./_nats.ts";
import { Relay, type RelayAgent } from "./_relay.ts";
import { checkRemoteOptions, type RemoteOptions } from "./options.ts";
import {
  type AgentInfo,
  decodeMessage,
  encodeMessage,
  frameParts,
  isInbox,
  maxPayloadOf,
  messageOf,
  randomToken,
  RemoteFrame,
  startHeartbeat,
} from "./wire.ts";

/** Options of an agent. */
export interface AgentOptions extends RemoteOptions {
  /** The queue group agents of one fleet share. @default {"spawnpool"} */
  queue?: string;
  /** Commands this agent runs at once; past it, callers are told to try another. @default {32} */
  concurrency?: number;
  /** The local pool's options (its size, worker runtime). */
  pool?: PoolOptions;
  /** What the agent calls itself in callers' errors and stats. @default {the host name} */
  agentName?: string;
  /**
   * The agent's id in its control subjects (`<subject>.ctl.<id>.*`): fixed, so that NATS permissions can confine the
   * agent to its own. Letters, digits, `-` and `_`, at most 32. @default {random, per process}
   */
  agentId?: string;
  /**
   * The most buffered output (`output()`, `execFile`) a command may collect here, whatever its caller asks; past it the
   * command is killed, as by `maxBuffer`. @default {256 MiB}
   */
  maxBuffer?: number;
  /** Told of each command's start and end, and of errors. */
  log?: (event: AgentEvent) => void;
}

/** What an agent logs: one event per command start and end, and per error. */
export interface AgentEvent {
  /** What happened ("insecure": the CLI's warning that it runs without credentials, `--insecure`). */
  event: "listening" | "start" | "exit" | "failed" | "busy" | "killed" | "refused" | "stopped" | "insecure";
  /** The command's id on this agent (its control token's first characters). */
  id?: string;
  /** The program. */
  cmd?: string;
  /** Its arguments (in verbose logs only: the CLI leaves them out otherwise). */
  args?: string[];
  /** The command's pid on this machine. */
  pid?: number;
  /** Its exit code. */
  code?: number | null;
  /** The signal that ended it. */
  signal?: string | null;
  /** Milliseconds it ran. */
  ms?: number;
  /** Why, for failures and kills. */
  reason?: string;
}

/** The agent's default bound on a command's buffered output. */
const DEFAULT_MAX_BUFFER = 256 * 1024 * 1024;

/** An agent: serves a remote pool's subject from a local pool. */
export class Agent implements RelayAgent {
  readonly #options: AgentOptions & { subject: string };
  readonly #pool: PoolCore;
  readonly #concurrency: number;
  readonly #info: AgentInfo;
  readonly #log: (event: AgentEvent) => void;
  #nc: NatsConnection | undefined;
  #subscriptions: NatsSubscription[] = [];
  /** Commands by their control subject. */
  readonly #relays = new Map<string, Relay>();
  #timer: ReturnType<typeof setInterval> | undefined;
  #stopped: Promise<void> | undefined;
  #draining = true;
  readonly #maxBuffer: number;
  /** Resolves when the connection closed for good while the agent was not stopping (with why). */
  readonly closed: Promise<Error | undefined>;
  #onClosed: (error: Error | undefined) => void = () => {};

  /**
   * Creates an agent; {@linkcode Agent.start} connects it.
   *
   * @throws {TypeError} For bad options.
   * @throws {RangeError} For a concurrency that is not a positive integer.
   */
  constructor(platform: Platform, options: AgentOptions, hostName: string) {
    this.#options = checkRemoteOptions(options);
    const concurrency = options.concurrency ?? 32;
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency must be a positive integer, got ${String(options.concurrency)}`);
    }
    this.#concurrency = concurrency;
    const id = options.agentId ?? randomToken().slice(0, 12);
    if (typeof id !== "string" || !/^[A-Za-z0-9_-]{1,32}$/.test(id)) {
      throw new TypeError(`agentId must be 1 to 32 letters, digits, "-" or "_", got "${String(id)}"`);
    }
    const maxBuffer = options.maxBuffer ?? DEFAULT_MAX_BUFFER;
    if (!Number.isInteger(maxBuffer) || maxBuffer < 1) {
      throw new RangeError(`maxBuffer must be a positive integer, got ${String(options.maxBuffer)}`);
    }
    this.#maxBuffer = maxBuffer;
    this.#pool = new PoolCore(platform, options.pool);
    const name = options.agentName ?? hostName;
    if (typeof name !== "string" || name.length === 0 || name.length > 128) {
      throw new TypeError(`agentName must be 1 to 128 characters, got "${String(name).slice(0, 140)}"`);
    }
    this.#info = { id, name, pid: platform.host.pid() };
    this.#log = options.log ?? (() => {});
    this.closed = new Promise((resolve) => (this.#onClosed = resolve));
  }

  /** Connects, starts the local pool's workers and listens for commands. */
  async start(): Promise<void> {
    const nc = await connectNats(this.#options, `spawnpool agent ${this.#info.name}`);
    this.#nc = nc;
    void nc.closed().then((error) => {
      if (this.#stopped === undefined) this.#onClosed(error ?? new Error("The connection to NATS closed"));
    });
    void (async () => {
      // A permissions violation is the operator's to see: the agent is denied a subject it needs.
      for await (const status of nc.status()) {
        if (status.type === "error" && status.error?.operation !== undefined) {
          this.#log({ event: "failed", reason: status.error.message });
        }
      }
    })();
    await this.#pool.ready();
    const subject = this.#options.subject;
    this.#subscriptions = [
      nc.subscribe(subject, {
        queue: this.#options.queue ?? "spawnpool",
        callback: this.#guard("spawn", (msg) => this.#spawn(msg)),
      }),
      nc.subscribe(`${subject}.ctl.${this.#info.id}.*`, {
        callback: this.#guard("control", (msg) => this.#control(msg)),
      }),
      nc.subscribe(`${subject}.agents`, {
        callback: this.#guard("agents", (msg) => {
          // Answered, as commands are, on callers' inboxes only (a caller must not point the agent elsewhere).
          if (!isInbox(msg.reply)) {
            this.#log({ event: "refused", reason: `discovery: reply subject "${String(msg.reply)}" is not an inbox` });
            return;
          }
          this.publish(
            msg.reply,
            encodeJson({ ...this.#info, running: this.#relays.size, concurrency: this.#concurrency }),
          );
        }),
      }),
    ];
    await nc.flush();
    this.#timer = startHeartbeat((now, judge) => {
      for (const relay of this.#relays.values()) relay.tick(now, judge);
    });
    this.#log({ event: "listening", reason: `subject "${subject}", concurrency ${this.#concurrency}` });
  }

  /**
   * Stops taking commands; with `drain` (the default) waits for the running ones, otherwise kills them. Then closes
   * the local pool and the connection.
   */
  stop(options: { drain?: boolean } = {}): Promise<void> {
    if (options.drain === false) this.#draining = false; // a stop that drains is cut short by one that does not
    this.#stopped ??= (async () => {
      for (const subscription of this.#subscriptions.splice(0, 1)) subscription.unsubscribe();
      while (this.#draining && this.#relays.size > 0) await new Promise((resolve) => setTimeout(resolve, 10));
      for (const relay of this.#relays.values()) relay.end("ERR_WORKER_DIED", "The agent stopped");
      clearInterval(this.#timer);
      await this.#pool.close({ drain: false });
      for (const relay of this.#relays.values()) relay.forget();
      await this.#nc?.drain().catch(() => this.#nc?.close());
      this.#log({ event: "stopped" });
    })();
    return this.#stopped;
  }

  /**
   * A subscription's callback that never throws: the client reads no more messages after a callback throws (and one
   * that is passed an error, a permissions violation, has no message).
   */
  #guard(what: string, handle: (msg: NatsMsg) => void): (error: Error | null, msg: NatsMsg) => void {
    return (error, msg) => {
      try {
        if (error !== null) throw error;
        handle(msg);
      } catch (thrown) {
        this.#log({ event: "failed", reason: `${what}: ${messageOf(thrown)}` });
      }
    };
  }

  /** A caller's command. */
  #spawn(msg: NatsMsg): void {
    const reply = msg.reply;
    // Answers go to callers' inboxes only: an agent publishes as itself, and a caller must not point it elsewhere.
    if (!isInbox(reply) || this.#stopped) {
      if (!this.#stopped) this.#log({ event: "refused", reason: `reply subject "${String(reply)}" is not an inbox` });
      return;
    }
    let request: SpawnRequest;
    try {
      const { seq, frames } = decodeMessage(msg.data);
      if (seq !== 0 || frames.length !== 1 || frames[0].type !== Frame.Spawn) throw new Error("not a spawn request");
      // Checked as the workers check it: one they would take for a broken host would close the channel of a worker
      // and fail every command that it runs, other callers' too.
      request = checkRequest(frames[0].payload, this.#maxBuffer);
    } catch (error) {
      this.#log({ event: "refused", reason: messageOf(error) });
      const failure = { code: "ERR_PROTOCOL", message: `Malformed request: ${messageOf(error)}` };
      // A refusal: a Failed frame alone, so that the caller hears why rather than waiting for an answer.
      this.publish(reply, encodeMessage(0, frameParts(RemoteFrame.Failed, encodeJson(failure))));
      return;
    }
    if (this.#relays.size >= this.#concurrency) {
      this.#log({ event: "busy", cmd: request.cmd });
      this.publish(reply, encodeMessage(0, frameParts(RemoteFrame.Busy)));
      return;
    }
    const token = randomToken();
    const control = `${this.#options.subject}.ctl.${this.#info.id}.${token}`;
    const relay = new Relay(this, request, reply, control, randomToken().slice(0, 8));
    this.#relays.set(control, relay);
    relay.accept(encodeJson({ control, agent: this.#info }));
    this.#pool.submit(relay);
  }

  /** A message on a command's control subject (or the server's word that its caller's inbox is gone). */
  #control(msg: NatsMsg): void {
    const relay = this.#relays.get(msg.subject);
    if (relay === undefined) return;
    if (noResponders(msg)) return relay.kill("its caller is gone");
    relay.receive(msg.data);
  }

  /** @internal Publishes; false when the client refused (a closed connection, a message too large). */
  publish(subject: string, data: Uint8Array, reply?: string): boolean {
    try {
      this.#nc?.publish(subject, data, reply === undefined ? undefined : { reply });
      return this.#nc !== undefined;
    } catch (error) {
      this.#log({ event: "failed", reason: `publish: ${messageOf(error)}` });
      return false;
    }
  }

  /** @internal The largest message the servers take. */
  get maxPayload(): number {
    return maxPayloadOf(this.#nc);
  }

  /** @internal */
  log(event: AgentEvent): void {
    this.#log(event);
  }

  /** @internal */
  done(relay: Relay): void {
    this.#relays.delete(relay.control);
  }
}

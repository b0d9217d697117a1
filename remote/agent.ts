/**
 * The agent's side of a remote pool: takes commands from the callers of its subject (one agent of the queue group
 * takes each), runs them on a local pool, and relays their frames both ways ({@linkcode ./wire.ts}).
 *
 * @module
 */

import type { Platform } from "../core/adapter.ts";
import type { SpawnPoolError } from "../core/errors.ts";
import type { Submission } from "../core/execution.ts";
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
  type SpawnFailure,
  type SpawnRequest,
  type StreamFd,
} from "../core/frame.ts";
import { checkLimits } from "../core/limits.ts";
import { PoolCore, type PoolOptions } from "../core/pool_core.ts";
import { killGroups, startTimeOf } from "../adapters/_signals.ts";
import { signalNumber } from "../core/signals.ts";
import { parseRequest } from "../worker/job.ts";
import type { RequestChannel, RequestSink } from "../core/worker_handle.ts";
import { connectNats, type NatsConnection, type NatsMsg, type NatsSubscription, noResponders } from "./_nats.ts";
import { checkRemoteOptions, type RemoteOptions } from "./options.ts";
import {
  type AgentInfo,
  CALLER_SILENCE_MS,
  decodeMessage,
  encodeMessage,
  frameParts,
  frameRoom,
  HEARTBEAT_MS,
  isInbox,
  maxPayloadOf,
  randomToken,
  RemoteFrame,
  Sequence,
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

/** The largest flow-control window a caller may ask for, per stream. */
const MAX_WINDOW = 16 * 1024 * 1024;
/** The agent's default bound on a command's buffered output. */
const DEFAULT_MAX_BUFFER = 256 * 1024 * 1024;
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

/** An agent: serves a remote pool's subject from a local pool. */
export class Agent {
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
      request = checkRequest(parseRequest(frames[0].payload), this.#maxBuffer);
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

/**
 * Checks a caller's spawn request and rebuilds it, from the fields a {@linkcode SpawnRequest} has and nothing else,
 * as one an agent runs: stdin "inherit" reads nothing (the agent's stdin is not the caller's), no command outlives the
 * agent's hold on it (`detached` off), and each gets a process group of its own, so that a caller that goes away takes
 * all of it. A field the workers do not know is dropped, not passed on: whatever it holds (JSON nested deeper than the
 * native worker parses, say) would make a worker take its host for broken and fail every command it runs, other
 * callers' too. `raw` has passed {@linkcode parseRequest}; the fields it does not check are checked here.
 *
 * @throws {TypeError} For a field of the wrong type.
 * @throws {RangeError} For a limit out of range.
 */
function checkRequest(raw: SpawnRequest, maxBuffer: number): SpawnRequest {
  if (signalNumber(raw.killSignal) === undefined) throw new TypeError(`Unknown killSignal "${raw.killSignal}"`);
  const clearEnv: unknown = raw.clearEnv;
  if (clearEnv !== undefined && typeof clearEnv !== "boolean") throw new TypeError("clearEnv must be a boolean");
  for (const key of ["uid", "gid"] as const) {
    const id = raw[key];
    if (id !== undefined && (id < -0x8000_0000 || id > 0x7fff_ffff)) throw new TypeError(`${key} must be 32-bit`);
  }
  const request: SpawnRequest = {
    cmd: raw.cmd,
    args: [...raw.args],
    stdin: raw.stdin === "inherit" ? "null" : raw.stdin,
    stdout: raw.stdout,
    stderr: raw.stderr,
    buffered: raw.buffered,
    killSignal: raw.killSignal,
    forceKillAfterDelay: raw.forceKillAfterDelay,
    // What the agent holds for a caller is bounded whatever the caller asks: a window, and buffered output.
    window: Math.min(raw.window, MAX_WINDOW),
    detached: false,
    group: true,
  };
  if (raw.cwd !== undefined) request.cwd = raw.cwd;
  if (raw.env !== undefined) {
    // Without a prototype, a "__proto__" variable is one like any other.
    const env = Object.create(null) as Record<string, string>;
    for (const [name, value] of Object.entries(raw.env)) env[name] = value;
    request.env = env;
  }
  if (raw.clearEnv === true) request.clearEnv = true;
  if (raw.timeout !== undefined) request.timeout = raw.timeout;
  const most = raw.buffered ? Math.min(raw.maxBuffer ?? maxBuffer, maxBuffer) : raw.maxBuffer;
  if (most !== undefined) request.maxBuffer = most;
  if (raw.argv0 !== undefined) request.argv0 = raw.argv0;
  if (raw.uid !== undefined) request.uid = raw.uid;
  if (raw.gid !== undefined) request.gid = raw.gid;
  if (raw.sockets !== undefined) request.sockets = raw.sockets;
  if (raw.killTree === true) request.killTree = true;
  // Checked as a host checks them (a count at least 1), and rebuilt, as env is, from its own keys.
  const limits = checkLimits(raw.limits);
  if (limits !== undefined) request.limits = limits;
  // Checked by parseRequest (isWireTerminal); rebuilt from its own fields.
  if (raw.terminal !== undefined) {
    request.terminal = { cols: raw.terminal.cols, rows: raw.terminal.rows };
    if (raw.terminal.raw === true) request.terminal.raw = true;
  }
  return request;
}

/** One caller's command on this agent: a submission to the local pool, and the sink of its frames. */
class Relay implements Submission, RequestSink {
  readonly request: SpawnRequest;
  readonly payload: Uint8Array;
  id = 0;
  pid: number | undefined;
  readonly #agent: Agent;
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

  constructor(agent: Agent, request: SpawnRequest, reply: string, control: string, name: string) {
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

  onSpawnError(failure: SpawnFailure): void {
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

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

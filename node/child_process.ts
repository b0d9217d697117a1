/**
 * `node:child_process` over a pool: a `ChildProcess`-shaped event emitter with Node streams, and
 * `spawn`, `execFile` and `exec` with Node's argument handling, defaults, events and errors.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import * as native from "node:child_process";
import { EventEmitter } from "node:events";
import { constants as osConstants } from "node:os";
import { isAbsolute, resolve } from "node:path";
import process from "node:process";
import { Readable, Writable } from "node:stream";
import { setImmediate } from "node:timers";
import { fileURLToPath } from "node:url";
import { format, inspect } from "node:util";
import { SpawnError } from "../core/errors.ts";
import { CreditBatch, Execution, type OutputControls, type OutputSink, type Scheduler } from "../core/execution.ts";
import type { ExitInfo, StdioMode, StreamFd } from "../core/frame.ts";
import { buildRequest, DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS } from "../core/options.ts";
import { signalName } from "../core/signals.ts";

// ---------------------------------------------------------------------------------------------------------------
// Errors shaped like Node's

type NodeError = Error & { code: string };

/**
 * An error as Node's internal ones: `name` stays the class's, while its stack and `String(error)` read
 * "RangeError [ERR_OUT_OF_RANGE]: ..." (what `assert.throws(fn, /ERR_OUT_OF_RANGE/)` matches).
 */
function nodeError<E extends Error>(Base: new (message: string) => E, code: string, message: string): E & NodeError {
  const error = new Base(message) as E & NodeError;
  error.code = code;
  const name = error.name;
  if (typeof error.stack === "string" && error.stack.startsWith(`${name}: `)) {
    error.stack = `${name} [${code}]${error.stack.slice(name.length)}`;
  }
  Object.defineProperty(error, "toString", {
    value: () => `${error.name} [${code}]: ${error.message}`,
    enumerable: false,
    writable: true,
    configurable: true,
  });
  return error;
}

function received(value: unknown): string {
  if (value === null || value === undefined) return ` Received ${value}`;
  if (typeof value === "function") return ` Received function ${value.name || "<anonymous>"}`;
  if (typeof value === "object") {
    const name = (value as object).constructor?.name;
    return name ? ` Received an instance of ${name}` : " Received an object";
  }
  const shown = typeof value === "string" ? `'${value.length > 25 ? `${value.slice(0, 25)}...` : value}'` : value;
  return ` Received type ${typeof value} (${String(shown)})`;
}

function invalidArgType(name: string, expected: string, value: unknown): NodeError {
  const kind = name.includes(".") ? "property" : "argument";
  return nodeError(
    TypeError,
    "ERR_INVALID_ARG_TYPE",
    `The "${name}" ${kind} must be ${expected}.${received(value)}`,
  );
}

function invalidArgValue(name: string, value: unknown, reason = "is invalid"): NodeError {
  const kind = name.includes(".") ? "property" : "argument";
  let shown = inspect(value);
  if (shown.length > 128) shown = `${shown.slice(0, 128)}...`;
  return nodeError(TypeError, "ERR_INVALID_ARG_VALUE", `The ${kind} '${name}' ${reason}. Received ${shown}`);
}

function outOfRange(name: string, range: string, value: unknown): NodeError {
  return nodeError(
    RangeError,
    "ERR_OUT_OF_RANGE",
    `The value of "${name}" is out of range. It must be ${range}. Received ${String(value)}`,
  );
}

/**
 * The error an aborted `signal` produces, as Node's `AbortError` (`code` `"ABORT_ERR"`).
 *
 * @example Aborting a command
 * ```ts
 * import { execFile } from "../node.ts";
 *
 * const controller = new AbortController();
 * execFile("sleep", ["10"], { signal: controller.signal }, (error) => {
 *   console.log(error?.name, (error as { code?: string } | null)?.code); // "AbortError" "ABORT_ERR"
 * });
 * controller.abort();
 * ```
 */
export class AbortError extends Error {
  /** Always `"ABORT_ERR"`. */
  readonly code = "ABORT_ERR";

  /** Creates an abort error whose cause is the signal's reason. */
  constructor(message = "The operation was aborted", options?: { cause?: unknown }) {
    super(message, options);
    this.name = "AbortError";
  }
}

function noNulBytes(value: unknown, name: string): void {
  if (typeof value === "string" && value.includes("\0")) {
    throw invalidArgValue(name, value, "must be a string without null bytes");
  }
}

function errnoOf(code: string): number | undefined {
  const errno = (osConstants.errno as Record<string, number | undefined>)[code];
  return errno === undefined ? undefined : -errno;
}

/** Node's `convertToValidSignal`: a signal's name from its name (in any case) or number, else ERR_UNKNOWN_SIGNAL. */
function validSignal(value: unknown): string {
  if (typeof value === "string" || typeof value === "number") {
    try {
      return signalName(typeof value === "string" ? value.toUpperCase() : value);
    } catch {
      // unknown: thrown below, as for a value of another type
    }
  }
  throw nodeError(TypeError, "ERR_UNKNOWN_SIGNAL", format("Unknown signal: %s", value));
}

/** Node's `sanitizeKillSignal` for a `killSignal` option: undefined when absent, else a signal's name. */
function killSignalOf(value: unknown, name: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string" && typeof value !== "number") {
    throw invalidArgType(name, "one of type string or number", value);
  }
  return validSignal(value);
}

function validateTimeout(timeout: unknown): number {
  if (timeout === undefined || timeout === null) return 0;
  if (!(Number.isInteger(timeout) && (timeout as number) >= 0)) {
    throw outOfRange("timeout", "an unsigned integer", timeout);
  }
  // Node accepts more, and its timer then fires at once: a pool refuses instead of killing the command.
  if ((timeout as number) > MAX_TIMER_MS) throw outOfRange("timeout", `<= ${MAX_TIMER_MS}`, timeout);
  return timeout as number;
}

function validateAbortSignal(signal: unknown, name: string): AbortSignal | undefined {
  if (signal === undefined) return undefined;
  if (signal === null || typeof signal !== "object" || !("aborted" in signal)) {
    throw invalidArgType(name, "an instance of AbortSignal", signal);
  }
  return signal as AbortSignal;
}

// ---------------------------------------------------------------------------------------------------------------
// Options

/** A spawn call after Node's normalisation, ready for the pool. */
interface PooledSpawn {
  file: string;
  args: string[];
  spawnargs: unknown[];
  /** Slots past stdio[2] (all "ignore"). */
  extraStdio: number;
  argv0?: string;
  cwd: string;
  env: Record<string, string>;
  stdio: [StdioMode, StdioMode, StdioMode];
  /**
   * Another pooled command's stream given as a slot (`stdio: [a.stdout, ...]`, `[..., b.stdin, ...]`): the host
   * carries the bytes between the two commands' pipes.
   */
  relays: Relays;
  uid?: number;
  gid?: number;
  detached: boolean;
  timeout: number;
  killSignal: string;
  signal?: AbortSignal;
}

/** Why a spawn must run natively, or undefined when the pool can run it. */
type Unpoolable = string;

/** Streams of other pooled commands given as stdio slots: stdin from an output, outputs into a stdin. */
type Relays = [OutputReadable | undefined, InputWritable | undefined, InputWritable | undefined];

/** Maps Node's `stdio` option to the pool's modes; returns a reason when the pool cannot honour it. */
function stdioModes(stdio: unknown): { modes: [StdioMode, StdioMode, StdioMode]; relays: Relays } | Unpoolable {
  const relays: Relays = [undefined, undefined, undefined];
  const all = (mode: StdioMode) => ({ modes: [mode, mode, mode] as [StdioMode, StdioMode, StdioMode], relays });
  if (stdio === undefined || stdio === null) return all("piped");
  if (typeof stdio === "string") {
    switch (stdio) {
      case "pipe":
      case "overlapped":
        return all("piped");
      case "ignore":
        return all("null");
      case "inherit":
        return all("inherit");
      default:
        throw invalidArgValue("stdio", stdio);
    }
  }
  if (!Array.isArray(stdio)) throw invalidArgValue("stdio", stdio);
  const modes: [StdioMode, StdioMode, StdioMode] = ["piped", "piped", "piped"];
  for (let i = 0; i < stdio.length; i++) {
    const slot = stdio[i];
    let mode: StdioMode | undefined;
    if (slot === null || slot === undefined) mode = i < 3 ? "piped" : "null";
    else if (slot === "ignore") mode = "null";
    else if (slot === "pipe" || slot === "overlapped") mode = i < 3 ? "piped" : undefined;
    else if (slot === "inherit" || slot === i) mode = i < 3 ? "inherit" : undefined;
    else if ((i === 0 && slot instanceof OutputReadable) || ((i === 1 || i === 2) && slot instanceof InputWritable)) {
      mode = "piped";
      (relays as Array<Readable | Writable | undefined>)[i] = slot;
    }
    if (mode === undefined) {
      const shown = typeof slot === "object" ? `a ${slot.constructor?.name ?? "object"}` : `'${String(slot)}'`;
      return `stdio[${i}] is ${shown}`;
    }
    if (i < 3) modes[i] = mode;
  }
  return { modes, relays };
}

function validatedPath(value: unknown, name: string): string {
  let path: string;
  if (typeof value === "string") path = value;
  else if (value instanceof URL) {
    if (value.protocol !== "file:") {
      throw nodeError(TypeError, "ERR_INVALID_URL_SCHEME", "The URL must be of scheme file");
    }
    path = fileURLToPath(value.href);
  } else if (value instanceof Uint8Array) path = Buffer.from(value).toString();
  else throw invalidArgType(name, "of type string or an instance of Buffer or URL", value);
  if (path.includes("\0")) {
    throw invalidArgValue(name, path, "must be a string, Uint8Array, or URL without null bytes");
  }
  return path;
}

function optionalBoolean(options: Record<string, unknown>, key: string): void {
  const value = options[key];
  if (value !== undefined && value !== null && typeof value !== "boolean") {
    throw invalidArgType(`options.${key}`, "of type boolean", value);
  }
}

function optionalInt32(options: Record<string, unknown>, key: string): number | undefined {
  const value = options[key];
  if (value === undefined || value === null) return undefined;
  if (!Number.isInteger(value) || (value as number) < -0x8000_0000 || (value as number) > 0x7fff_ffff) {
    throw invalidArgType(`options.${key}`, "int32", value);
  }
  return value as number;
}

/** A copy of `options` without a prototype: what Node reads options from. */
function ownOptions(options: unknown): Record<string, unknown> {
  return Object.assign(Object.create(null), options);
}

/** Node's DEP0190 is emitted once per process. */
let warnedArgsWithShell = false;

/**
 * DEP0190, once per process. On Node the runtime's own module emits it, so that it and this module share
 * Node's once-per-process flag (a program using both warns once, as with Node alone): its `spawn()` warns while
 * normalising its arguments, then throws at the invalid `timeout` before it starts anything. Deno and Bun, whose
 * modules differ there, get the warning from here.
 */
function warnArgsWithShell(): void {
  if (warnedArgsWithShell) return;
  warnedArgsWithShell = true;
  const runtime = globalThis as { Deno?: unknown; Bun?: unknown };
  if (runtime.Deno === undefined && runtime.Bun === undefined) {
    try {
      // A harmless command, should a runtime ever start it: `sh -c "true args"`.
      native.spawn("true", ["args"], { shell: true, timeout: -1 }).on("error", () => {});
    } catch {
      return; // ERR_OUT_OF_RANGE: nothing started
    }
  }
  process.emitWarning(
    "Passing args to a child process with shell option true can lead to security vulnerabilities, " +
      "as the arguments are not escaped, only concatenated.",
    "DeprecationWarning",
    "DEP0190",
  );
}

/**
 * Node's `normalizeSpawnArguments`, then the pool's: validates and throws Node's errors synchronously.
 * Returns a reason string when the call needs something a pool cannot give (an `'ipc'` slot, extra fds).
 */
function normalizeSpawn(file: unknown, argsIn: unknown, optionsIn: unknown): PooledSpawn | Unpoolable {
  if (typeof file !== "string") throw invalidArgType("file", "of type string", file);
  noNulBytes(file, "file");
  if (file.length === 0) throw invalidArgValue("file", file, "cannot be empty");
  let args: unknown[];
  let options: unknown = optionsIn;
  if (Array.isArray(argsIn)) args = argsIn.slice();
  else if (argsIn === undefined || argsIn === null) args = [];
  else if (typeof argsIn !== "object") throw invalidArgType("args", "of type object", argsIn);
  else {
    options = argsIn;
    args = [];
  }
  args.forEach((arg, i) => noNulBytes(arg, `args[${i}]`));
  if (options === undefined) options = {};
  else if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw invalidArgType("options", "of type object", options);
  }
  // Own options only, as Node copies them: a value set on Object.prototype is no option.
  const o = ownOptions(options);
  // A relative cwd is the host's current directory's (the worker's may differ), and an empty one is that directory.
  const dir = o.cwd === undefined || o.cwd === null ? "" : validatedPath(o.cwd, "options.cwd");
  const cwd = isAbsolute(dir) ? dir : resolve(dir);
  optionalBoolean(o, "detached");
  const uid = optionalInt32(o, "uid");
  const gid = optionalInt32(o, "gid");
  if (o.shell !== undefined && o.shell !== null && typeof o.shell !== "boolean" && typeof o.shell !== "string") {
    throw invalidArgType("options.shell", "of type boolean or string", o.shell);
  }
  let argv0: string | undefined;
  if (o.argv0 !== undefined && o.argv0 !== null) {
    if (typeof o.argv0 !== "string") throw invalidArgType("options.argv0", "of type string", o.argv0);
    noNulBytes(o.argv0, "options.argv0");
    argv0 = o.argv0;
  }
  optionalBoolean(o, "windowsHide");
  optionalBoolean(o, "windowsVerbatimArguments");
  const timeout = validateTimeout(o.timeout);
  const signal = validateAbortSignal(o.signal, "options.signal");
  const killSignal = killSignalOf(o.killSignal, "options.killSignal") ?? "SIGTERM";
  if (o.serialization !== undefined && o.serialization !== "json" && o.serialization !== "advanced") {
    throw invalidArgValue("options.serialization", o.serialization, "must be one of: undefined, 'json', 'advanced'");
  }

  let strArgs = args.map((arg) => String(arg));
  let spawnargs: unknown[] = args;
  let cmd = file;
  if (o.shell) {
    noNulBytes(o.shell, "options.shell");
    if (args.length > 0) warnArgsWithShell();
    const command = [file, ...strArgs].join(" ");
    cmd = typeof o.shell === "string" ? o.shell : "/bin/sh";
    strArgs = spawnargs = ["-c", command];
  }

  const source = (o.env || process.env) as Record<string, unknown>;
  // Without a prototype, a "__proto__" key is an entry like any other (on `{}` it would set the prototype).
  const env: Record<string, string> = Object.create(null);
  for (const key in source) {
    const value = source[key];
    if (value === undefined) continue;
    noNulBytes(key, `options.env['${key}']`);
    noNulBytes(value, `options.env['${key}']`);
    // Node passes each entry on as "key=value": a key holding "=" is read by the command as the name before
    // its first "=", whose value starts after it. Where that repeats a name, the later entry wins, as a shell
    // reads its environment. An entry without a name cannot be read by name at all, and is left out.
    const cut = key.indexOf("=");
    const name = cut < 0 ? key : key.slice(0, cut);
    if (name === "") continue;
    env[name] = cut < 0 ? String(value) : `${key.slice(cut + 1)}=${String(value)}`;
  }

  const stdio = stdioModes(o.stdio);
  if (typeof stdio === "string") return stdio;
  // Every field its own, the optional ones too: one left out would be read from Object.prototype.
  const spec: PooledSpawn = {
    file: cmd,
    args: strArgs,
    spawnargs: [argv0 ?? cmd, ...spawnargs],
    extraStdio: Array.isArray(o.stdio) ? Math.max(0, o.stdio.length - 3) : 0,
    cwd,
    env,
    stdio: stdio.modes,
    relays: stdio.relays,
    detached: o.detached === true,
    timeout,
    killSignal,
    argv0,
    uid,
    gid,
    signal,
  };
  return spec;
}

const warned = new Set<string>();

function warnNative(reason: string): void {
  if (warned.has(reason)) return;
  warned.add(reason);
  process.emitWarning(`${reason}, which a pool cannot provide; this spawn uses the runtime's node:child_process`, {
    code: "SPAWNPOOL_NATIVE_FALLBACK",
  });
}

// ---------------------------------------------------------------------------------------------------------------
// ChildProcess

/** A readable child output as a Node stream; credits the worker as the consumer reads. */
class OutputReadable extends Readable {
  readonly #controls: OutputControls;
  readonly #credits: CreditBatch;
  /** Told when the buffer may have crossed its high-water mark (reading starts or stops, as on a pipe). */
  onPressure: (() => void) | undefined;
  /** Whether this stream keeps the host alive while it is read (a pipe socket's `ref()`/`unref()`). */
  refed = true;

  constructor(controls: OutputControls) {
    super();
    this.#controls = controls;
    this.#credits = new CreditBatch(controls);
  }

  override _read(): void {
    this.#credits.flush();
    this.onPressure?.();
  }

  /** Lets this output keep the host alive while it is read (the default), as a pipe socket's `ref()`. */
  ref(): this {
    this.refed = true;
    this.onPressure?.();
    return this;
  }

  /** Stops this output keeping the host alive, as a pipe socket's `unref()`. */
  unref(): this {
    this.refed = false;
    this.onPressure?.();
    return this;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // Destroyed before its end: close the pipe in the worker, as destroying a pipe's read end does.
    if (!this.readableEnded) this.#controls.release();
    this.#credits.drop();
    callback(error);
  }

  deliver(chunk: Uint8Array): void {
    if (this.destroyed || this.readableEnded) {
      this.#controls.credit(chunk.byteLength); // in flight before the release; nobody reads it
      return;
    }
    // Credited in batches while Node's buffer takes more; past its high-water mark, once it asks to _read.
    this.#credits.hold(chunk.byteLength);
    if (this.push(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) this.#credits.flushIfFull();
    else this.onPressure?.();
  }

  finish(): void {
    if (!this.destroyed && !this.readableEnded) this.push(null);
  }
}

/**
 * A child's stdin as a Node stream, with a pipe socket's `ref()`/`unref()` for code that calls them. Other
 * commands may write into it too (given as their stdout or stderr): the command's stdin ends once this stream
 * and each of them has ended, as a pipe's reader sees its end once every writer has closed it.
 */
class InputWritable extends Writable {
  readonly #send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void;
  readonly #end: () => void;
  /** This stream and the relays writing into the command's stdin. */
  #writers = 1;

  constructor(send: (bytes: Uint8Array, callback: (error?: Error | null) => void) => void, end: () => void) {
    super();
    this.#send = send;
    this.#end = end;
  }

  override _write(chunk: Buffer, _encoding: string, callback: (error?: Error | null) => void): void {
    this.#send(chunk, callback);
  }

  override _writev(chunks: Array<{ chunk: Buffer }>, callback: (error?: Error | null) => void): void {
    this.#send(Buffer.concat(chunks.map((entry) => entry.chunk)), callback);
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.#release();
    callback();
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#end();
    callback(error);
  }

  #release(): void {
    if (--this.#writers === 0) this.#end();
  }

  /**
   * Writes all of `source` (another command's output) into the command's stdin, which it holds open until
   * then; resolves once the last bytes reached the command's pipe (or `source` was destroyed).
   */
  relay(source: Readable): Promise<void> {
    this.#writers++;
    return (async () => {
      for await (const chunk of source) await new Promise((written) => this.#send(chunk, written));
    })().catch(() => {}).finally(() => this.#release());
  }

  /** Always false, as on the write-only pipe socket Node gives. */
  get readable(): boolean {
    return false;
  }

  /** Does nothing: stdin never keeps the host alive here. */
  ref(): this {
    return this;
  }

  /** Does nothing: stdin never keeps the host alive here. */
  unref(): this {
    return this;
  }
}

function epipe(): NodeError & { errno: number; syscall: string } {
  return Object.assign(nodeError(Error, "EPIPE", "write EPIPE"), { errno: errnoOf("EPIPE") ?? -32, syscall: "write" });
}

/** Sends a signal to a pooled command's process group, as the pool's timeout does; false once it exited. */
let killGroup: (child: ChildProcess, signal: string) => boolean;

/**
 * A pooled command, shaped like Node's `ChildProcess`: an `EventEmitter` with `'spawn'`, `'exit'`,
 * `'close'` and `'error'`, Node streams for piped stdio, `pid` once the worker has started the command.
 * Created by {@linkcode spawn}, {@linkcode execFile} and {@linkcode exec}; not constructed directly.
 *
 * @example Events in Node's order
 * ```ts
 * import { spawn } from "../node.ts";
 *
 * const child = spawn("sh", ["-c", "echo hi; exit 2"]);
 * child.on("spawn", () => console.log("spawn", typeof child.pid)); // "spawn" "number"
 * child.stdout!.on("data", (chunk) => console.log(String(chunk))); // "hi\n"
 * child.on("exit", (code, signal) => console.log("exit", code, signal)); // "exit" 2 null
 * child.on("close", (code) => console.log("close", code)); // "close" 2
 * ```
 */
export class ChildProcess extends EventEmitter {
  /** The pid, set once the worker reports it (before `'spawn'`); undefined until then or if it failed. */
  pid: number | undefined = undefined;
  /** The exit code once exited normally; the negative errno if the command could not start. */
  exitCode: number | null = null;
  /** The signal that ended the command. */
  signalCode: NodeJS.Signals | null = null;
  /** Whether `kill()` delivered a signal (or a `timeout` killed the command). */
  killed = false;
  /** Always false: pooled commands have no IPC channel. */
  readonly connected = false;
  /** The program, after `shell` was applied. */
  readonly spawnfile: string;
  /** `argv` of the command: argv0 (or the program) and the arguments, as given. */
  readonly spawnargs: string[];
  /** Stdin, when piped. */
  readonly stdin: Writable | null = null;
  /** Stdout, when piped. */
  readonly stdout: Readable | null = null;
  /** Stderr, when piped. */
  readonly stderr: Readable | null = null;
  /** `[stdin, stdout, stderr]`, then null for each further "ignore" slot. */
  readonly stdio: [
    Writable | null,
    Readable | null,
    Readable | null,
    Readable | Writable | null | undefined,
    Readable | Writable | null | undefined,
  ];

  /** Undefined for a child built with `new ChildProcess()`, which runs nothing. */
  readonly #execution: Execution | undefined;
  /** Sent on abort. */
  readonly #abortSignal: string;
  /** 'close' waits for the exit (or failure) and for each piped output stream to close. */
  #closesNeeded = 1;
  #closesGot = 0;
  /** Exit or failure came: counted once toward 'close'. */
  #settled = false;
  #spawned = false;
  /**
   * Events that arrived since the worker reported the spawn, held until a later turn of the event loop: in Node
   * no output, `'exit'` or `'close'` comes in the turn that emits `'spawn'`, so code that awaits `'spawn'` (and
   * a few promise hops) before attaching its listeners misses nothing. Undefined outside that window.
   */
  #afterSpawn: Array<() => void> | undefined;
  #unrefed = false;
  #watchingStreams = false;
  #abortPending: AbortSignal | undefined;
  #stdinPending = 0;
  #exitDelivered = false;
  #flushScheduled = false;
  readonly #outputsEnded = new Set<OutputReadable>();
  /** Outputs written into another command's stdin (stdio given as its stream), not this child's streams. */
  readonly #relayed: OutputReadable[] = [];
  #signal: AbortSignal | undefined;
  readonly #onAbort = (): void => {
    if (this.#spawned) this.#abort(this.#signal!);
    else this.#abortPending = this.#signal;
  };

  /**
   * @internal
   * @param abortSignal What an abort of `spec.signal` sends: `killSignal` for spawn, SIGTERM for execFile and
   * exec (where `killSignal` is for the timeout and maxBuffer only, as in Node).
   */
  constructor(scheduler?: Scheduler, spec?: PooledSpawn, abortSignal?: string) {
    super();
    // `new ChildProcess()`: as in Node, a child with no command yet (code such as execa's builds one to report a
    // command that failed before it started); `kill()` sends nothing. Its `spawn(options)` has no pooled form.
    if (scheduler === undefined || spec === undefined) {
      this.spawnfile = null as unknown as string;
      this.spawnargs = [];
      this.#abortSignal = "SIGTERM";
      this.stdio = [null, null, null, undefined, undefined];
      return;
    }
    this.spawnfile = spec.file;
    this.spawnargs = spec.spawnargs as string[];
    this.#abortSignal = abortSignal ?? spec.killSignal;
    const outputs: [undefined, OutputReadable | undefined, OutputReadable | undefined] = [
      undefined,
      undefined,
      undefined,
    ];
    const request = buildRequest({
      cmd: spec.file,
      args: spec.args,
      cwd: spec.cwd,
      env: spec.env,
      clearEnv: true,
      stdin: spec.stdio[0],
      stdout: spec.stdio[1],
      stderr: spec.stdio[2],
      buffered: false,
      timeout: spec.timeout > 0 ? spec.timeout : undefined,
      killSignal: spec.killSignal,
      argv0: spec.argv0,
      uid: spec.uid,
      gid: spec.gid,
      detached: spec.detached,
    });
    // Every event reaches user code in its own microtask, queued as it arrives from the worker, so events
    // keep their order and an exception in a listener is an uncaught exception of the application (as in
    // Node), never a failure of the worker's channel or a rejected promise. What arrives after the spawn,
    // even in the same read as the worker's "spawned", waits for a later turn of the event loop (`#deliver`).
    const sink = (fd: StreamFd, controls: OutputControls): OutputSink => {
      const readable = new OutputReadable(controls);
      outputs[fd] = readable;
      return {
        push: (chunk) => this.#deliver(() => readable.deliver(chunk)),
        end: () => this.#deliver(() => this.#ended(readable)),
        error: () => this.#deliver(() => this.#ended(readable)),
      };
    };
    this.#execution = new Execution(scheduler, request, {
      output: sink,
      events: {
        spawned: (pid) => {
          this.#afterSpawn = [];
          queueMicrotask(() => this.#onSpawn(pid));
          setImmediate(() => {
            const held = this.#afterSpawn!;
            this.#afterSpawn = undefined;
            for (const event of held) queueMicrotask(event);
          });
        },
        // The exit waits for a later macrotask, as in Node, where it comes in a libuv callback of its own after the
        // pipes' last reads: code that reads one output to its end (a few promise hops) and then starts on the
        // other must find it still unread, not resumed into nobody by the exit's flush of unread outputs.
        exited: (info) => void setImmediate(() => this.#deliver(() => this.#onExit(info))),
        failed: (error) => this.#deliver(() => this.#onFail(error)),
      },
    });
    const execution = this.#execution;
    const [from, intoOut, intoErr] = spec.relays;
    if (request.stdin === "piped") {
      const stdin = this.#stdinWritable(execution);
      // Until this command's stdin closes: what the other command's output still holds is its own to read. A
      // write after this command exited fails as the other command's own write would, not in this process.
      if (from !== undefined) from.pipe(stdin.on("error", () => {}));
      else this.stdin = stdin;
    }
    // This command's output goes into the other command's stdin; as in Node, it is not this child's stream.
    // 'close' waits until those bytes reached that stdin, as they are in the pipe when a command exits.
    for (const [fd, into] of [[1, intoOut], [2, intoErr]] as const) {
      if (into === undefined) continue;
      this.#relayed.push(outputs[fd]!);
      this.#closesNeeded++;
      into.relay(outputs[fd]!).then(() => this.#maybeClose());
    }
    this.stdout = intoOut === undefined ? outputs[1] ?? null : null;
    this.stderr = intoErr === undefined ? outputs[2] ?? null : null;
    const stdio: Array<Readable | Writable | null> = [this.stdin, this.stdout, this.stderr];
    for (let i = 0; i < spec.extraStdio; i++) stdio.push(null);
    this.stdio = stdio as ChildProcess["stdio"];
    for (const stream of [this.stdout, this.stderr]) {
      if (stream === null) continue;
      this.#closesNeeded++;
      stream.on("close", () => this.#maybeClose());
    }
    const signal = spec.signal;
    if (signal !== undefined) {
      this.#signal = signal;
      if (signal.aborted) this.#abortPending = signal;
      else signal.addEventListener("abort", this.#onAbort, { once: true });
    }
  }

  /**
   * Sends a signal to the command.
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @returns True if the signal was sent (or queued until the command starts); false once it exited.
   * @throws {TypeError} For an unknown signal (`ERR_UNKNOWN_SIGNAL`).
   */
  kill(signal?: NodeJS.Signals | number): boolean {
    return this.#send(signal === 0 ? "0" : validSignal(signal === undefined ? "SIGTERM" : signal), false);
  }

  static {
    killGroup = (child, signal) => child.#send(signal, true);
  }

  /** Sends a signal (a name, or "0" to send none) to the command or its process group, as `kill()` does. */
  #send(name: string, group: boolean): boolean {
    if (this.#settled || this.#execution === undefined) return false;
    if (name !== "0") this.#execution.kill(name, group);
    this.killed = true;
    return true;
  }

  /**
   * Node's second step after `new ChildProcess()`, starting the command.
   *
   * @throws {TypeError} Always (`ERR_METHOD_NOT_IMPLEMENTED`): pooled children come from `spawn()`, `execFile()`
   * or `exec()`.
   */
  spawn(_options?: unknown): never {
    throw nodeError(
      TypeError,
      "ERR_METHOD_NOT_IMPLEMENTED",
      "ChildProcess.prototype.spawn() is not implemented by spawnpool/node: use spawn(), execFile() or exec()",
    );
  }

  /** Lets the command keep the host alive (the default). */
  ref(): void {
    this.#unrefed = false;
    this.#updateRef();
  }

  /**
   * Lets the host exit while the command runs. As in Node, a piped output still keeps the host alive until
   * it ends, while it is being read or its buffer has room (Node reads a pipe until its buffer is full).
   */
  unref(): void {
    this.#unrefed = true;
    if (!this.#watchingStreams) {
      this.#watchingStreams = true;
      for (const stream of [this.stdout, this.stderr] as Array<OutputReadable | null>) {
        if (stream === null) continue;
        for (const event of ["pause", "resume", "end", "close"]) stream.on(event, () => this.#updateRef());
        stream.onPressure = () => this.#updateRef();
      }
    }
    this.#updateRef();
  }

  #updateRef(): void {
    const reading = ([this.stdout, this.stderr] as Array<OutputReadable | null>).some((stream) =>
      stream !== null && stream.refed && !stream.destroyed && !stream.readableEnded &&
      (stream.readableFlowing === true || stream.readableLength < stream.readableHighWaterMark)
    );
    if (!this.#unrefed || reading) this.#execution?.ref();
    else this.#execution?.unref();
  }

  /** Queues an event for user code: in its own microtask, or after the spawn's turn while that lasts. */
  #deliver(event: () => void): void {
    if (this.#afterSpawn !== undefined) this.#afterSpawn.push(event);
    else queueMicrotask(event);
  }

  /** Kills the command unless it was already killed, as Node's `ChildProcess[Symbol.dispose]`. */
  [Symbol.dispose](): void {
    if (!this.killed) this.kill();
  }

  #onSpawn(pid: number): void {
    this.#spawned = true;
    this.pid = pid;
    this.emit("spawn");
    const aborted = this.#abortPending;
    this.#abortPending = undefined;
    if (aborted !== undefined) this.#abort(aborted);
  }

  #abort(signal: AbortSignal): void {
    if (this.kill(this.#abortSignal as NodeJS.Signals)) {
      this.emit("error", new AbortError(undefined, { cause: signal.reason }));
    }
  }

  #onExit(info: ExitInfo): void {
    this.#settle();
    const { code, signal, reason } = info;
    this.exitCode = signal === null ? code : null;
    this.signalCode = signal as NodeJS.Signals | null;
    if (reason === "timeout") this.killed = true;
    // Input still unwritten when the command exited had no reader: EPIPE, as on a real pipe.
    this.stdin?.destroy(this.#stdinPending > 0 ? epipe() : undefined);
    this.emit("exit", this.exitCode, this.signalCode);
    this.#exitDelivered = true;
    this.#maybeFlush();
    this.#maybeClose();
  }

  #onFail(error: unknown): void {
    const afterExit = this.#settled;
    this.#settle();
    let reported = error;
    if (error instanceof SpawnError) {
      const errno = error.errno ?? errnoOf(error.code);
      // Node's own fields, enumerable as in Node; the pool's error stays reachable as the (hidden) cause.
      reported = Object.assign(new Error(`spawn ${this.spawnfile} ${error.code}`, { cause: error }), {
        errno,
        code: error.code,
        syscall: `spawn ${this.spawnfile}`,
        path: this.spawnfile,
        spawnargs: this.spawnargs.slice(1),
      });
      if (errno !== undefined) this.exitCode = errno;
    }
    // Nothing ran (or its worker is gone): the streams close without waiting for a reader, and their
    // 'close' events lead to the child's.
    this.stdin?.destroy();
    this.stdout?.destroy();
    this.stderr?.destroy();
    for (const output of this.#relayed) output.destroy();
    this.emit("error", reported);
    if (!afterExit) this.#maybeClose();
  }

  #settle(): void {
    this.#settled = true;
    this.#abortPending = undefined;
    this.#signal?.removeEventListener("abort", this.#onAbort);
  }

  #ended(output: OutputReadable): void {
    output.finish();
    this.#outputsEnded.add(output);
    this.#maybeFlush();
  }

  /**
   * Node flushes unread outputs on the tick after `'exit'`; here that waits until each output's end has arrived
   * too, and a macrotask more. The worker may report the exit before an output's end: code still reading the
   * other output to its end must find this one unread when it gets to it, not resumed into nobody.
   */
  #maybeFlush(): void {
    if (!this.#exitDelivered || this.#flushScheduled) return;
    const outputs = [this.stdout, this.stderr] as Array<OutputReadable | null>;
    if (!outputs.every((stream) => stream === null || stream.destroyed || this.#outputsEnded.has(stream))) return;
    this.#flushScheduled = true;
    setImmediate(() => this.#flushStdio());
  }

  /** After exit, lets output nobody is reading (or that was paused) drain, so `'close'` can follow, as Node does. */
  #flushStdio(): void {
    for (const stream of [this.stdout, this.stderr]) {
      if (stream !== null && stream.readable) stream.resume();
    }
  }

  #maybeClose(): void {
    this.#closesGot++;
    if (this.#closesGot === this.#closesNeeded) this.emit("close", this.exitCode, this.signalCode);
  }

  #stdinWritable(execution: Execution): InputWritable {
    const send = (bytes: Uint8Array, callback: (error?: Error | null) => void): void => {
      this.#stdinPending++;
      execution.write(bytes).then((ok) => {
        this.#stdinPending--;
        callback(ok ? null : epipe());
      }, callback);
    };
    return new InputWritable(send, () => execution.endStdin());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// spawn, execFile, exec

type ExecCallback = (error: ExecError | null, stdout: string | Buffer, stderr: string | Buffer) => void;

/** The error `execFile` and `exec` report for a command that failed, as Node's. */
export type ExecError = Error & {
  code?: number | string | null;
  killed?: boolean;
  signal?: NodeJS.Signals | null;
  cmd?: string;
  stdout?: string | Buffer;
  stderr?: string | Buffer;
};

/** The functions of `node:child_process` bound to one scheduler. */
export interface ChildProcessApi {
  /** `child_process.spawn`. */
  spawn: typeof native.spawn;
  /** `child_process.execFile`. */
  execFile: typeof native.execFile;
  /** `child_process.exec`. */
  exec: typeof native.exec;
}

const promisifyCustom = Symbol.for("nodejs.util.promisify.custom");

function withPromisified<F extends (...args: never[]) => unknown>(fn: F): F {
  const promisified = (...args: unknown[]) => {
    let resolve!: (value: { stdout: string | Buffer; stderr: string | Buffer }) => void;
    let reject!: (error: unknown) => void;
    const promise = new Promise<{ stdout: string | Buffer; stderr: string | Buffer }>((res, rej) => {
      resolve = res;
      reject = rej;
    }) as Promise<{ stdout: string | Buffer; stderr: string | Buffer }> & { child: unknown };
    promise.child = (fn as unknown as (...args: unknown[]) => unknown)(
      ...args,
      (error: ExecError | null, stdout: string | Buffer, stderr: string | Buffer) => {
        if (error !== null) {
          error.stdout = stdout;
          error.stderr = stderr;
          reject(error);
        } else {
          resolve({ stdout, stderr });
        }
      },
    );
    return promise;
  };
  Object.defineProperty(fn, promisifyCustom, { enumerable: false, value: promisified });
  return fn;
}

const MAX_BUFFER = 1024 * 1024;

/** Creates `spawn`, `execFile` and `exec` that run commands through `scheduler()`. */
export function childProcessApi(scheduler: () => Scheduler): ChildProcessApi {
  /** `spawn`, and for execFile what an abort sends (`spec.killSignal` when undefined). */
  function spawnWith(file: unknown, args: unknown, options: unknown, abortSignal?: string) {
    const spec = normalizeSpawn(file, args, options);
    if (typeof spec === "string") {
      warnNative(spec);
      return native.spawn(file as string, args as string[], options as native.SpawnOptions);
    }
    return new ChildProcess(scheduler(), spec, abortSignal);
  }

  /** `child_process.spawn`: Node's parameters, no more. */
  function spawnPooled(file: unknown, args?: unknown, options?: unknown): ChildProcess | native.ChildProcess {
    return spawnWith(file, args, options);
  }

  function execFilePooled(file: unknown, argsIn?: unknown, optionsIn?: unknown, callbackIn?: unknown) {
    let args: unknown = argsIn;
    let options: unknown = optionsIn;
    let callback: unknown = callbackIn;
    if (Array.isArray(args)) args = args.slice();
    else if (args !== null && typeof args === "object") {
      callback = options;
      options = args;
      args = null;
    } else if (typeof args === "function") {
      callback = args;
      options = null;
      args = null;
    }
    if (args === null || args === undefined) args = [];
    if (typeof options === "function") callback = options;
    else if (options !== null && options !== undefined && (typeof options !== "object" || Array.isArray(options))) {
      throw invalidArgType("options", "of type object", options);
    }
    if (options === null || options === undefined || typeof options === "function") options = {};
    if (callback !== null && callback !== undefined && typeof callback !== "function") {
      throw invalidArgType("callback", "of type function", callback);
    }
    const o: Record<string, unknown> = {
      __proto__: null,
      encoding: "utf8",
      timeout: 0,
      maxBuffer: MAX_BUFFER,
      killSignal: "SIGTERM",
      cwd: null,
      env: null,
      shell: false,
      ...(options as Record<string, unknown>),
    };
    if (o.argv0 !== undefined && o.argv0 !== null) {
      if (typeof o.argv0 !== "string") throw invalidArgType("options.argv0", "of type string", o.argv0);
      noNulBytes(o.argv0, "options.argv0");
    }
    const timeout = validateTimeout(o.timeout);
    const maxBuffer = o.maxBuffer as number;
    if (o.maxBuffer !== null && o.maxBuffer !== undefined && !(typeof maxBuffer === "number" && maxBuffer >= 0)) {
      throw outOfRange("options.maxBuffer", "a positive number", o.maxBuffer);
    }
    const killSignal = killSignalOf(o.killSignal, "options.killSignal") ?? "SIGTERM";
    const child = spawnWith(file, args, {
      cwd: o.cwd,
      env: o.env,
      gid: o.gid,
      uid: o.uid,
      shell: o.shell,
      signal: o.signal,
      // The timeout is this function's own timer (below), as in Node; the pool's is only a backstop, SIGKILL to
      // the process group if the command still runs 5 s after that timer signalled it. (With it the request asks
      // for a process group of the command's own, which the timer signals.)
      // (A timeout within 5 s of MAX_TIMER_MS, over 24 days, gets a backstop of MAX_TIMER_MS, which may then
      // come first.)
      timeout: timeout > 0 ? Math.min(timeout + DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS) : 0,
      killSignal: "SIGKILL",
      windowsHide: !!o.windowsHide,
      windowsVerbatimArguments: !!o.windowsVerbatimArguments,
    }, "SIGTERM") as ChildProcess;
    const done = callback as ExecCallback | undefined;
    const encoding = o.encoding !== "buffer" && typeof o.encoding === "string" && Buffer.isEncoding(o.encoding)
      ? o.encoding
      : null;
    const collected: [undefined, Array<string | Buffer>, Array<string | Buffer>] = [undefined, [], []];
    const lengths = [0, 0, 0];
    let error: ExecError | null = null;
    let killedHere = false;
    let exited = false;

    const merge = (fd: 1 | 2): string | Buffer => {
      const stream = fd === 1 ? child.stdout : child.stderr;
      if (encoding || stream?.readableEncoding) return (collected[fd] as string[]).join("");
      return Buffer.concat(collected[fd] as Buffer[]);
    };
    const onExit = (code?: number | null, signal?: NodeJS.Signals | null): void => {
      if (exited) return;
      exited = true;
      clearTimeout(timer);
      if (!done) return;
      const stdout = merge(1);
      const stderr = merge(2);
      if (!error && code === 0 && signal === null) {
        done(null, stdout, stderr);
        return;
      }
      let cmd = file as string;
      if ((args as string[]).length > 0) cmd += ` ${(args as string[]).join(" ")}`;
      if (!error) {
        error = Object.assign(new Error(`Command failed: ${cmd}\n${stderr}`), {
          code: code !== undefined && code !== null && code < 0 ? systemErrorName(code) : code,
          killed: child.killed || killedHere,
          signal: signal,
        });
      }
      error.cmd = cmd;
      done(error, stdout, stderr);
    };
    // The timeout and maxBuffer end the command as Node's execFile does: signalled once, with killSignal, and its
    // output streams destroyed, so the callback, which still waits for 'close', gets the output read so far, and
    // later writes meet a closed pipe. The signal goes first, so the worker signals the command just before it
    // closes the pipes (the command ends by killSignal, not by a write to a closed pipe).
    const stop = (group: boolean): void => {
      killedHere = true;
      if (group) killGroup(child, killSignal);
      else child.kill(killSignal as NodeJS.Signals);
      child.stdout?.destroy();
      child.stderr?.destroy();
    };
    for (const fd of [1, 2] as const) {
      const stream = fd === 1 ? child.stdout : child.stderr;
      if (stream === null) continue;
      if (encoding) stream.setEncoding(encoding);
      stream.on("data", (chunk: string | Buffer) => {
        if (maxBuffer === Infinity) {
          collected[fd].push(chunk);
          return;
        }
        const streamEncoding = stream.readableEncoding;
        const length = streamEncoding ? Buffer.byteLength(chunk as string, streamEncoding) : chunk.length;
        lengths[fd] += length;
        if (lengths[fd] > maxBuffer) {
          const keep = maxBuffer - (lengths[fd] - length);
          collected[fd].push(chunk.slice(0, keep));
          error = nodeError(
            RangeError,
            "ERR_CHILD_PROCESS_STDIO_MAXBUFFER",
            `${fd === 1 ? "stdout" : "stderr"} maxBuffer length exceeded`,
          );
          stop(false);
        } else {
          collected[fd].push(chunk);
        }
      });
    }
    // The timeout signals the command's process group, as the pool's timeout would. Its timer starts at 'spawn':
    // a command that waited for a worker to start still gets its full time, and the pool's backstop counts from
    // about that moment too.
    let timer: ReturnType<typeof setTimeout> | undefined;
    if (timeout > 0) {
      child.once("spawn", () => (timer = setTimeout(stop, timeout, true)));
    }
    child.addListener("close", onExit);
    child.addListener("error", (e: ExecError) => {
      error = e;
      child.stdout?.destroy();
      child.stderr?.destroy();
      onExit();
    });
    return child;
  }

  function execPooled(command: unknown, options?: unknown, callback?: unknown) {
    if (typeof command !== "string") throw invalidArgType("command", "of type string", command);
    noNulBytes(command, "command");
    if (typeof options === "function") {
      callback = options;
      options = undefined;
    }
    const o = ownOptions(options);
    o.shell = typeof o.shell === "string" ? o.shell : true;
    return execFilePooled(command, o, callback);
  }

  return {
    spawn: spawnPooled as unknown as typeof native.spawn,
    execFile: withPromisified(execFilePooled) as unknown as typeof native.execFile,
    exec: withPromisified(execPooled) as unknown as typeof native.exec,
  };
}

function systemErrorName(errno: number): string {
  for (const [name, value] of Object.entries(osConstants.errno as Record<string, number>)) {
    if (-value === errno) return name;
  }
  return `Unknown system error ${errno}`;
}

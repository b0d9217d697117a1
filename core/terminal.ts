/**
 * A pooled command's pseudo-terminal on the host, shaped like Bun's `Terminal`: the worker opens the terminal and runs
 * the command on it; this object types into it, reads what it shows (with the same credit as a pipe: a paused reader
 * pauses the program), resizes it and sets raw mode, through the command it is attached to.
 *
 * @module
 */

import { encodeRawMode, encodeResize, type SpawnRequest, type StdioMode, type WireTerminal } from "./frame.ts";
import { Execution } from "./execution.ts";
import type { Scheduler } from "./scheduler.ts";
import { bytesOf } from "./stdin.ts";
import { CreditBatch, type OutputControls, type OutputSink, type OutputSinkFactory } from "./output_stream.ts";

/** Options of a {@linkcode Terminal}, as Bun's `TerminalOptions`. */
export interface TerminalOptions {
  /** Columns, 1 to 65535. @default {80} */
  cols?: number;
  /** Rows, 1 to 65535. @default {24} */
  rows?: number;
  /** The terminal's type, given to its commands as `TERM` (unless their `env` sets one). @default {inherited TERM} */
  name?: string;
  /** Called with each chunk the terminal shows (its command's output and echo). */
  data?: (terminal: Terminal, data: Uint8Array) => void;
  /**
   * Called once when the terminal closes: at `close()`, or, for a terminal given to a single spawn as options, when
   * its command's output ended. `exitCode` is 0, or 1 when the command failed to run or its worker was lost: the
   * terminal's status, not the command's (its exit code is the subprocess's).
   */
  exit?: (terminal: Terminal, exitCode: number, signal: string | null) => void;
  /** Called when everything written has reached the terminal. */
  drain?: (terminal: Terminal) => void;
}

/** What a terminal drives: the pooled command it is attached to (core/execution.ts `Execution`). */
export interface TerminalCommand {
  /** Writes to the terminal; false when the command is done. */
  write(chunk: Uint8Array): Promise<boolean>;
  /** Sends a Terminal frame's payload. */
  control(payload: Uint8Array): void;
  /** Stops writing: the worker closes its descriptor for writing. */
  endStdin(): void;
  /** Lets the command keep the host alive, or not. */
  ref(): void;
  /** Stops the command keeping the host alive. */
  unref(): void;
}

const MAX_SIZE = 65535;

function size(value: unknown, what: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 1 || value > MAX_SIZE) {
    throw new RangeError(`${what} must be an integer from 1 to ${MAX_SIZE}, got ${String(value)}`);
  }
  return value;
}

function callback<T>(value: T | undefined, what: string): T | undefined {
  if (value !== undefined && typeof value !== "function") throw new TypeError(`terminal.${what} must be a function`);
  return value;
}

/**
 * Calls a user's callback from the terminal's own work (reading output, ordering writes): what it throws is the host's
 * uncaught error, as a throwing listener of a socket's events (or of node-pty's) would be, and the terminal goes on.
 */
function callOut<A extends unknown[]>(callback: ((...args: A) => void) | undefined, ...args: A): void {
  if (callback === undefined) return;
  try {
    callback(...args);
  } catch (error) {
    queueMicrotask(() => {
      throw error;
    });
  }
}

/**
 * A pseudo-terminal for pooled commands, as Bun's `Terminal`: given to `spawn(cmd, { terminal })` (the Bun shape) or
 * `pool.command(cmd, { terminal })` (the Deno shape), once or for several commands in turn (one at a time). What is
 * written while no command runs on it waits for the next. Native workers only.
 *
 * Bun's termios flag properties (`inputFlags` and the rest) are not offered: the terminal lives in the worker, and
 * cannot be read synchronously; `setRawMode()` is.
 *
 * @example A shell on a terminal
 * ```ts ignore
 * import { Pool, Terminal } from "@spawnpool/spawnpool";
 *
 * await using pool = new Pool();
 * await using terminal = new Terminal({ cols: 80, rows: 24, data: (_, bytes) => console.log(bytes) });
 * const proc = pool.spawn(["bash"], { terminal });
 * terminal.write("echo hello; exit\n");
 * await proc.exited;
 * ```
 */
export class Terminal {
  #cols: number;
  #rows: number;
  readonly #name: string | undefined;
  readonly #data: TerminalOptions["data"];
  readonly #exit: TerminalOptions["exit"];
  readonly #drain: TerminalOptions["drain"];
  #raw = false;
  #closed = false;
  #refed = true;
  /** A terminal made for one spawn from its options: it closes when its command's output ends. */
  #single = false;
  #command: TerminalCommand | undefined;
  /** Releases the attached command's output (its worker closes its descriptor for reading). */
  #release: (() => void) | undefined;
  /** Written while no command runs on it: for the next one. */
  #waiting: Uint8Array[] = [];
  /** Writes in order: each waits for the one before. */
  #writes: Promise<unknown> = Promise.resolve();
  #pending = 0;
  /** Output held while paused: delivered, and credited, on resume. */
  #paused = false;
  #held: Uint8Array[] = [];
  #credits: CreditBatch | undefined;

  /**
   * Creates a terminal; nothing is opened until a command runs on it.
   *
   * @throws {RangeError} If `cols` or `rows` is not an integer from 1 to 65535.
   * @throws {TypeError} If `name` is not a string, or a callback is not a function.
   */
  constructor(options: TerminalOptions = {}) {
    if (typeof options !== "object" || options === null) throw new TypeError("Terminal options must be an object");
    this.#cols = size(options.cols, "cols", 80);
    this.#rows = size(options.rows, "rows", 24);
    if (options.name !== undefined && (typeof options.name !== "string" || options.name === "")) {
      throw new TypeError("terminal.name must be a non-empty string");
    }
    this.#name = options.name;
    this.#data = callback(options.data, "data");
    this.#exit = callback(options.exit, "exit");
    this.#drain = callback(options.drain, "drain");
  }

  /** Whether the terminal is closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Columns (an extension: Bun's has none). */
  get cols(): number {
    return this.#cols;
  }

  /** Rows (an extension: Bun's has none). */
  get rows(): number {
    return this.#rows;
  }

  /**
   * Writes to the terminal, as typed: its command reads it (and the terminal echoes it unless in raw mode). Returns
   * the bytes accepted, all of them; `drain` is called once everything written has reached the terminal.
   *
   * @throws {Error} If the terminal is closed.
   * @throws {TypeError} If `data` is not a string or bytes.
   */
  write(data: string | ArrayBuffer | ArrayBufferView): number {
    if (this.#closed) throw new Error("Terminal is closed");
    const bytes = bytesOf(data, "Terminal.write").slice();
    const command = this.#command;
    if (command === undefined) this.#waiting.push(bytes);
    else this.#send(command, bytes);
    return bytes.byteLength;
  }

  /**
   * Sets the terminal's size; its command's foreground process group gets SIGWINCH.
   *
   * @throws {Error} If the terminal is closed.
   * @throws {RangeError} If `cols` or `rows` is not an integer from 1 to 65535.
   */
  resize(cols: number, rows: number): void {
    if (this.#closed) throw new Error("Terminal is closed");
    this.#cols = size(cols, "cols", 0);
    this.#rows = size(rows, "rows", 0);
    this.#command?.control(encodeResize(this.#cols, this.#rows));
  }

  /**
   * Turns raw mode on or off: no line editing, echo or signal keys (`\x03` is a byte, not SIGINT), input as typed.
   *
   * @throws {Error} If the terminal is closed.
   */
  setRawMode(enabled: boolean): void {
    if (this.#closed) throw new Error("Terminal is closed");
    this.#raw = Boolean(enabled);
    this.#command?.control(encodeRawMode(this.#raw));
  }

  /** Lets the command on the terminal keep the host alive (the default). */
  ref(): void {
    this.#refed = true;
    this.#command?.ref();
  }

  /** Lets the host exit while a command runs on the terminal. */
  unref(): void {
    this.#refed = false;
    this.#command?.unref();
  }

  /**
   * Closes the terminal: the worker closes its side, so the command on it sees a hang-up (SIGHUP, then EIO); what
   * was not written yet is dropped. Calls `exit` once.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#waiting = [];
    const command = this.#command;
    if (command !== undefined) {
      command.endStdin();
      this.#release?.();
    }
    callOut(this.#exit, this, 0, null);
  }

  /** Closes the terminal (`await using`). */
  [Symbol.asyncDispose](): Promise<void> {
    this.close();
    return Promise.resolve();
  }

  /** @internal Marks a terminal made from a spawn's options: it closes with its command's output. */
  static single(options: TerminalOptions): Terminal {
    const terminal = new Terminal(options);
    terminal.#single = true;
    return terminal;
  }

  /**
   * @internal What a request asks of the worker for a command on this terminal, and `TERM` for its environment.
   *
   * @throws {TypeError} If the terminal is closed, or a command still runs on it.
   */
  request(): { wire: WireTerminal; term: string | undefined } {
    if (this.#closed) throw new TypeError("terminal is closed");
    if (this.#command !== undefined) {
      throw new TypeError("terminal is in use by a running command: a terminal takes one command at a time");
    }
    const wire: WireTerminal = { cols: this.#cols, rows: this.#rows };
    if (this.#raw) wire.raw = true;
    return { wire, term: this.#name };
  }

  /** @internal The sink of the command's output (stream 1: everything the terminal shows). */
  readonly output: OutputSinkFactory = (_fd, controls) => this.#sink(controls);

  /**
   * @internal Attaches the command that runs on this terminal, until `done` settles: what was written while none ran
   * is sent first.
   */
  attach(command: TerminalCommand, done: Promise<unknown>): void {
    this.#command = command;
    if (!this.#refed) command.unref();
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const bytes of waiting) this.#send(command, bytes);
    const detach = (failed: boolean) => {
      if (this.#command !== command) return;
      this.#command = undefined;
      this.#release = undefined;
      this.#credits = undefined;
      if (this.#single && !this.#closed) {
        this.#closed = true;
        callOut(this.#exit, this, failed ? 1 : 0, null);
      }
    };
    done.then(() => detach(false), () => detach(true));
  }

  /** @internal Stops delivering output (and crediting it: the program blocks once the worker's window is full). */
  pause(): void {
    this.#paused = true;
  }

  /** @internal Whether output is held by `pause()`. */
  get paused(): boolean {
    return this.#paused;
  }

  /** @internal Forgets the output held by `pause()` (its reader is gone), and resumes. */
  drop(): void {
    this.#held = [];
    this.#paused = false;
  }

  /** @internal Delivers what was held (also after its command is done) and resumes. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    const held = this.#held;
    this.#held = [];
    for (const chunk of held) this.#deliver(chunk);
    this.#credits?.flush();
  }

  #send(command: TerminalCommand, bytes: Uint8Array): void {
    this.#pending++;
    // Not sent once the terminal is closed: what was not written by then is dropped (close()).
    this.#writes = this.#writes.then(() => this.#closed || command.write(bytes)).catch(() => false).then(() => {
      // Thrown into the chain of writes, its error would drop every later write.
      if (--this.#pending === 0 && !this.#closed) callOut(this.#drain, this);
    });
  }

  #sink(controls: OutputControls): OutputSink {
    const credits = new CreditBatch(controls);
    this.#credits = credits;
    this.#release = controls.release;
    return {
      push: (chunk) => {
        if (this.#credits !== credits) return; // a detached command's late output
        if (this.#paused) {
          this.#held.push(chunk);
          return;
        }
        this.#deliver(chunk);
        credits.flushIfFull();
      },
      end: () => {},
      error: () => {},
    };
  }

  #deliver(chunk: Uint8Array): void {
    this.#credits?.hold(chunk.byteLength);
    // Called while the worker's frames are read: thrown there, its error would be taken for the worker's (which broke
    // the protocol, and is stopped with every command on it).
    callOut(this.#data, this, chunk);
  }
}

/**
 * The terminal a spawn's `terminal` option names: a {@linkcode Terminal}, or the options of one made for this spawn
 * alone (closed when its command's output ends).
 *
 * @throws {TypeError} If it is neither (a `Bun.Terminal` is the host's own: it cannot reach a worker).
 */
export function terminalOf(value: unknown): Terminal {
  if (value instanceof Terminal) return value;
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError("terminal must be a Terminal or its options");
  }
  if (typeof (value as { setRawMode?: unknown }).setRawMode === "function") {
    throw new TypeError(
      "terminal must be spawnpool's Terminal or its options: a Bun.Terminal is the host's own and cannot reach a " +
        "pool's worker",
    );
  }
  return Terminal.single(value as TerminalOptions);
}

/**
 * The request fields of a command on `terminal`: its stdio (all three are the terminal; its output arrives as
 * stdout), the terminal, and its environment with `TERM` set to the terminal's name unless `env` sets one.
 *
 * @throws {TypeError} If the terminal is closed or in use.
 */
export function terminalRequest(
  terminal: Terminal,
  env: Record<string, string | undefined> | undefined,
): { stdin: StdioMode; stdout: StdioMode; stderr: StdioMode; terminal: WireTerminal; env?: Record<string, string> } {
  const { wire, term } = terminal.request();
  const fields: ReturnType<typeof terminalRequest> = {
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
    terminal: wire,
  };
  if (env !== undefined) fields.env = env as Record<string, string>;
  if (term !== undefined && env?.TERM === undefined) fields.env = { ...env as Record<string, string>, TERM: term };
  return fields;
}

/**
 * Starts `request` (built with {@linkcode terminalRequest}) on `terminal`: its output goes to the terminal, which is
 * attached to the command until the request completes.
 */
export function runOnTerminal(
  scheduler: Scheduler,
  request: SpawnRequest,
  terminal: Terminal,
  signal?: AbortSignal,
): Execution {
  const execution = new Execution(scheduler, request, { output: terminal.output, signal });
  terminal.attach(execution, execution.completed);
  return execution;
}

/**
 * node-pty's API over a pool: `spawn(file, args, options)` gives an {@linkcode IPty} whose command runs on a
 * pseudo-terminal in a native worker, so Node, Deno and Bun get a PTY with no addon.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import process from "node:process";
import { StringDecoder } from "node:string_decoder";
import type { Execution } from "../core/execution.ts";
import type { Scheduler } from "../core/scheduler.ts";
import { buildRequest } from "../core/options.ts";
import { signalName, signalNumber } from "../core/signals.ts";
import { runOnTerminal, Terminal, terminalRequest } from "../core/terminal.ts";

/** node-pty's `IDisposable`. */
export interface IDisposable {
  /** Removes the listener. */
  dispose(): void;
}

/** node-pty's `IEvent`: call it with a listener to subscribe. */
export interface IEvent<T> {
  (listener: (e: T) => unknown): IDisposable;
}

/** node-pty's `IPtyForkOptions`. */
export interface IPtyForkOptions {
  /** The terminal's name, given to the command as `TERM`. @default {env.TERM, else "xterm"} */
  name?: string;
  /** Columns. @default {80} */
  cols?: number;
  /** Rows. @default {24} */
  rows?: number;
  /** Working directory. @default {the host's} */
  cwd?: string;
  /** The whole environment. @default {the host's `process.env`, less TMUX, STY, COLUMNS, LINES and the like} */
  env?: { [key: string]: string | undefined };
  /** How output is decoded for `onData` (a Node encoding); null gives Buffers. @default {"utf8"} */
  encoding?: string | null;
  /** Treat writes of `flowControlPause` / `flowControlResume` as pause() / resume(). @default {false} */
  handleFlowControl?: boolean;
  /** What `write` takes for pause() with `handleFlowControl`. @default {"\x13" (XOFF)} */
  flowControlPause?: string;
  /** What `write` takes for resume() with `handleFlowControl`. @default {"\x11" (XON)} */
  flowControlResume?: string;
  /** User id to run as. */
  uid?: number;
  /** Group id to run as. */
  gid?: number;
}

/** What `onExit` reports, as node-pty's. */
export interface IExitEvent {
  /** The exit code; 0 after a signal. */
  exitCode: number;
  /** The signal's number, 0 without one. */
  signal?: number;
}

/** node-pty's `IPty`: a command on a pseudo-terminal. */
export interface IPty {
  /** The command's pid: undefined until the worker reports it (`spawned` resolves), unlike node-pty's. */
  readonly pid: number | undefined;
  /** Resolves with the pid once the command started (an extension). */
  readonly spawned: Promise<number>;
  /** Columns. */
  readonly cols: number;
  /** Rows. */
  readonly rows: number;
  /** The program of the terminal's foreground process group, where the host can tell (Linux), else `file`. */
  readonly process: string;
  /** Whether writes of the flow control strings pause and resume output. */
  handleFlowControl: boolean;
  /** Output, decoded with `encoding` (Buffers with `encoding: null`). */
  readonly onData: IEvent<string | Buffer>;
  /** The command's end, after its last output. */
  readonly onExit: IEvent<IExitEvent>;
  /** Resizes the terminal (the command gets SIGWINCH). @throws {Error} Unless both are positive. */
  resize(columns: number, rows: number): void;
  /** A no-op, as node-pty's on Unix. */
  clear(): void;
  /** Types into the terminal. */
  write(data: string | Uint8Array): void;
  /** Sends a signal to the command. @default {"SIGHUP"} */
  kill(signal?: string): void;
  /** Stops delivering output; the command blocks once the worker's window is full. */
  pause(): void;
  /** Delivers what pause() held, and goes on. */
  resume(): void;
  /** Closes the terminal (the command gets SIGHUP). */
  destroy(): void;
  /** node-pty's older event API: "data" with the output, "exit" with (exitCode, signal). */
  on(event: "data" | "exit", listener: (...args: never[]) => unknown): void;
}

/** A list of listeners, as node-pty's `EventEmitter2`. */
class Emitter<T> {
  #listeners: Array<(e: T) => unknown> = [];
  /** Subscribes a listener. */
  readonly event: IEvent<T> = (listener) => {
    this.#listeners.push(listener);
    return { dispose: () => (this.#listeners = this.#listeners.filter((l) => l !== listener)) };
  };
  fire(e: T): void {
    for (const listener of [...this.#listeners]) listener(e);
  }
}

/** How long an exit waits for a paused reader to resume (node-pty's DESTROY_SOCKET_TIMEOUT_MS). */
const PAUSED_EXIT_GRACE_MS = 200;

/** Variables node-pty leaves out of the host's environment: they describe the host's own terminal. */
const HOST_TERMINAL_VARIABLES = ["TMUX", "TMUX_PANE", "STY", "WINDOW", "WINDOWID", "TERMCAP", "COLUMNS", "LINES"];

function checkType(name: string, value: unknown, type: string): void {
  // As node-pty: a falsy value is not checked.
  if (value && typeof value !== type) throw new Error(`${name} must be a ${type} (not a ${typeof value})`);
}

/** The program of the process group in the foreground of `pid`'s terminal, from Linux's /proc; undefined elsewhere. */
function foreground(pid: number, readFile: (path: string) => string): string | undefined {
  try {
    const stat = readFile(`/proc/${pid}/stat`);
    // The fields after the command's name (which may hold spaces and parentheses): tpgid is the 6th of them.
    const tpgid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[5]);
    if (!(tpgid > 0)) return undefined;
    const argv0 = readFile(`/proc/${tpgid}/cmdline`).split("\0")[0];
    return argv0 === "" ? undefined : argv0;
  } catch {
    return undefined;
  }
}

class PooledPty implements IPty {
  handleFlowControl: boolean;
  readonly #terminal: Terminal;
  readonly #execution: Execution | undefined;
  readonly #file: string;
  readonly #pause: string;
  readonly #resume: string;
  readonly #data = new Emitter<string | Buffer>();
  readonly #exit = new Emitter<IExitEvent>();
  readonly #readFile: ((path: string) => string) | undefined;
  /** Decodes output for onData (undefined: Buffers); its rest is delivered at the exit. */
  readonly #decoder: StringDecoder | undefined;
  /** The exit, held until output held by pause() is delivered. */
  #exitEvent: IExitEvent | undefined;
  readonly spawned: Promise<number>;

  constructor(
    scheduler: Scheduler,
    file: string,
    args: string[],
    options: IPtyForkOptions,
    readFile?: (path: string) => string,
  ) {
    checkType("name", options.name, "string");
    checkType("cols", options.cols, "number");
    checkType("rows", options.rows, "number");
    checkType("cwd", options.cwd, "string");
    checkType("env", options.env, "object");
    checkType("uid", options.uid, "number");
    checkType("gid", options.gid, "number");
    checkType("encoding", options.encoding, "string");
    this.handleFlowControl = options.handleFlowControl === true;
    this.#pause = options.flowControlPause || "\x13";
    this.#resume = options.flowControlResume || "\x11";
    this.#file = file;
    this.#readFile = readFile;
    const encoding = options.encoding === undefined ? "utf8" : options.encoding;
    const decoder = encoding === null ? undefined : new StringDecoder(encoding as BufferEncoding);
    this.#decoder = decoder;
    const env: Record<string, string | undefined> = { ...(options.env ?? process.env) };
    if (options.env === undefined) { for (const name of HOST_TERMINAL_VARIABLES) delete env[name]; }
    const cwd = options.cwd || process.cwd();
    env.PWD = cwd;
    env.TERM = options.name || env.TERM || "xterm";
    this.#terminal = new Terminal({
      cols: options.cols || undefined,
      rows: options.rows || undefined,
      data: (_, bytes) => {
        const chunk = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
        const text = decoder === undefined ? chunk : decoder.write(chunk);
        if (text.length > 0) this.#data.fire(text);
      },
    });
    const request = buildRequest({
      cmd: file,
      args,
      cwd,
      uid: options.uid,
      gid: options.gid,
      buffered: false,
      clearEnv: true,
      ...terminalRequest(this.#terminal, env),
    }, scheduler.defaults);
    // As node-pty, a command that cannot start ends with exit code 1, and its reason is shown on the terminal.
    const failure = scheduler.preflight?.(request);
    if (failure !== undefined) {
      this.spawned = Promise.reject(new Error(failure.message));
      this.spawned.catch(() => {});
      queueMicrotask(() => this.#failed(failure.message));
      return;
    }
    const execution = runOnTerminal(scheduler, request, this.#terminal);
    this.#execution = execution;
    this.spawned = execution.spawned;
    execution.completed.then(({ info }) => {
      const signal = info.signal === null ? 0 : signalNumber(info.signal) ?? 0;
      this.#exited({ exitCode: info.code ?? 0, signal });
    }, (error: unknown) => this.#failed(error instanceof Error ? error.message : String(error)));
  }

  get pid(): number | undefined {
    return this.#execution?.pid;
  }

  get cols(): number {
    return this.#terminal.cols;
  }

  get rows(): number {
    return this.#terminal.rows;
  }

  get process(): string {
    const pid = this.pid;
    const name = pid === undefined || this.#readFile === undefined ? undefined : foreground(pid, this.#readFile);
    return name ?? this.#file;
  }

  get onData(): IEvent<string | Buffer> {
    return this.#data.event;
  }

  get onExit(): IEvent<IExitEvent> {
    return this.#exit.event;
  }

  on(event: "data" | "exit", listener: (...args: never[]) => unknown): void {
    const call = listener as (...args: unknown[]) => unknown;
    if (event === "data") this.#data.event((data) => call(data));
    else if (event === "exit") this.#exit.event(({ exitCode, signal }) => call(exitCode, signal));
  }

  resize(columns: number, rows: number): void {
    if (!(columns > 0 && rows > 0 && columns < Infinity && rows < Infinity)) {
      throw new Error("resizing must be done using positive cols and rows");
    }
    if (!this.#terminal.closed) {
      this.#terminal.resize(Math.min(Math.floor(columns), 65535), Math.min(Math.floor(rows), 65535));
    }
  }

  clear(): void {}

  write(data: string | Uint8Array): void {
    if (this.handleFlowControl && data === this.#pause) return this.pause();
    if (this.handleFlowControl && data === this.#resume) return this.resume();
    if (!this.#terminal.closed) this.#terminal.write(data);
  }

  kill(signal?: string): void {
    this.#execution?.kill(signalName(signal || "SIGHUP"));
  }

  pause(): void {
    this.#terminal.pause();
  }

  resume(): void {
    this.#terminal.resume();
    const exit = this.#exitEvent;
    if (exit !== undefined) this.#emitExit(exit);
  }

  destroy(): void {
    this.#terminal.close();
    this.kill("SIGHUP");
  }

  #failed(message: string): void {
    // What node-pty's spawn helper prints when its exec or chdir fails, then exits 1.
    this.#data.fire(`${message}\r\n`);
    this.#exited({ exitCode: 1, signal: 0 });
  }

  /**
   * The exit, once output held by pause() is delivered: as node-pty's, after the command's last output. A reader that
   * stays paused does not hold it for ever: as node-pty destroys its socket 200 ms after the exit, what is still held
   * then is dropped and the exit comes.
   */
  #exited(exit: IExitEvent): void {
    this.#exitEvent = exit;
    if (!this.#terminal.paused) return this.#emitExit(exit);
    setTimeout(() => {
      if (this.#exitEvent === undefined) return; // resumed meanwhile
      this.#terminal.drop();
      this.#emitExit(exit);
    }, PAUSED_EXIT_GRACE_MS);
  }

  #emitExit(exit: IExitEvent): void {
    this.#exitEvent = undefined;
    const rest = this.#decoder?.end();
    if (rest) this.#data.fire(rest);
    this.#terminal.close();
    this.#exit.fire(exit);
  }
}

/** node-pty's functions bound to one scheduler. */
export interface PtyApi {
  /**
   * Runs `file` on a pseudo-terminal, as node-pty's `spawn`.
   *
   * @throws {Error} If `args` is a string (a Windows command line) or an option has the wrong type, as node-pty.
   */
  spawn(file: string, args?: string[] | string, options?: IPtyForkOptions): IPty;
}

/**
 * node-pty's API over the scheduler `scheduler()` returns (called on each spawn); `procReader` gives a reader of /proc
 * files for a scheduler whose commands run on this machine (for `process`).
 */
export function ptyApi(
  scheduler: () => Scheduler,
  procReader: (scheduler: Scheduler) => ((path: string) => string) | undefined = () => undefined,
): PtyApi {
  return {
    spawn(file, args = [], options = {}) {
      if (typeof args === "string") throw new Error("args as a string is not supported on unix.");
      const chosen = scheduler();
      return new PooledPty(chosen, file || "sh", args, options ?? {}, procReader(chosen));
    },
  };
}

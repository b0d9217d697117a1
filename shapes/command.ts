/**
 * The `Deno.Command`-shaped API over a pool: `output()` and `spawn()` with Deno's defaults and results.
 *
 * @module
 */

import { SpawnError, SpawnPoolError } from "../core/errors.ts";
import { type Completion, Execution } from "../core/execution.ts";
import type { Scheduler } from "../core/scheduler.ts";
import type { OutputReadableStream } from "../core/output_stream.ts";
import { concatBytes, type ExitInfo, type SpawnRequest, type StdioMode, type WireUsage } from "../core/frame.ts";
import type { ExceededLimit } from "../core/limits.ts";
import { type ResourceUsage, resourceUsage } from "../core/usage.ts";
import { buildRequest, type CommonOptions, stdioOption } from "../core/options.ts";
import { exitStatusCode, signalName } from "../core/signals.ts";
import { runOnTerminal, Terminal, terminalOf, type TerminalOptions, terminalRequest } from "../core/terminal.ts";

/** Options of a pooled command, as `Deno.CommandOptions` plus the pool's own. */
export interface CommandOptions extends CommonOptions {
  /** Arguments, passed exactly. @default {[]} */
  args?: string[];
  /** Variables to set for the command (on top of the inherited environment unless `clearEnv`). */
  env?: Record<string, string>;
  /** Start from an empty environment. @default {false} */
  clearEnv?: boolean;
  /** Stdin: "piped" (spawn only), "inherit" or "null". "inherit" reads nothing in a pool. @default {"inherit"} */
  stdin?: StdioMode;
  /** Stdout. @default {"piped" for output(), "inherit" for spawn()} */
  stdout?: StdioMode;
  /** Stderr. @default {"piped" for output(), "inherit" for spawn()} */
  stderr?: StdioMode;
  /**
   * Run the command on a pseudo-terminal (an extension: Bun's `terminal` option, which Deno lacks). Its stdin, stdout
   * and stderr are the terminal. With `spawn()`: a {@linkcode Terminal} or its options; write with
   * `child.terminal.write()`, read with its `data` callback (the child's `stdin`, `stdout` and `stderr` throw). With
   * `output()`: terminal options without callbacks; what the terminal showed is `stdout` (`stderr` is empty), and nothing
   * types into it, so a program that reads its input waits for ever there (give it a `timeout`, or use `spawn()`). Native
   * workers only (others fail with ENOTSUP).
   */
  terminal?: TerminalOptions | Terminal;
}

/** How a command ended, as `Deno.CommandStatus`. */
export interface CommandStatus {
  /** Whether the exit code was 0. */
  success: boolean;
  /** Exit code; 128 + the signal number when a signal ended the command. */
  code: number;
  /** The signal that ended the command, or null. */
  signal: string | null;
  /**
   * Which of its `limits` ended the command (an extension), when its worker can tell: "cpu" (`cpuSeconds`),
   * "fileSize" (`fileSizeBytes`), "memory" or "processes". Absent otherwise.
   */
  limit?: ExceededLimit;
}

/** The result of `output()`, as `Deno.CommandOutput`. */
export interface CommandOutput extends CommandStatus {
  /**
   * What the command used (an extension, shaped as Bun's `Subprocess.resourceUsage()`), on native and Bun workers;
   * undefined on Node and Deno workers.
   */
  readonly resourceUsage: ResourceUsage | undefined;
  /** Stdout bytes; throws if stdout was not piped. */
  readonly stdout: Uint8Array;
  /** Stderr bytes; throws if stderr was not piped. */
  readonly stderr: Uint8Array;
}

const MODES = ["piped", "inherit", "null"] as const;

interface DenoErrorsLike {
  errors?: Record<string, new (message: string) => Error>;
}

const DENO_ERROR_CLASS: Record<string, string> = {
  ENOENT: "NotFound",
  EACCES: "PermissionDenied",
  EPERM: "PermissionDenied",
  ENOTDIR: "NotADirectory",
};

/**
 * A spawn failure as Deno reports it: a `Deno.errors` class in Deno, an error of that name elsewhere, with Deno's
 * message (`Failed to spawn 'echo': ...`).
 */
function denoStyle(error: unknown): unknown {
  if (!(error instanceof SpawnError)) return error;
  // Deno's output() and spawn() report a cwd that is not a directory as a missing one: NotFound, code ENOENT.
  const notADirectory = error.reason.startsWith("cwd is not a directory");
  const name = notADirectory ? "NotFound" : DENO_ERROR_CLASS[error.code];
  if (name === undefined) return error;
  // A Deno worker's own report is already in Deno's words.
  const message = error.reason.startsWith("Failed to spawn ")
    ? error.reason
    : `Failed to spawn '${error.path}': ${error.reason}`;
  const DenoError = (globalThis as { Deno?: DenoErrorsLike }).Deno?.errors?.[name];
  const converted = DenoError ? new DenoError(message) : Object.assign(new Error(message), { name });
  return Object.assign(converted, { code: notADirectory ? "ENOENT" : error.code, cause: error });
}

/** Throws, as `Deno.Command` does at the call, a failure the host can already see (a missing program or cwd). */
function throwIfCertainToFail(scheduler: Scheduler, request: SpawnRequest): void {
  const failure = scheduler.preflight?.(request);
  if (failure !== undefined) throw denoStyle(new SpawnError(failure, request.cmd, request.args));
}

/** Turns an exit into a status; a timeout or exceeded maxBuffer is an error. */
function toStatus(info: ExitInfo, command: string): CommandStatus {
  if (info.reason === "timeout") {
    throw new SpawnPoolError("ERR_TIMEOUT", `Command "${command}" timed out and was killed`, { command });
  }
  if (info.reason === "maxBuffer") {
    throw new SpawnPoolError(
      "ERR_MAX_BUFFER",
      `Command "${command}" exceeded maxBuffer (and was killed if it still ran)`,
      {
        command,
      },
    );
  }
  const code = exitStatusCode(info);
  const status: CommandStatus = { success: code === 0 && info.signal === null, code, signal: info.signal };
  if (info.limit !== undefined) status.limit = info.limit;
  return status;
}

function toOutput(
  status: CommandStatus,
  stdout: Uint8Array | null,
  stderr: Uint8Array | null,
  usage: WireUsage | undefined,
): CommandOutput {
  return {
    ...status,
    resourceUsage: usage === undefined ? undefined : resourceUsage(usage),
    get stdout(): Uint8Array {
      if (stdout === null) throw new TypeError("Cannot get 'stdout': 'stdout' is not piped");
      return stdout;
    },
    get stderr(): Uint8Array {
      if (stderr === null) throw new TypeError("Cannot get 'stderr': 'stderr' is not piped");
      return stderr;
    },
  };
}

async function drain(stream: ReadableStream<Uint8Array> | undefined): Promise<Uint8Array | null> {
  if (stream === undefined) return null;
  const chunks: Uint8Array[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return concatBytes(chunks);
}

/**
 * A command to run in a pool, shaped like `Deno.Command`.
 *
 * @example Running a command and reading its output
 * ```ts ignore
 * const pool = new Pool();
 * const { code, stdout } = await pool.command("echo", { args: ["hi"] }).output();
 * ```
 */
export class PoolCommand {
  readonly #scheduler: Scheduler;
  readonly #cmd: string | URL;
  readonly #options: CommandOptions;

  /**
   * Creates a command; nothing runs until `output()` or `spawn()`.
   *
   * @throws {TypeError} If `cmd` or an option has the wrong type or contains a NUL byte.
   * @throws {RangeError} If a numeric option is out of range.
   */
  constructor(scheduler: Scheduler, cmd: string | URL, options: CommandOptions = {}) {
    if (typeof options !== "object" || options === null) throw new TypeError("Command options must be an object");
    this.#scheduler = scheduler;
    this.#cmd = cmd;
    this.#options = options;
    this.#request(false); // validate now, as Deno.Command does
    if (options.terminal !== undefined) terminalOf(options.terminal);
  }

  #request(spawned: boolean, terminal?: Terminal) {
    const o = this.#options;
    const outDefault = spawned ? "inherit" : "piped";
    const stdio = {
      stdin: stdioOption(o.stdin, MODES, "inherit", "stdin"),
      stdout: stdioOption(o.stdout, MODES, outDefault, "stdout"),
      stderr: stdioOption(o.stderr, MODES, outDefault, "stderr"),
      terminal: undefined,
    };
    return buildRequest({
      ...o,
      cmd: this.#cmd,
      args: o.args ?? [],
      buffered: !spawned,
      ...(terminal === undefined ? stdio : terminalRequest(terminal, o.env)),
    }, this.#scheduler.defaults);
  }

  /**
   * The terminal of `output()`: its options make one for this call, whose output is collected (so no callbacks);
   * undefined without `terminal`.
   */
  #outputTerminal(): Terminal | undefined {
    const given = this.#options.terminal;
    if (given === undefined) return undefined;
    const callbacks = typeof given === "object" && given !== null &&
      ["data", "exit", "drain"].some((name) => (given as Record<string, unknown>)[name] !== undefined);
    if (given instanceof Terminal || callbacks) {
      throw new TypeError(
        "output() collects what the terminal shows into stdout: give it terminal options without callbacks, or " +
          "read a Terminal with spawn()",
      );
    }
    return terminalOf(given);
  }

  /**
   * Runs the command and collects its output. As with `Deno.Command`, what fails before the command can start
   * throws here, not in the promise.
   *
   * @returns The exit status and the bytes of piped stdout and stderr.
   * @throws {TypeError} If stdin is "piped" (use `spawn()`).
   * @throws {Deno.errors.NotFound} If the program or the cwd does not exist (an error named so outside Deno).
   * @throws {Deno.errors.NotCapable} If a Deno host's run permission does not cover the command.
   */
  output(): Promise<CommandOutput> {
    const terminal = this.#outputTerminal();
    const request = this.#request(false, terminal);
    if (terminal !== undefined) request.stdin = "null"; // nothing types into it
    else if (request.stdin === "piped") {
      throw new TypeError("Piped stdin is not supported for this function, use 'Deno.Command.spawn()' instead");
    }
    throwIfCertainToFail(this.#scheduler, request);
    return this.#collect(request, new Execution(this.#scheduler, request, { signal: this.#options.signal }));
  }

  async #collect(request: SpawnRequest, execution: Execution): Promise<CommandOutput> {
    let done: Completion;
    try {
      done = await execution.completed;
    } catch (error) {
      throw denoStyle(error);
    }
    return toOutput(
      toStatus(done.info, request.cmd),
      request.stdout === "piped" ? done.stdout : null,
      request.stderr === "piped" || request.terminal !== undefined ? done.stderr : null,
      done.info.usage,
    );
  }

  /** Not available: a pool cannot run a command synchronously. @throws {TypeError} Always. */
  outputSync(): never {
    throw new TypeError("A pool cannot run commands synchronously; use 'output()'");
  }

  /**
   * Starts the command and returns its handle at once; the pid arrives when the worker reports it.
   *
   * @throws {Deno.errors.NotFound} If the program or the cwd does not exist (an error named so outside Deno).
   * @throws {Deno.errors.NotCapable} If a Deno host's run permission does not cover the command.
   */
  spawn(): PooledChildProcess {
    const given = this.#options.terminal;
    const terminal = given === undefined ? undefined : terminalOf(given);
    const request = this.#request(true, terminal);
    throwIfCertainToFail(this.#scheduler, request);
    const { signal } = this.#options;
    const execution = terminal === undefined
      ? new Execution(this.#scheduler, request, { signal })
      : runOnTerminal(this.#scheduler, request, terminal, signal);
    return new PooledChildProcess(execution, terminal);
  }
}

/**
 * A running pooled command, shaped like `Deno.ChildProcess`; from `spawn()` on a command.
 *
 * @example Writing stdin and reading stdout
 * ```ts
 * import { Pool } from "@spawnpool/spawnpool";
 *
 * await using pool = new Pool({ size: 1 });
 * const child = pool.command("tr", { args: ["a-z", "A-Z"], stdin: "piped", stdout: "piped" }).spawn();
 * const writer = child.stdin.getWriter();
 * await writer.write(new TextEncoder().encode("shout"));
 * await writer.close();
 * const { code, stdout } = await child.output();
 * console.log(code, new TextDecoder().decode(stdout)); // 0 "SHOUT"
 * ```
 */
export class PooledChildProcess {
  readonly #execution: Execution;
  readonly #status: Promise<CommandStatus>;
  #terminated = false;
  /** The terminal the command runs on (`terminal`, an extension); undefined without one. */
  readonly terminal: Terminal | undefined;

  /** @internal */
  constructor(execution: Execution, terminal?: Terminal) {
    this.#execution = execution;
    this.terminal = terminal;
    const command = execution.request.cmd;
    // On a terminal, the status comes after the terminal's last output, so that closing it then loses none.
    const exit = terminal === undefined ? execution.exited : execution.completed.then(({ info }) => info);
    this.#status = exit.then(
      (info) => {
        this.#terminated = true;
        return toStatus(info, command);
      },
      (error) => Promise.reject(denoStyle(error)),
    );
    this.#status.catch(() => {});
  }

  /** The pid, once the worker has reported it (after `spawned` resolves). */
  get pid(): number | undefined {
    return this.#execution.pid;
  }

  get #notPiped(): string {
    return this.terminal === undefined ? "not piped" : "the terminal (child.terminal)";
  }

  /** Resolves with the pid once the command started; rejects if it could not start. */
  get spawned(): Promise<number> {
    return this.#execution.spawned.catch((error) => Promise.reject(denoStyle(error)));
  }

  /** Stdin; throws if not piped. */
  get stdin(): WritableStream<Uint8Array> {
    const stdin = this.terminal === undefined ? this.#execution.stdin : undefined;
    if (stdin === undefined) throw new TypeError(`Cannot get 'stdin': 'stdin' is ${this.#notPiped}`);
    return stdin;
  }

  /** Stdout; throws if not piped. */
  get stdout(): OutputReadableStream {
    const stdout = this.terminal === undefined ? this.#execution.stdout : undefined;
    if (stdout === undefined) throw new TypeError(`Cannot get 'stdout': 'stdout' is ${this.#notPiped}`);
    return stdout;
  }

  /** Stderr; throws if not piped. */
  get stderr(): OutputReadableStream {
    const stderr = this.terminal === undefined ? this.#execution.stderr : undefined;
    if (stderr === undefined) throw new TypeError(`Cannot get 'stderr': 'stderr' is ${this.#notPiped}`);
    return stderr;
  }

  /**
   * Resolves when the command exited, as `Deno.ChildProcess.status` does: its piped output may still be
   * open (a grandchild can hold it) and readable.
   */
  get status(): Promise<CommandStatus> {
    return this.#status;
  }

  /** Waits for exit and collects piped stdout and stderr. */
  async output(): Promise<CommandOutput> {
    const [stdout, stderr, status] = await Promise.all([
      drain(this.#execution.stdout),
      drain(this.#execution.stderr),
      this.#status,
    ]);
    return toOutput(status, stdout, stderr, this.#execution.usage);
  }

  /**
   * What the command used (an extension, shaped as Bun's `Subprocess.resourceUsage()`): set once it has exited, on
   * native and Bun workers; undefined before, and on Node and Deno workers.
   */
  resourceUsage(): ResourceUsage | undefined {
    const usage = this.#execution.usage;
    return usage === undefined ? undefined : resourceUsage(usage);
  }

  /**
   * Sends a signal to the command.
   *
   * @param signal Signal name or number; 0 sends none (it throws once the command has terminated). @default {"SIGTERM"}
   * @throws {TypeError} For an unknown signal, or once the command's status has settled, as `Deno.ChildProcess`.
   */
  kill(signal: string | number = "SIGTERM"): void {
    // Signal 0 only asks whether the command is still there: it is, until its status settles.
    let name: string | undefined;
    if (signal !== 0) {
      try {
        name = signalName(signal);
      } catch {
        throw new TypeError(`Invalid signal: ${String(signal)}`);
      }
    }
    if (this.#terminated) throw new TypeError("Child process has already terminated");
    if (name !== undefined) this.#execution.kill(name);
  }

  /**
   * Sends a signal to the command and every process it started (an extension): all of them where the command was
   * spawned with `killTree` on a native worker, which keeps them within its reach; otherwise those its worker can
   * still find (a JavaScript worker signals the command's process group).
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @throws {TypeError} For an unknown signal, or once the command's status has settled, as `kill()`.
   *
   * @example Ending a shell and the jobs it left in the background
   * ```ts ignore
   * const child = pool.command("sh", { args: ["-c", "sleep 100 & sleep 100"], killTree: true }).spawn();
   * child.killTree();
   * console.log((await child.status).signal); // "SIGTERM"
   * ```
   */
  killTree(signal: string | number = "SIGTERM"): void {
    let name: string;
    try {
      name = signalName(signal);
    } catch {
      throw new TypeError(`Invalid signal: ${String(signal)}`);
    }
    if (this.#terminated) throw new TypeError("Child process has already terminated");
    this.#execution.kill(name, "tree");
  }

  /** Lets the command keep the host alive (the default). */
  ref(): void {
    this.#execution.ref();
  }

  /** Lets the host exit while the command runs. */
  unref(): void {
    this.#execution.unref();
  }

  /** Kills the command if it is still running and waits for it. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.#execution.kill("SIGTERM");
    await this.#status.catch(() => {});
  }
}

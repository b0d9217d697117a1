/**
 * The `Bun.spawn`-shaped API over a pool: `spawn([cmd, ...args], options)` or `spawn({ cmd, ...options })`.
 *
 * @module
 */

import { SpawnError } from "../core/errors.ts";
import { Execution } from "../core/execution.ts";
import type { Scheduler } from "../core/scheduler.ts";
import type { OutputReadableStream } from "../core/output_stream.ts";
import type { ExitInfo, SpawnRequest, WireTerminal } from "../core/frame.ts";
import type { ExceededLimit } from "../core/limits.ts";
import { buildRequest, type CommonOptions, type RequestInput } from "../core/options.ts";
import { type ResourceUsage, resourceUsage } from "../core/usage.ts";
import { exitStatusCode, signalName } from "../core/signals.ts";
import { runOnTerminal, type Terminal, terminalOf, type TerminalOptions, terminalRequest } from "../core/terminal.ts";
import {
  type BunInput,
  type BunOutput,
  fileSink,
  outputMode,
  type PooledFileSink,
  relayOut,
  stdinSource,
  stdioArray,
} from "./_bun_stdio.ts";

export type { BunInput, BunOutput, PooledFileSink } from "./_bun_stdio.ts";

/** Options of a pooled spawn, as `Bun.spawn`'s plus the pool's own. */
export interface SpawnOptions extends CommonOptions {
  /** The environment, replacing the inherited one as in Bun. @default {the worker's environment} */
  env?: Record<string, string | undefined>;
  /** Stdin: "pipe" for a writable sink, bytes, a string, a Blob, a Response or a stream. @default {"ignore"} */
  stdin?: BunInput;
  /** Stdout. @default {"pipe"} */
  stdout?: BunOutput;
  /** Stderr. @default {"inherit"} */
  stderr?: BunOutput;
  /**
   * Bun's other form of stdio: `[stdin, stdout, stderr, ...]`, which wins over `stdin`, `stdout` and `stderr`. A pool
   * gives a command no descriptor past stderr: a slot past it may only be empty (`"ignore"`, null, undefined or an
   * empty Blob).
   */
  stdio?: readonly unknown[];
  /**
   * Run the command on a pseudo-terminal, as Bun's `terminal`: a {@linkcode Terminal} (for several commands in turn)
   * or its options (a terminal for this command alone, closed once its output ended). Its stdin, stdout and stderr are
   * the terminal (`stdin`, `stdout`, `stderr` and `stdio` are not used, and the subprocess's are null): write with
   * `proc.terminal.write()`, read with its `data` callback. Native workers only (others fail with ENOTSUP).
   */
  terminal?: TerminalOptions | Terminal;
  /** Called once when the command exits or could not start. */
  onExit?: (
    subprocess: PooledSubprocess,
    exitCode: number | null,
    signalCode: string | null,
    error?: Error,
  ) => void | Promise<void>;
}

/** `spawn({ cmd, ...options })`. */
export interface SpawnOptionsWithCmd extends SpawnOptions {
  /** Program and arguments. */
  cmd: string[];
}

/** Parses the two call forms of `spawn`. */
export function spawnArguments(
  cmdOrOptions: string[] | SpawnOptionsWithCmd,
  maybeOptions?: SpawnOptions,
): { cmd: string[]; options: SpawnOptions } {
  if (Array.isArray(cmdOrOptions)) return { cmd: cmdOrOptions, options: maybeOptions ?? {} };
  if (typeof cmdOrOptions === "object" && cmdOrOptions !== null && Array.isArray(cmdOrOptions.cmd)) {
    return { cmd: cmdOrOptions.cmd, options: cmdOrOptions };
  }
  throw new TypeError("spawn expects an array [cmd, ...args] or an options object with a 'cmd' array");
}

/**
 * The request of a spawn of `cmd` with `options` and the stdio fields given (its pipes', or its terminal's), checked;
 * as Bun.spawn, a program or cwd that is certainly missing throws here (code ENOENT, ENOTDIR, EACCES).
 */
function bunRequest(
  scheduler: Scheduler,
  cmd: string[],
  options: SpawnOptions,
  // `terminal` always given, so that the option's own (a Terminal or its options) never reaches the request.
  stdio: Pick<RequestInput, "stdin" | "stdout" | "stderr" | "sockets" | "env"> & { terminal: WireTerminal | undefined },
): SpawnRequest {
  const request = buildRequest({
    ...options,
    cmd: cmd[0],
    args: cmd.slice(1),
    env: options.env as Record<string, string> | undefined,
    clearEnv: options.env !== undefined,
    buffered: false,
    ...stdio,
  }, scheduler.defaults);
  const failure = scheduler.preflight?.(request);
  if (failure !== undefined) throw new SpawnError(failure, request.cmd, request.args);
  return request;
}

/**
 * A running pooled command, shaped like Bun's `Subprocess`; from `spawn()`.
 *
 * @example Exit code and output
 * ```ts
 * import { Pool } from "@spawnpool/spawnpool";
 *
 * await using pool = new Pool({ size: 1 });
 * const proc = pool.spawn(["sh", "-c", "echo out; exit 3"]);
 * console.log(await new Response(proc.stdout).text(), await proc.exited, proc.exitCode); // "out\n" 3 3
 * ```
 */
export class PooledSubprocess {
  /** Stdin when it is "pipe"; undefined otherwise, and null on a terminal (Bun's value, which its types omit too). */
  readonly stdin: PooledFileSink | undefined;
  /** Stdout when it is "pipe"; undefined otherwise, and null on a terminal (as stdin). */
  readonly stdout: OutputReadableStream | undefined;
  /** Stderr when it is "pipe"; undefined otherwise, and null on a terminal (as stdin). */
  readonly stderr: OutputReadableStream | undefined;
  /** The terminal the command runs on (`terminal`); undefined without one. */
  readonly terminal: Terminal | undefined;
  /** As Bun's `proc.stdio`: null for each slot, the three standard ones and the empty ones past them. */
  readonly stdio: null[];
  /**
   * Resolves with the exit code (128 + signal number after a signal) when the command exits; rejects if it could
   * not start, or if its worker died or the pool closed before it exited.
   */
  readonly exited: Promise<number>;
  #execution: Execution;
  #exitCode: number | null = null;
  #signalCode: string | null = null;
  #limit: ExceededLimit | undefined;

  /**
   * Starts a command in `scheduler`'s pool.
   *
   * @throws {TypeError} If the command or an option has the wrong type or contains a NUL byte.
   * @throws {RangeError} If a numeric option is out of range.
   */
  constructor(scheduler: Scheduler, cmd: string[], options: SpawnOptions) {
    if (typeof options !== "object" || options === null) throw new TypeError("spawn options must be an object");
    if (cmd.length === 0) throw new TypeError("spawn needs at least the program to run");
    if (options.onExit !== undefined && typeof options.onExit !== "function") {
      throw new TypeError("onExit must be a function");
    }
    if (options.terminal !== undefined) {
      // Bun's values on a terminal, outside its declared types as in Bun's own.
      this.stdin = this.stdout = this.stderr = null as unknown as undefined;
      this.stdio = [null, null, null];
      this.terminal = terminalOf(options.terminal);
      this.#execution = this.#start(scheduler, cmd, options, this.terminal);
      // On a terminal, after its last output (Bun's can come first): `await proc.exited; terminal.close()` loses none.
      const done = this.#execution.completed.then(({ info }) => info);
      this.exited = this.#exitStatus(done, options.onExit);
      return;
    }
    this.terminal = undefined;
    const { slots, extra } = options.stdio === undefined
      ? { slots: [options.stdin, options.stdout, options.stderr], extra: [] }
      : stdioArray(options.stdio);
    const stdin = stdinSource(slots[0] as BunInput | undefined);
    const stdout = outputMode(slots[1], "pipe", "stdout", 1);
    const stderr = outputMode(slots[2], "inherit", "stderr", 2);
    this.stdio = [null, null, null, ...extra];
    const request = bunRequest(scheduler, cmd, options, {
      stdin: stdin.mode,
      stdout: stdout.mode,
      stderr: stderr.mode,
      sockets: true, // as Bun.spawn's pipes: a writer whose reader went away gets ECONNRESET, not SIGPIPE
      terminal: undefined,
    });
    const execution = new Execution(scheduler, request, { stdinSource: stdin.source, signal: options.signal });
    this.#execution = execution;
    // Output relayed to a file of the host's is written there before `exited` resolves, as a child writing to the
    // file itself would have.
    const relays = [[execution.stdout, stdout.relay], [execution.stderr, stderr.relay]] as const;
    const relayed = relays.flatMap((
      [stream, to],
    ) => (stream !== undefined && to !== undefined ? [relayOut(stream, to)] : []));
    this.stdout = stdout.relay === undefined ? execution.stdout : undefined;
    this.stderr = stderr.relay === undefined ? execution.stderr : undefined;
    this.stdin = execution.stdin === undefined ? undefined : fileSink(execution.stdin);
    // As in Bun, `exited` comes with the exit itself: piped output may still be open (a grandchild can hold it).
    this.exited = this.#exitStatus(Promise.all([execution.exited, ...relayed]).then(([info]) => info), options.onExit);
  }

  /** Starts the command on `terminal`: its stdio are the terminal's. */
  #start(scheduler: Scheduler, cmd: string[], options: SpawnOptions, terminal: Terminal): Execution {
    const request = bunRequest(scheduler, cmd, options, terminalRequest(terminal, options.env));
    const execution = runOnTerminal(scheduler, request, terminal, options.signal);
    return execution;
  }

  /** `exited`: the exit status code, once the command exited; `onExit` is called with it. */
  #exitStatus(exit: Promise<ExitInfo>, onExit?: SpawnOptions["onExit"]): Promise<number> {
    const exited = exit.then((info) => {
      this.#exitCode = info.code;
      this.#signalCode = info.signal;
      this.#limit = info.limit;
      return exitStatusCode(info);
    });
    exited.catch(() => {});
    if (onExit !== undefined) {
      exited.then(
        () => onExit(this, this.#exitCode, this.#signalCode),
        (error) => onExit(this, null, null, error),
      );
    }
    return exited;
  }

  /** The pid, once the worker has reported it (after `spawned` resolves). */
  get pid(): number | undefined {
    return this.#execution.pid;
  }

  /** Resolves with the pid once the command started; rejects if it could not start. */
  get spawned(): Promise<number> {
    return this.#execution.spawned;
  }

  /** Exit code, or null while running or after a signal. */
  get exitCode(): number | null {
    return this.#exitCode;
  }

  /**
   * What the command used, as Bun's `resourceUsage()`: set once it has exited, on native and Bun workers; undefined
   * before, and on Node and Deno workers (their runtimes do not tell).
   */
  resourceUsage(): ResourceUsage | undefined {
    const usage = this.#execution.usage;
    return usage === undefined ? undefined : resourceUsage(usage);
  }

  /** The signal that ended the command, or null. */
  get signalCode(): string | null {
    return this.#signalCode;
  }

  /**
   * Which of its `limits` ended the command (an extension), once it has exited and when its worker can tell: "cpu",
   * "fileSize", "memory" or "processes"; undefined otherwise.
   */
  get limit(): ExceededLimit | undefined {
    return this.#limit;
  }

  /** Whether `kill()` was called. */
  get killed(): boolean {
    return this.#execution.killed;
  }

  /**
   * Sends a signal to the command.
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @throws {RangeError} For an unknown signal.
   */
  kill(signal: string | number = "SIGTERM"): void {
    this.#execution.kill(signalName(signal));
  }

  /**
   * Sends a signal to the command and every process it started (an extension): all of them where it was spawned with
   * `killTree` on a native worker, which keeps them within its reach; otherwise those its worker can still find (a
   * JavaScript worker signals the command's process group).
   *
   * @param signal Signal name or number. @default {"SIGTERM"}
   * @throws {RangeError} For an unknown signal.
   *
   * @example Ending a shell and the jobs it left in the background
   * ```ts ignore
   * const proc = pool.spawn(["sh", "-c", "sleep 100 & sleep 100"], { killTree: true });
   * proc.killTree("SIGKILL");
   * await proc.exited; // 137
   * ```
   */
  killTree(signal: string | number = "SIGTERM"): void {
    this.#execution.kill(signalName(signal), "tree");
  }

  /** Lets the command keep the host alive (the default). */
  ref(): void {
    this.#execution.ref();
  }

  /** Lets the host exit while the command runs. */
  unref(): void {
    this.#execution.unref();
  }

  /**
   * Kills the command with SIGTERM unless it has exited, and waits for its exit: what `await using proc =
   * spawn(...)` does at the end of its block, as with Bun's `Subprocess`. (Bun's has no `Symbol.dispose`, so
   * neither has this: a plain `using` is a TypeError in both.) Never rejects: a command that could not start
   * has nothing to wait for.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    this.kill();
    await this.exited.catch(() => {});
  }
}

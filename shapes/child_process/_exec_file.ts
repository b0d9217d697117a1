/**
 * The steps of `execFile` (shapes/child_process/api.ts), each a function: its arguments, its options and their
 * defaults, then, once the command is spawned, its output collected up to `maxBuffer`, its timer, and the error it
 * fails with.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { constants as osConstants } from "node:os";
import type { ExceededLimit } from "../../core/limits.ts";
import { DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS } from "../../core/options.ts";
import { type ChildProcess, killGroup } from "./child_process.ts";
import { invalidArgType, killSignalOf, nodeError, noNulBytes, outOfRange, validateTimeout } from "./errors.ts";

/** `execFile`'s and `exec`'s callback. */
export type ExecCallback = (error: ExecError | null, stdout: string | Buffer, stderr: string | Buffer) => void;

/** The error `execFile` and `exec` report for a command that failed, as Node's. */
export type ExecError = Error & {
  code?: number | string | null;
  killed?: boolean;
  signal?: NodeJS.Signals | null;
  cmd?: string;
  stdout?: string | Buffer;
  stderr?: string | Buffer;
  /** Which of its `limits` ended the command (an extension), when its worker can tell; absent otherwise. */
  limit?: ExceededLimit;
};

const MAX_BUFFER = 1024 * 1024;

/**
 * `execFile(file[, args][, options][, callback])`'s optional arguments, sorted out as Node does: the arguments (a
 * copy), the options (`{}` when not given) and the callback.
 *
 * @throws {TypeError} `ERR_INVALID_ARG_TYPE` for options that are not an object, or a callback that is not a function.
 */
export function execFileArguments(
  argsIn: unknown,
  optionsIn: unknown,
  callbackIn: unknown,
): { args: string[]; options: Record<string, unknown>; callback: ExecCallback | undefined } {
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
  return {
    args: args as string[],
    options: options as Record<string, unknown>,
    callback: (callback ?? undefined) as ExecCallback | undefined,
  };
}

/** `execFile`'s options, checked, with Node's defaults; and what it passes to `spawn`. */
export interface ExecFileSettings {
  /** Milliseconds, 0 for none. */
  timeout: number;
  /** The pool's own timeout: SIGKILL to the command's group, a while after `timeout`'s signal (0: none). */
  backstop: number;
  maxBuffer: number;
  killSignal: string;
  /** The output's encoding, or null for Buffers. */
  encoding: BufferEncoding | null;
  /** The options `spawn` gets. */
  spawnOptions: Record<string, unknown>;
}

/**
 * `execFile`'s options with Node's defaults, checked.
 *
 * @throws {TypeError} For an `argv0` that is not a string or holds a NUL byte, or an unknown `killSignal`.
 * @throws {RangeError} For a `timeout` or `maxBuffer` out of range.
 */
export function execFileSettings(options: Record<string, unknown>): ExecFileSettings {
  const o: Record<string, unknown> = {
    __proto__: null,
    encoding: "utf8",
    timeout: 0,
    maxBuffer: MAX_BUFFER,
    killSignal: "SIGTERM",
    cwd: null,
    env: null,
    shell: false,
    ...options,
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
  // The timeout is execFile's own timer (startTimer), as in Node; the pool's is only a backstop, SIGKILL to the
  // process group if the command still runs 5 s after that timer signalled it. (With it the request asks for a
  // process group of the command's own, which the timer signals.) A timeout within 5 s of MAX_TIMER_MS, over 24
  // days, gets a backstop of MAX_TIMER_MS, which may then come first.
  const backstop = timeout > 0 ? Math.min(timeout + DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS) : 0;
  const encoding = o.encoding !== "buffer" && typeof o.encoding === "string" && Buffer.isEncoding(o.encoding)
    ? o.encoding
    : null;
  const spawnOptions = {
    cwd: o.cwd,
    env: o.env,
    gid: o.gid,
    uid: o.uid,
    shell: o.shell,
    signal: o.signal,
    windowsHide: !!o.windowsHide,
    windowsVerbatimArguments: !!o.windowsVerbatimArguments,
    // The pool's extensions, checked by spawn.
    killTree: o.killTree,
    limits: o.limits,
  };
  return { timeout, backstop, maxBuffer, killSignal, encoding, spawnOptions };
}

/**
 * Collects a child's stdout and stderr, each up to `maxBuffer` bytes; past it, keeps what fits and calls `overflow`
 * with the stream's name. Returns what was collected of a stream, joined.
 */
function collectOutput(
  child: ChildProcess,
  encoding: BufferEncoding | null,
  maxBuffer: number,
  overflow: (name: "stdout" | "stderr") => void,
): (fd: 1 | 2) => string | Buffer {
  const collected: [undefined, Array<string | Buffer>, Array<string | Buffer>] = [undefined, [], []];
  const lengths = [0, 0, 0];
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
        overflow(fd === 1 ? "stdout" : "stderr");
      } else {
        collected[fd].push(chunk);
      }
    });
  }
  return (fd) => {
    const stream = fd === 1 ? child.stdout : child.stderr;
    if (encoding || stream?.readableEncoding) return (collected[fd] as string[]).join("");
    return Buffer.concat(collected[fd] as Buffer[]);
  };
}

/**
 * The timeout: `stop` after `timeout` ms, counted from 'spawn' (a command that waited for a worker to start still gets
 * its full time, and the pool's backstop counts from about that moment too). Returns what clears it.
 */
function startTimer(child: ChildProcess, timeout: number, stop: () => void): () => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  if (timeout > 0) child.once("spawn", () => (timer = setTimeout(stop, timeout)));
  return () => clearTimeout(timer);
}

/** The error of a command that failed (exited non-zero, or was signalled), as Node's execFile makes it. */
function commandFailed(
  cmd: string,
  stderr: string | Buffer,
  code: number | null | undefined,
  signal: NodeJS.Signals | null | undefined,
  killed: boolean,
): ExecError {
  return Object.assign(new Error(`Command failed: ${cmd}\n${stderr}`), {
    code: code !== undefined && code !== null && code < 0 ? systemErrorName(code) : code,
    killed,
    signal: signal,
  });
}

/**
 * Runs a spawned `execFile` command to its end: collects its output (`maxBuffer`), arms its timer, and calls `done`
 * with its output, or the error it failed with, once it closed.
 */
export function finishExecFile(
  child: ChildProcess,
  file: string,
  args: string[],
  settings: ExecFileSettings,
  done: ExecCallback | undefined,
): void {
  let error: ExecError | null = null;
  let killedHere = false;
  let exited = false;
  // The timeout and maxBuffer end the command as Node's execFile does: signalled once, with killSignal, and its
  // output streams destroyed, so the callback, which still waits for 'close', gets the output read so far, and
  // later writes meet a closed pipe. The signal goes first, so the worker signals the command just before it
  // closes the pipes (the command ends by killSignal, not by a write to a closed pipe). The timeout signals the
  // command's process group, as the pool's timeout would.
  const stop = (group: boolean): void => {
    killedHere = true;
    if (group) killGroup(child, settings.killSignal);
    else child.kill(settings.killSignal as NodeJS.Signals);
    child.stdout?.destroy();
    child.stderr?.destroy();
  };
  const output = collectOutput(child, settings.encoding, settings.maxBuffer, (name) => {
    error = nodeError(RangeError, "ERR_CHILD_PROCESS_STDIO_MAXBUFFER", `${name} maxBuffer length exceeded`);
    stop(false);
  });
  const clearTimer = startTimer(child, settings.timeout, () => stop(true));
  const onExit = (code?: number | null, signal?: NodeJS.Signals | null): void => {
    if (exited) return;
    exited = true;
    clearTimer();
    if (!done) return;
    const stdout = output(1);
    const stderr = output(2);
    if (!error && code === 0 && signal === null) {
      done(null, stdout, stderr);
      return;
    }
    let cmd = file;
    if (args.length > 0) cmd += ` ${args.join(" ")}`;
    error ??= commandFailed(cmd, stderr, code, signal, child.killed || killedHere);
    error.cmd = cmd;
    if (child.limit !== undefined) error.limit = child.limit;
    done(error, stdout, stderr);
  };
  child.addListener("close", onExit);
  child.addListener("error", (e: ExecError) => {
    error = e;
    child.stdout?.destroy();
    child.stderr?.destroy();
    onExit();
  });
}

function systemErrorName(errno: number): string {
  for (const [name, value] of Object.entries(osConstants.errno as Record<string, number>)) {
    if (-value === errno) return name;
  }
  return `Unknown system error ${errno}`;
}

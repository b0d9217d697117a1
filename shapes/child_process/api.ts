/**
 * `spawn`, `execFile` and `exec` (with their promisified forms) over a pool, with Node's argument handling, defaults, events and errors.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import * as native from "node:child_process";
import { constants as osConstants } from "node:os";
import type { Scheduler } from "../../core/execution.ts";
import type { ExceededLimit } from "../../core/limits.ts";
import { DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS } from "../../core/options.ts";
import { ChildProcess, killGroup } from "./child_process.ts";
import { invalidArgType, killSignalOf, nodeError, noNulBytes, outOfRange, validateTimeout } from "./errors.ts";
import { normalizeSpawn, ownOptions, warnNative } from "./options.ts";

type ExecCallback = (error: ExecError | null, stdout: string | Buffer, stderr: string | Buffer) => void;

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
    const { promise: settled, resolve, reject } = Promise.withResolvers<
      { stdout: string | Buffer; stderr: string | Buffer }
    >();
    const promise = settled as typeof settled & { child: unknown };
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
  /**
   * `spawn`, and for execFile what an abort sends (`spec.killSignal` when undefined) and the pool's backstop: a
   * timeout (ms, already checked by execFile) after which the pool SIGKILLs the command's group.
   */
  function spawnWith(file: unknown, args: unknown, options: unknown, abortSignal?: string, backstop = 0) {
    const spec = normalizeSpawn(file, args, options);
    if (typeof spec === "string") {
      warnNative(spec);
      return native.spawn(file as string, args as string[], options as native.SpawnOptions);
    }
    if (backstop > 0) {
      spec.timeout = backstop;
      spec.killSignal = "SIGKILL";
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
    // The timeout is this function's own timer (below), as in Node; the pool's is only a backstop, SIGKILL to the
    // process group if the command still runs 5 s after that timer signalled it. (With it the request asks for a
    // process group of the command's own, which the timer signals.) A timeout within 5 s of MAX_TIMER_MS, over 24
    // days, gets a backstop of MAX_TIMER_MS, which may then come first.
    const backstop = timeout > 0 ? Math.min(timeout + DEFAULT_FORCE_KILL_AFTER_DELAY, MAX_TIMER_MS) : 0;
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
    const child = spawnWith(file, args, spawnOptions, "SIGTERM", backstop) as ChildProcess;
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
      if (child.limit !== undefined) error.limit = child.limit;
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

/**
 * `spawn`, `execFile` and `exec` (with their promisified forms) over a pool, with Node's argument handling, defaults, events and errors.
 *
 * @module
 */

import type { Buffer } from "node:buffer";
import * as native from "node:child_process";
import type { Scheduler } from "../../core/scheduler.ts";
import { type ExecError, execFileArguments, execFileSettings, finishExecFile } from "./_exec_file.ts";
import { ChildProcess } from "./child_process.ts";
import { invalidArgType, noNulBytes } from "./errors.ts";
import { normalizeSpawn, ownOptions, warnNative } from "./options.ts";

export type { ExecError } from "./_exec_file.ts";

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

  /** `child_process.execFile`: its arguments and options (_exec_file.ts), the spawn, then the command run to its end. */
  function execFilePooled(file: unknown, argsIn?: unknown, optionsIn?: unknown, callbackIn?: unknown) {
    const { args, options, callback } = execFileArguments(argsIn, optionsIn, callbackIn);
    const settings = execFileSettings(options);
    const child = spawnWith(file, args, settings.spawnOptions, "SIGTERM", settings.backstop) as ChildProcess;
    finishExecFile(child, file as string, args, settings, callback);
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

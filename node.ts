/**
 * A drop-in for `node:child_process` whose commands run in spawnpool's default pool: change
 *
 * ```ts ignore
 * import { exec, execFile, spawn } from "node:child_process";
 * ```
 *
 * to an import of this module and nothing else in the app changes. `spawn`, `execFile` and `exec`
 * (callback and `util.promisify` forms) return a `ChildProcess`-shaped event emitter with Node streams.
 *
 * What differs from `node:child_process`:
 * - `pid` is set when the worker reports it, just before `'spawn'`; it is `undefined` right after `spawn()`.
 * - `spawnSync`, `execSync`, `execFileSync` and `fork` are the runtime's own, re-exported unchanged: a pool
 *   cannot run a command synchronously, and `fork` needs an IPC channel.
 * - A `stdio` the pool cannot give (an `'ipc'` slot, a stream with an fd, an fd other than the slot's own,
 *   more than three pipes) makes that one call use the runtime's `node:child_process`, with a one-time
 *   `SPAWNPOOL_NATIVE_FALLBACK` process warning. Another pooled child's `stdout` as `stdio[0]` (or its `stdin`
 *   as `stdio[1]`/`[2]`) stays in the pool: the host carries the bytes.
 * - `new ChildProcess()` is a child with no command, as in Node, but its `spawn(options)` throws
 *   `ERR_METHOD_NOT_IMPLEMENTED`: children that run come from `spawn`, `execFile`, `exec`.
 * - Stdin `'inherit'` reads nothing (workers have no terminal to share); stdout and stderr `'inherit'` write
 *   to the host's.
 * - `timeout` sends `killSignal` to the command's whole process group, and SIGKILL 5 s later if it still runs.
 *   (An aborted `signal` sends `killSignal` to the command only, as Node does.)
 * - When the host exits, its workers kill the commands still running, unless they were started with
 *   `detached: true` (Node leaves every child running).
 *
 * @example Switching one import
 * ```ts
 * import { execFile, spawn } from "@spawnpool/spawnpool/node";
 * import { promisify } from "node:util";
 *
 * const { stdout } = await promisify(execFile)("echo", ["hi"]);
 * console.log(stdout); // "hi\n"
 *
 * const child = spawn("cat");
 * child.stdout!.on("data", (chunk) => console.log(String(chunk))); // "bytes in"
 * child.stdin!.end("bytes in");
 * ```
 *
 * @module
 */

import { type ChildProcessApi, childProcessApi } from "./shapes/child_process/api.ts";
import { defaultPool, type Pool, schedulerOf } from "./pool.ts";

const api: ChildProcessApi = childProcessApi(defaultPool);

/**
 * `child_process.spawn(command, args?, options?)` on the default pool.
 *
 * @example Streaming a command's output
 * ```ts
 * import { spawn } from "@spawnpool/spawnpool/node";
 *
 * const child = spawn("ls", ["-l", "/"]);
 * child.stdout!.pipe(process.stdout);
 * child.on("close", (code) => console.log(`exited with ${code}`));
 * ```
 */
export const spawn: ChildProcessApi["spawn"] = api.spawn;

/**
 * `child_process.execFile(file, args?, options?, callback?)` on the default pool; `util.promisify`
 * gives `{ stdout, stderr }` as Node's does.
 *
 * @example Running a program and collecting its output
 * ```ts
 * import { execFile } from "@spawnpool/spawnpool/node";
 *
 * execFile("echo", ["hi"], (error, stdout) => console.log(error, stdout)); // null "hi\n"
 * ```
 */
export const execFile: ChildProcessApi["execFile"] = api.execFile;

/**
 * `child_process.exec(command, options?, callback?)` on the default pool: runs `command` with `/bin/sh -c`
 * (or `options.shell`).
 *
 * @example A shell pipeline
 * ```ts
 * import { exec } from "@spawnpool/spawnpool/node";
 *
 * exec("echo hi | tr a-z A-Z", (error, stdout) => console.log(stdout)); // "HI\n"
 * ```
 */
export const exec: ChildProcessApi["exec"] = api.exec;

/**
 * `spawn`, `execFile` and `exec` bound to an explicit pool instead of the default one.
 *
 * @example Node app, Bun workers
 * ```ts
 * import { Pool } from "@spawnpool/spawnpool";
 * import { childProcessFor } from "@spawnpool/spawnpool/node";
 *
 * await using pool = new Pool({ runtime: "bun" });
 * const { execFile } = childProcessFor(pool);
 * execFile("echo", ["hi"], (error, stdout) => console.log(stdout));
 * ```
 *
 * @param pool The pool to run commands in.
 * @returns The three functions, shaped exactly like the exports of this module.
 * @throws {TypeError} If `pool` is not a {@linkcode Pool}.
 */
export function childProcessFor(pool: Pool): ChildProcessApi {
  const scheduler = schedulerOf(pool);
  return childProcessApi(() => scheduler);
}

import { ChildProcess } from "./shapes/child_process/child_process.ts";
export { AbortError } from "./shapes/child_process/errors.ts";
export { ChildProcess };
export type { ChildProcessApi, ExecError } from "./shapes/child_process/api.ts";
export type { ExceededLimit, Limits } from "./core/limits.ts";
import { execFileSync, execSync, fork, spawnSync } from "node:child_process";
export { execFileSync, execSync, fork, spawnSync };
export type { Pool } from "./pool.ts";

/**
 * The module as one object too, for `import cp from "spawnpool/node"`: the form of
 * `import cp from "node:child_process"` that a one-line switch meets.
 */
const childProcess: {
  spawn: typeof spawn;
  execFile: typeof execFile;
  exec: typeof exec;
  childProcessFor: typeof childProcessFor;
  execFileSync: typeof execFileSync;
  execSync: typeof execSync;
  fork: typeof fork;
  spawnSync: typeof spawnSync;
  ChildProcess: typeof ChildProcess;
} = { spawn, execFile, exec, childProcessFor, execFileSync, execSync, fork, spawnSync, ChildProcess };
export default childProcess;

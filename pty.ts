/**
 * node-pty's API on a pool, for Node, Deno and Bun with no addon and no node-gyp: change
 * `import * as pty from "node-pty"` to `import * as pty from "spawnpool/pty"` (from JSR: `@spawnpool/spawnpool/pty`).
 * Each command runs on a pseudo-terminal opened by a native worker of the default pool (or of the pool given to
 * {@linkcode ptyFor}). Unlike node-pty's, `pid` is undefined until the worker reports it: await `spawned` for it.
 *
 * @example A shell on a terminal
 * ```ts ignore
 * import * as pty from "@spawnpool/spawnpool/pty";
 *
 * const shell = pty.spawn("bash", [], { name: "xterm-256color", cols: 80, rows: 24 });
 * shell.onData((data) => console.log(data));
 * shell.onExit(({ exitCode }) => console.log("exit", exitCode));
 * shell.write("ls\r");
 * shell.resize(100, 40);
 * shell.write("exit\r");
 * ```
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { PoolCore } from "./core/pool_core.ts";
import type { Scheduler } from "./core/scheduler.ts";
import { defaultPool, type Pool, schedulerOf } from "./pool.ts";
import { type PtyApi, ptyApi } from "./shapes/pty.ts";

/** Reads the foreground process's name from /proc, for a pool whose workers run on this machine. */
function localReader(scheduler: Scheduler): ((path: string) => string) | undefined {
  return scheduler instanceof PoolCore ? (path) => readFileSync(path, "utf8") : undefined;
}

const api: PtyApi = ptyApi(defaultPool, localReader);

/**
 * Runs `file` on a pseudo-terminal of its own, as node-pty's `spawn`, in the default pool.
 *
 * @param file The program. @default {"sh"}
 * @param args Its arguments (an array: a string is a Windows command line, an Error here as in node-pty on Unix).
 * @param options node-pty's options: `name`, `cols`, `rows`, `cwd`, `env`, `encoding`, `uid`, `gid`, flow control.
 * @returns The terminal's command, as node-pty's `IPty`.
 * @throws {Error} For `args` given as a string, or an option of the wrong type (node-pty's messages).
 */
export const spawn: PtyApi["spawn"] = api.spawn;

/**
 * node-pty's API on `pool` instead of the default pool.
 *
 * @example
 * ```ts ignore
 * import { Pool } from "@spawnpool/spawnpool";
 * import { ptyFor } from "@spawnpool/spawnpool/pty";
 *
 * const pool = new Pool({ size: 2 });
 * const shell = ptyFor(pool).spawn("bash", []);
 * ```
 */
export function ptyFor(pool: Pool): PtyApi {
  const scheduler = schedulerOf(pool);
  return ptyApi(() => scheduler, localReader);
}

export type { IDisposable, IEvent, IExitEvent, IPty, IPtyForkOptions, PtyApi } from "./shapes/pty.ts";

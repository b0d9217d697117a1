/**
 * The native worker of the JSR build, which a Deno host gets from npm. The JSR package holds no binary, so on Deno it
 * imports this platform's worker package, `npm:@spawnpool/worker-<platform>-<arch>@<version>` (the packages the npm
 * build lists in its optionalDependencies), whose entry exports its binary's path. Deno installs the package into its
 * npm cache (or the app's `node_modules/.deno`), executable bit kept, and needs no permission to import it. The
 * specifier is built at run time: a literal one would be in the module graph, and Deno fetches a graph's npm packages,
 * every platform's, ahead of the script's first line. So only the pool that wants native workers fetches, and only its
 * platform's package.
 *
 * @module
 */

import { SpawnPoolError } from "../core/errors.ts";
import { system } from "./_system.ts";

/**
 * The worker packages of the JSR build, name to version, as JSON text: `tools/stage.mjs --jsr` defines it (`bun build
 * --define`); no other build does.
 */
declare const SPAWNPOOL_NPM_WORKERS: string | undefined;

/** The npm package that holds the native worker for this platform (spawnpool's optionalDependencies). */
export const NATIVE_WORKER_PACKAGE: string = `@spawnpool/worker-${system.platform}-${system.arch}`;

const NPM_WORKERS: Record<string, string> | undefined = typeof SPAWNPOOL_NPM_WORKERS === "string"
  ? JSON.parse(SPAWNPOOL_NPM_WORKERS)
  : undefined;

/** Whether this is the JSR build, whose native worker a Deno host imports from npm. */
export const WORKERS_FROM_NPM: boolean = NPM_WORKERS !== undefined;

/** The `npm:` specifier of this platform's worker package; undefined in other builds and on other platforms. */
export const NPM_WORKER_SPECIFIER: string | undefined = NPM_WORKERS?.[NATIVE_WORKER_PACKAGE] === undefined
  ? undefined
  : `npm:${NATIVE_WORKER_PACKAGE}@${NPM_WORKERS[NATIVE_WORKER_PACKAGE]}`;

/**
 * How long a pool waits for the import: a registry that takes the connection and never answers would hold the pool's
 * first worker for ever (Deno's fetch has no deadline). What Deno still fetches after it keeps the process alive.
 */
const FETCH_TIMEOUT_MS = 10_000;

let fetched: Promise<string> | undefined;

/**
 * The path of this platform's native worker from its npm package, imported once per process (a failure too).
 *
 * @param timer A timer that keeps no process alive (the Deno adapter's `unrefTimer`).
 * @returns The binary's absolute path.
 * @throws {SpawnPoolError} `ERR_WORKER_START` if this platform has no package, or it could not be imported within 10 s
 * (offline and not in Deno's cache, a registry without it, `"nodeModulesDir": "manual"` without it installed).
 */
export function npmWorkerPath(timer: (ms: number, callback: () => void) => () => void): Promise<string> {
  fetched ??= importWorker(timer);
  return fetched;
}

async function importWorker(timer: (ms: number, callback: () => void) => () => void): Promise<string> {
  const specifier = NPM_WORKER_SPECIFIER;
  if (specifier === undefined) {
    throw new SpawnPoolError(
      "ERR_WORKER_START",
      `No native worker for ${system.platform}-${system.arch} on npm (spawnpool publishes ${
        Object.keys(NPM_WORKERS ?? {}).join(", ")
      }); pass the path of one you built as the execPath option`,
    );
  }
  let cancel: (() => void) | undefined;
  try {
    const imported = import(specifier) as Promise<{ path?: unknown }>;
    const timeout = new Promise<never>((_, reject) => {
      cancel = timer(FETCH_TIMEOUT_MS, () => reject(new Error(`no answer in ${FETCH_TIMEOUT_MS / 1000} s`)));
    });
    const { path } = await Promise.race([imported, timeout]);
    if (typeof path !== "string" || !path.startsWith("/")) throw new Error(`its "path" export is not a path`);
    return path;
  } catch (error) {
    // Deno's messages may end with a period and run over lines (a cause on each).
    const reason = (error instanceof Error ? error.message : String(error)).replace(/\s*\n\s*/g, " ").replace(
      /\.$/,
      "",
    );
    throw new SpawnPoolError(
      "ERR_WORKER_START",
      `Could not import the native worker from npm (${specifier}): ${reason}; add it to the app (deno add ` +
        `${specifier}) or pass the path of a binary as the execPath option`,
      { cause: error },
    );
  } finally {
    cancel?.();
  }
}

/**
 * The one place that detects the current runtime, and the platform the pool runs on: which adapter
 * hosts workers and how each worker runtime is launched.
 *
 * @module
 */

import type { Adapter, Platform, RuntimeName, WorkerLaunch, WorkerProcess, WorkerRuntime } from "../core/adapter.ts";
import { SpawnPoolError } from "../core/errors.ts";
import { NATIVE_WORKER_PACKAGE, NPM_WORKER_SPECIFIER, npmWorkerPath, WORKERS_FROM_NPM } from "./_npm_worker.ts";
import { preflight } from "./_preflight.ts";
import { dirnameOf, fileUrlToPath, joinPath, PATH_DELIMITER, system } from "./_system.ts";
import { bunAdapter } from "./bun.ts";
import { denoAdapter } from "./deno.ts";
import { nodeAdapter } from "./node.ts";

/** The runtime this code runs in. */
export function detectRuntime(): RuntimeName {
  if ("Deno" in globalThis) return "deno";
  if ("Bun" in globalThis) return "bun";
  return "node";
}

/** The adapter for a runtime. */
export function adapterFor(runtime: RuntimeName): Adapter {
  return runtime === "deno" ? denoAdapter : runtime === "bun" ? bunAdapter : nodeAdapter;
}

/**
 * The worker entry next to this module: `worker/main.ts` in the source (JSR, a checkout) or
 * `worker/main.js` in the npm build. A path for a local module; the URL itself when this module was
 * imported from a remote URL (JSR), which only Deno workers can run.
 */
export const WORKER_ENTRY: string = (() => {
  const url = new URL(`../worker/main.${import.meta.url.endsWith(".js") ? "js" : "ts"}`, import.meta.url);
  return url.protocol === "file:" ? fileUrlToPath(url.href) : url.href;
})();

function findOnPath(name: string): string | undefined {
  return findIn((system.getEnv("PATH") ?? "").split(PATH_DELIMITER).filter((dir) => dir !== ""), name);
}

/**
 * The directories whose `node_modules/.bin` may hold a runtime installed from npm (`npm install bun`, `npm install
 * deno`): this module's own and each above it (the app that installed spawnpool), then the working directory's and
 * each above it. Empty for a remote module's own location (JSR, a URL).
 */
function nodeModulesBins(): string[] {
  const starts = [system.cwd()];
  if (import.meta.url.startsWith("file:")) starts.unshift(dirnameOf(fileUrlToPath(import.meta.url)));
  const bins: string[] = [];
  for (const start of starts) {
    for (const dir of upward(start)) {
      const bin = joinPath(dir, "node_modules", ".bin");
      if (!bins.includes(bin)) bins.push(bin);
    }
  }
  return bins;
}

/** `start` and each directory above it, up to the root. */
function upward(start: string): string[] {
  const dirs = [start];
  for (let dir = start; dirnameOf(dir) !== dir;) dirs.push(dir = dirnameOf(dir));
  return dirs;
}

/**
 * Whether `path` is a file that may be executed (false where it cannot be told, as on a Deno host without read
 * permission there). On Bun by its own lookup (`Bun.which` in that one directory): a `stat` there would load Bun's
 * `node:fs`, about 2 ms of a script's first command.
 */
function executable(path: string): boolean {
  const slash = path.lastIndexOf("/");
  const dir = path.slice(0, slash) || "/";
  if (system.which !== undefined && slash >= 0 && !dir.includes(PATH_DELIMITER)) {
    return system.which(path.slice(slash + 1), dir) !== undefined;
  }
  try {
    const stat = system.stat(path);
    return !stat.directory && (stat.mode & 0o111) !== 0;
  } catch {
    return false;
  }
}

/** The first of `paths` that is an executable file; the rest are not looked at (nor made, for a generator). */
function firstExecutable(paths: Iterable<string>): string | undefined {
  for (const path of paths) {
    if (executable(path)) return path;
  }
  return undefined;
}

function findIn(dirs: readonly string[], name: string): string | undefined {
  return firstExecutable(dirs.map((dir) => joinPath(dir, name)));
}

/**
 * The executable of `runtime`: this process's own for the host runtime, else the npm package's in the app's
 * `node_modules/.bin`, else found on PATH.
 */
export function defaultExecPath(runtime: RuntimeName, host: RuntimeName): string {
  if (runtime === host) return system.execPath();
  const found = findIn(nodeModulesBins(), runtime) ?? findOnPath(runtime);
  if (found === undefined) {
    throw new SpawnPoolError(
      "ERR_WORKER_START",
      `Cannot find "${runtime}" for ${runtime} workers in node_modules/.bin (from this module's directory or the ` +
        `working directory upward) or on PATH; install it (npm install ${runtime}, or the runtime's own installer) ` +
        "or pass the execPath option",
    );
  }
  return found;
}

/**
 * Where the native worker is looked for first: for the sources (a checkout's `adapters/platform.ts`), the build of
 * `npm run build:native` in `native/build/spawnpool-worker`; for the bundle (`dist/lib/`), the copy a checkout's build
 * puts in `dist/native/spawnpool-worker-<platform>-<arch>`. Only the one that can exist is looked at (a `stat` that
 * fails costs a Deno process about 0.3 ms: bench/first_use.mjs). None for a remote module (JSR, a URL).
 */
function localWorkers(): string[] {
  if (!import.meta.url.startsWith("file:")) return [];
  const path = import.meta.url.endsWith(".ts")
    ? "../native/build/spawnpool-worker"
    : `../native/spawnpool-worker-${system.platform}-${system.arch}`;
  return [fileUrlToPath(new URL(path, import.meta.url).href)];
}

/**
 * Where a package manager put the per-platform optional package's `bin/spawnpool-worker`, in the order Node would
 * resolve that dependency of spawnpool's: `node_modules/<package>` in this module's directory and each one above it
 * (npm, Bun, pnpm, Deno with a node_modules folder), then where the runtime's own resolver finds it through
 * `node:module` (Deno's global npm cache, Yarn's Plug'n'Play), asked only when none of those holds it: it costs a Deno
 * process 15 ms. None for a remote module.
 */
function* installedWorkers(): Generator<string> {
  if (!import.meta.url.startsWith("file:")) return;
  const inPackage = (dir: string) => joinPath(dir, "bin", "spawnpool-worker");
  for (const dir of upward(dirnameOf(fileUrlToPath(import.meta.url)))) {
    if (dir.endsWith("/node_modules")) continue; // no node_modules/node_modules
    yield inPackage(joinPath(dir, "node_modules", NATIVE_WORKER_PACKAGE));
  }
  try {
    const { process } = globalThis as unknown as { process: NodeJS.Process };
    const { createRequire } = process.getBuiltinModule("node:module") as typeof import("node:module");
    yield inPackage(dirnameOf(createRequire(import.meta.url).resolve(`${NATIVE_WORKER_PACKAGE}/package.json`)));
  } catch {
    // Not installed: another platform's, a checkout, or optional dependencies left out.
  }
}

let nativeFound: string | undefined | null = null;

/** The native worker's executable, looked for once per process (each place once); undefined when there is none. */
export function findNativeWorker(): string | undefined {
  if (nativeFound === null) nativeFound = firstExecutable(localWorkers()) ?? firstExecutable(installedWorkers());
  return nativeFound;
}

/** The native worker's executable, or `ERR_WORKER_START` saying how to get one. */
export function nativeWorkerPath(): string {
  const found = findNativeWorker();
  if (found !== undefined) return found;
  const local = localWorkers();
  throw new SpawnPoolError(
    "ERR_WORKER_START",
    `No native worker for ${system.platform}-${system.arch} ` +
      `(looked for ${
        local.length > 0
          ? `${local.map((path) => `"${path}"`).join(", ")} and ${NATIVE_WORKER_PACKAGE}'s bin/spawnpool-worker in ` +
            `node_modules from ${dirnameOf(fileUrlToPath(import.meta.url))} upward`
          : "none outside a local file"
      }); ` +
      `install spawnpool from npm with its optional dependency ${NATIVE_WORKER_PACKAGE} (npm install, bun add, ` +
      "deno add npm:spawnpool), build one with `npm run build:native` in a checkout of spawnpool, " +
      "or pass its path as the execPath option",
  );
}

/**
 * Whether a pool given no `runtime` may look for and start native workers without asking: anywhere but on a Deno
 * host without unscoped read and run permissions (there, looking would prompt or fail, so such a host keeps Deno
 * workers unless it asks for native ones). The JSR build on Deno looks by importing its npm package, which needs no
 * permission: unscoped run is enough.
 */
function nativeDefaultAllowed(host: RuntimeName): boolean {
  if (host !== "deno") return true;
  const permissions = (globalThis as unknown as {
    Deno: { permissions: { querySync(descriptor: { name: string }): { state: string } } };
  }).Deno.permissions;
  const needed = WORKERS_FROM_NPM ? ["run"] : ["read", "run"];
  return needed.every((name) => permissions.querySync({ name }).state === "granted");
}

let cached: Platform | undefined;

/**
 * What runs the worker loop inside the host (worker/in_host.ts `startInHost`), given by the layer above (pool.ts): the
 * adapters sit below the worker loop and do not import it. Without it a platform has no `inHost`.
 */
let inHostStarter: ((host: Adapter) => WorkerProcess) | undefined;

/** Gives the platform its in-host worker loop (pool.ts does, as it loads). */
export function provideInHost(start: (host: Adapter) => WorkerProcess): void {
  inHostStarter = start;
}

/** What runs when the process exits: one listener on the process for every pool. */
const exitHandlers = new Set<() => void>();

let removeExitListener: (() => void) | undefined;

function onExit(handler: () => void): () => void {
  removeExitListener ??= system.onExit(runExitHandlers);
  exitHandlers.add(handler);
  return () => {
    exitHandlers.delete(handler);
    if (exitHandlers.size > 0) return;
    removeExitListener?.();
    removeExitListener = undefined;
  };
}

function runExitHandlers(): void {
  for (const handler of exitHandlers) handler();
}

/** The platform of the current process. */
export function currentPlatform(): Platform {
  if (cached !== undefined) return cached;
  const runtime = detectRuntime();
  // The JSR build on Deno: its native worker is the npm package's, imported (adapters/_npm_worker.ts).
  const fromNpm = runtime === "deno" && WORKERS_FROM_NPM;
  cached = {
    runtime,
    host: adapterFor(runtime),
    cores: navigator.hardwareConcurrency ?? 2,
    preflight,
    onExit,
    // The JSR build on Deno imports its npm package when the pool starts its first native worker (launch), so it
    // counts as present here: a failed import is a failed start, which the default falls back from.
    nativeAvailable: () =>
      nativeDefaultAllowed(runtime) &&
      (fromNpm ? NPM_WORKER_SPECIFIER !== undefined : findNativeWorker() !== undefined),
    inHost: {
      // The host's commands share its process group; a Deno host's Deno.Command has no argv0, and no runtime's spawn
      // has killTree, limits or a terminal (the host would fail the spawn with ENOTSUP, where the pool's workers may run it).
      takes: (request) =>
        !request.group && request.detached !== true && request.killTree !== true && request.limits === undefined &&
        request.terminal === undefined &&
        (runtime !== "deno" || request.argv0 === undefined),
      // Provided by pool.ts, imported with the rest: in a bundle it costs next to nothing, where a dynamic import()
      // costs 1-2 ms.
      start: () => {
        if (inHostStarter === undefined) throw new Error("No worker loop to run in the host (pool.ts provides it)");
        return inHostStarter(adapterFor(runtime));
      },
    },
    launch(
      workerRuntime: WorkerRuntime,
      execPath: string | undefined,
      cgroup?: string,
    ): WorkerLaunch | Promise<WorkerLaunch> {
      if (workerRuntime === "native") {
        const native = (path: string): WorkerLaunch => ({
          runtime: "native",
          execPath: path,
          args: [],
          // The native worker marks fd 3 close-on-exec at once, so a socketpair never leaks into its commands.
          channel: adapterFor(runtime).socketpair.host ? "fd3" : "unix",
          // The pool's cgroup, which the worker puts its commands in.
          env: cgroup === undefined ? undefined : { SPAWNPOOL_CGROUP: cgroup },
          cgroup,
          // It gives every command a process group of its own.
          ownGroup: false,
        });
        if (execPath !== undefined) return native(execPath);
        return fromNpm ? npmWorkerPath(denoAdapter.unrefTimer!).then(native) : native(nativeWorkerPath());
      }
      const worker = adapterFor(workerRuntime);
      if (workerRuntime !== "deno" && !WORKER_ENTRY.startsWith("/")) {
        throw new SpawnPoolError(
          "ERR_WORKER_START",
          `${workerRuntime} workers need spawnpool from npm (npm install, bun add, or deno add npm:spawnpool): ` +
            `they cannot run the worker from ${WORKER_ENTRY}`,
        );
      }
      return {
        runtime: workerRuntime,
        execPath: execPath ?? defaultExecPath(workerRuntime, runtime),
        args: worker.workerArgs(WORKER_ENTRY),
        channel: adapterFor(runtime).socketpair.host && worker.socketpair.worker ? "fd3" : "unix",
        // Deno workers give commands a group of their own only when needed (it is slow there); the rest
        // share the worker's group.
        ownGroup: workerRuntime === "deno",
      };
    },
  };
  return cached;
}

/**
 * The one place that detects the current runtime, and the platform the pool runs on: which adapter
 * hosts workers and how each worker runtime is launched.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { delimiter, dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { Adapter, Platform, RuntimeName, WorkerLaunch, WorkerRuntime } from "../core/adapter.ts";
import { SpawnPoolError } from "../core/errors.ts";
import { preflight } from "./_preflight.ts";
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
  return url.protocol === "file:" ? fileURLToPath(url.href) : url.href;
})();

function findOnPath(name: string): string | undefined {
  return findIn((process.env.PATH ?? "").split(delimiter).filter((dir) => dir !== ""), name);
}

/**
 * The directories whose `node_modules/.bin` may hold a runtime installed from npm (`npm install bun`, `npm install
 * deno`): this module's own and each above it (the app that installed spawnpool), then the working directory's and
 * each above it. Empty for a remote module's own location (JSR, a URL).
 */
function nodeModulesBins(): string[] {
  const starts = [process.cwd()];
  if (import.meta.url.startsWith("file:")) starts.unshift(dirname(fileURLToPath(import.meta.url)));
  const bins: string[] = [];
  for (const start of starts) {
    for (let dir = start;; dir = dirname(dir)) {
      const bin = join(dir, "node_modules", ".bin");
      if (!bins.includes(bin)) bins.push(bin);
      if (dirname(dir) === dir) break;
    }
  }
  return bins;
}

function findIn(dirs: readonly string[], name: string): string | undefined {
  for (const dir of dirs) {
    const candidate = join(dir, name);
    try {
      if (existsSync(candidate)) return candidate;
    } catch {
      // a Deno host without read permission there: not found
    }
  }
  return undefined;
}

/**
 * The executable of `runtime`: this process's own for the host runtime, else the npm package's in the app's
 * `node_modules/.bin`, else found on PATH.
 */
export function defaultExecPath(runtime: RuntimeName, host: RuntimeName): string {
  if (runtime === host) return process.execPath;
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

/** The npm package that holds the native worker for this platform (spawnpool's optionalDependencies). */
export const NATIVE_WORKER_PACKAGE: string = `@spawnpool/worker-${process.platform}-${process.arch}`;

/**
 * Where the native worker is looked for: `native/build/spawnpool-worker` next to this module in a checkout
 * (`npm run build:native`), `dist/native/spawnpool-worker-<platform>-<arch>` in a checkout's dist/, and the
 * per-platform optional package's `bin/spawnpool-worker` where a package manager installed spawnpool (npm, Bun,
 * or Deno with `npm:spawnpool`), found the way Node resolves a dependency of spawnpool's. None for a remote module
 * (JSR, a URL).
 */
function nativeWorkerCandidates(): string[] {
  if (!import.meta.url.startsWith("file:")) return [];
  const candidates = [
    `../native/build/spawnpool-worker`,
    `../native/spawnpool-worker-${process.platform}-${process.arch}`,
  ].map((path) => fileURLToPath(new URL(path, import.meta.url).href));
  try {
    const manifest = createRequire(import.meta.url).resolve(`${NATIVE_WORKER_PACKAGE}/package.json`);
    candidates.push(join(dirname(manifest), "bin", "spawnpool-worker"));
  } catch {
    // not installed: another platform's, a checkout, or a package manager that left optional dependencies out
  }
  return candidates;
}

let nativeFound: string | undefined | null = null;

/** The native worker's executable, looked for once per process; undefined when there is none. */
export function findNativeWorker(): string | undefined {
  if (nativeFound === null) nativeFound = nativeWorkerCandidates().find((path) => existsSync(path));
  return nativeFound;
}

/** The native worker's executable, or `ERR_WORKER_START` saying how to get one. */
export function nativeWorkerPath(): string {
  const found = findNativeWorker();
  if (found !== undefined) return found;
  const candidates = nativeWorkerCandidates();
  throw new SpawnPoolError(
    "ERR_WORKER_START",
    `No native worker for ${process.platform}-${process.arch} ` +
      `(looked for ${
        candidates.length > 0 ? candidates.map((c) => `"${c}"`).join(", ") : "none outside a local file"
      }); ` +
      `install spawnpool from npm with its optional dependency ${NATIVE_WORKER_PACKAGE} (npm install, bun add, ` +
      "deno add npm:spawnpool), build one with `npm run build:native` in a checkout of spawnpool, " +
      "or pass its path as the execPath option",
  );
}

/**
 * Whether a pool given no `runtime` may look for and start native workers without asking: anywhere but on a Deno
 * host without unscoped read and run permissions (there, looking would prompt or fail, so such a host keeps Deno
 * workers unless it asks for native ones).
 */
function nativeDefaultAllowed(host: RuntimeName): boolean {
  if (host !== "deno") return true;
  const permissions = (globalThis as unknown as {
    Deno: { permissions: { querySync(descriptor: { name: string }): { state: string } } };
  }).Deno.permissions;
  return ["read", "run"].every((name) => permissions.querySync({ name }).state === "granted");
}

let cached: Platform | undefined;

/** What runs when the process exits: one listener on the process for every pool. */
const exitHandlers = new Set<() => void>();

function onExit(handler: () => void): () => void {
  if (exitHandlers.size === 0) process.once("exit", runExitHandlers);
  exitHandlers.add(handler);
  return () => {
    exitHandlers.delete(handler);
    if (exitHandlers.size === 0) process.off("exit", runExitHandlers);
  };
}

function runExitHandlers(): void {
  for (const handler of exitHandlers) handler();
}

/** The platform of the current process. */
export function currentPlatform(): Platform {
  if (cached !== undefined) return cached;
  const runtime = detectRuntime();
  cached = {
    runtime,
    host: adapterFor(runtime),
    cores: navigator.hardwareConcurrency ?? 2,
    preflight,
    onExit,
    nativeAvailable: () => nativeDefaultAllowed(runtime) && findNativeWorker() !== undefined,
    launch(workerRuntime: WorkerRuntime, execPath: string | undefined): WorkerLaunch {
      if (workerRuntime === "native") {
        return {
          runtime: "native",
          execPath: execPath ?? nativeWorkerPath(),
          args: [],
          // The native worker marks fd 3 close-on-exec at once, so a socketpair never leaks into its commands.
          channel: adapterFor(runtime).socketpair.host ? "fd3" : "unix",
          // It gives every command a process group of its own.
          ownGroup: false,
        };
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

/**
 * Node's spawn() argument and option normalisation, into a request for the pool (or the reason a call stays native).
 *
 * @module
 */

import { Buffer } from "node:buffer";
import * as native from "node:child_process";
import { isAbsolute, resolve } from "node:path";
import type { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import type { StdioMode } from "../../core/frame.ts";
import { LIMIT_KEYS, LIMIT_MINIMUMS, type Limits } from "../../core/limits.ts";
import {
  invalidArgType,
  invalidArgValue,
  killSignalOf,
  nodeError,
  noNulBytes,
  outOfRange,
  validateAbortSignal,
  validateTimeout,
} from "./errors.ts";
import { InputWritable, OutputReadable } from "./streams.ts";

/**
 * The `process` global, not `node:process`: importing that module makes Node build its namespace from every property
 * of `process`, whose lazy ones then load readline, the REPL's history and more (5 ms of a script's start).
 */
const process = (globalThis as unknown as { process: NodeJS.Process }).process;

/** A spawn call after Node's normalisation, ready for the pool. */
export interface PooledSpawn {
  file: string;
  args: string[];
  spawnargs: unknown[];
  /** Slots past stdio[2] (all "ignore"). */
  extraStdio: number;
  argv0?: string;
  cwd: string;
  env: Record<string, string>;
  stdio: [StdioMode, StdioMode, StdioMode];
  /**
   * Another pooled command's stream given as a slot (`stdio: [a.stdout, ...]`, `[..., b.stdin, ...]`): the host
   * carries the bytes between the two commands' pipes.
   */
  relays: Relays;
  uid?: number;
  gid?: number;
  detached: boolean;
  timeout: number;
  killSignal: string;
  signal?: AbortSignal;
  /** The call's `killTree`, when it gives one (the pool's otherwise). */
  killTree?: boolean;
  /** The call's `limits`, when it gives them (the pool's otherwise). */
  limits?: Limits;
}

/** Why a spawn must run natively, or undefined when the pool can run it. */
type Unpoolable = string;

/** Streams of other pooled commands given as stdio slots: stdin from an output, outputs into a stdin. */
type Relays = [OutputReadable | undefined, InputWritable | undefined, InputWritable | undefined];

/** Maps Node's `stdio` option to the pool's modes; returns a reason when the pool cannot honour it. */
function stdioModes(stdio: unknown): { modes: [StdioMode, StdioMode, StdioMode]; relays: Relays } | Unpoolable {
  const relays: Relays = [undefined, undefined, undefined];
  const all = (mode: StdioMode) => ({ modes: [mode, mode, mode] as [StdioMode, StdioMode, StdioMode], relays });
  if (stdio === undefined || stdio === null) return all("piped");
  if (typeof stdio === "string") {
    switch (stdio) {
      case "pipe":
      case "overlapped":
        return all("piped");
      case "ignore":
        return all("null");
      case "inherit":
        return all("inherit");
      default:
        throw invalidArgValue("stdio", stdio);
    }
  }
  if (!Array.isArray(stdio)) throw invalidArgValue("stdio", stdio);
  const modes: [StdioMode, StdioMode, StdioMode] = ["piped", "piped", "piped"];
  for (let i = 0; i < stdio.length; i++) {
    const slot = stdio[i];
    let mode: StdioMode | undefined;
    if (slot === null || slot === undefined) mode = i < 3 ? "piped" : "null";
    else if (slot === "ignore") mode = "null";
    else if (slot === "pipe" || slot === "overlapped") mode = i < 3 ? "piped" : undefined;
    else if (slot === "inherit" || slot === i) mode = i < 3 ? "inherit" : undefined;
    else if ((i === 0 && slot instanceof OutputReadable) || ((i === 1 || i === 2) && slot instanceof InputWritable)) {
      mode = "piped";
      (relays as Array<Readable | Writable | undefined>)[i] = slot;
    }
    if (mode === undefined) {
      const shown = typeof slot === "object" ? `a ${slot.constructor?.name ?? "object"}` : `'${String(slot)}'`;
      return `stdio[${i}] is ${shown}`;
    }
    if (i < 3) modes[i] = mode;
  }
  return { modes, relays };
}

function validatedPath(value: unknown, name: string): string {
  let path: string;
  if (typeof value === "string") path = value;
  else if (value instanceof URL) {
    if (value.protocol !== "file:") {
      throw nodeError(TypeError, "ERR_INVALID_URL_SCHEME", "The URL must be of scheme file");
    }
    path = fileURLToPath(value.href);
  } else if (value instanceof Uint8Array) path = Buffer.from(value).toString();
  else throw invalidArgType(name, "of type string or an instance of Buffer or URL", value);
  if (path.includes("\0")) {
    throw invalidArgValue(name, path, "must be a string, Uint8Array, or URL without null bytes");
  }
  return path;
}

function optionalBoolean(options: Record<string, unknown>, key: string): void {
  const value = options[key];
  if (value !== undefined && value !== null && typeof value !== "boolean") {
    throw invalidArgType(`options.${key}`, "of type boolean", value);
  }
}

function optionalInt32(options: Record<string, unknown>, key: string): number | undefined {
  const value = options[key];
  if (value === undefined || value === null) return undefined;
  if (!Number.isInteger(value) || (value as number) < -0x8000_0000 || (value as number) > 0x7fff_ffff) {
    throw invalidArgType(`options.${key}`, "int32", value);
  }
  return value as number;
}

/**
 * The `limits` option (an extension), checked with Node's errors: undefined when absent (or null), else a copy
 * without a prototype holding the limits given.
 */
function optionalLimits(options: Record<string, unknown>): Limits | undefined {
  const value = options.limits;
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "object" || Array.isArray(value)) {
    throw invalidArgType("options.limits", "of type object", value);
  }
  const limits = Object.create(null) as Record<string, number>;
  const keys = Object.keys(value);
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    if (!Object.hasOwn(LIMIT_MINIMUMS, key)) {
      throw invalidArgValue("options.limits", value, `has an unknown limit '${key}' (known: ${LIMIT_KEYS.join(", ")})`);
    }
    const limit: unknown = (value as Record<string, unknown>)[key];
    if (limit === undefined) continue;
    const name = `options.limits.${key}`;
    if (typeof limit !== "number") throw invalidArgType(name, "of type number", limit);
    const least = LIMIT_MINIMUMS[key as keyof Limits];
    if (!Number.isSafeInteger(limit) || limit < least) {
      throw outOfRange(name, `an integer >= ${least} and <= ${Number.MAX_SAFE_INTEGER}`, limit);
    }
    limits[key] = limit;
  }
  return limits as Limits;
}

/** A copy of `options` without a prototype: what Node reads options from. */
export function ownOptions(options: unknown): Record<string, unknown> {
  return Object.assign(Object.create(null), options);
}

/** Node's DEP0190 is emitted once per process. */
let warnedArgsWithShell = false;

/**
 * DEP0190, once per process. On Node the runtime's own module emits it, so that it and this module share
 * Node's once-per-process flag (a program using both warns once, as with Node alone): its `spawn()` warns while
 * normalising its arguments, then throws at the invalid `timeout` before it starts anything. Deno and Bun, whose
 * modules differ there, get the warning from here.
 */
function warnArgsWithShell(): void {
  if (warnedArgsWithShell) return;
  warnedArgsWithShell = true;
  const runtime = globalThis as { Deno?: unknown; Bun?: unknown };
  if (runtime.Deno === undefined && runtime.Bun === undefined) {
    try {
      // A harmless command, should a runtime ever start it: `sh -c "true args"`.
      native.spawn("true", ["args"], { shell: true, timeout: -1 }).on("error", () => {});
    } catch {
      return; // ERR_OUT_OF_RANGE: nothing started
    }
  }
  process.emitWarning(
    "Passing args to a child process with shell option true can lead to security vulnerabilities, " +
      "as the arguments are not escaped, only concatenated.",
    "DeprecationWarning",
    "DEP0190",
  );
}

/**
 * Node's `normalizeSpawnArguments`, then the pool's: validates and throws Node's errors synchronously.
 * Returns a reason string when the call needs something a pool cannot give (an `'ipc'` slot, extra fds).
 */
export function normalizeSpawn(file: unknown, argsIn: unknown, optionsIn: unknown): PooledSpawn | Unpoolable {
  if (typeof file !== "string") throw invalidArgType("file", "of type string", file);
  noNulBytes(file, "file");
  if (file.length === 0) throw invalidArgValue("file", file, "cannot be empty");
  let args: unknown[];
  let options: unknown = optionsIn;
  if (Array.isArray(argsIn)) args = argsIn.slice();
  else if (argsIn === undefined || argsIn === null) args = [];
  else if (typeof argsIn !== "object") throw invalidArgType("args", "of type object", argsIn);
  else {
    options = argsIn;
    args = [];
  }
  args.forEach((arg, i) => noNulBytes(arg, `args[${i}]`));
  if (options === undefined) options = {};
  else if (options === null || typeof options !== "object" || Array.isArray(options)) {
    throw invalidArgType("options", "of type object", options);
  }
  // Own options only, as Node copies them: a value set on Object.prototype is no option.
  const o = ownOptions(options);
  // A relative cwd is the host's current directory's (the worker's may differ), and an empty one is that directory.
  const dir = o.cwd === undefined || o.cwd === null ? "" : validatedPath(o.cwd, "options.cwd");
  const cwd = isAbsolute(dir) ? dir : resolve(dir);
  optionalBoolean(o, "detached");
  optionalBoolean(o, "killTree");
  if (o.killTree === true && o.detached === true) {
    throw nodeError(
      TypeError,
      "ERR_INCOMPATIBLE_OPTION_PAIR",
      'Option "killTree" cannot be used in combination with option "detached": a detached command outlives its ' +
        "worker, and killTree ends its whole tree with it",
    );
  }
  const limits = optionalLimits(o);
  const uid = optionalInt32(o, "uid");
  const gid = optionalInt32(o, "gid");
  if (o.shell !== undefined && o.shell !== null && typeof o.shell !== "boolean" && typeof o.shell !== "string") {
    throw invalidArgType("options.shell", "of type boolean or string", o.shell);
  }
  let argv0: string | undefined;
  if (o.argv0 !== undefined && o.argv0 !== null) {
    if (typeof o.argv0 !== "string") throw invalidArgType("options.argv0", "of type string", o.argv0);
    noNulBytes(o.argv0, "options.argv0");
    argv0 = o.argv0;
  }
  optionalBoolean(o, "windowsHide");
  optionalBoolean(o, "windowsVerbatimArguments");
  const timeout = validateTimeout(o.timeout);
  const signal = validateAbortSignal(o.signal, "options.signal");
  const killSignal = killSignalOf(o.killSignal, "options.killSignal") ?? "SIGTERM";
  if (o.serialization !== undefined && o.serialization !== "json" && o.serialization !== "advanced") {
    throw invalidArgValue("options.serialization", o.serialization, "must be one of: undefined, 'json', 'advanced'");
  }

  let strArgs = args.map((arg) => String(arg));
  let spawnargs: unknown[] = args;
  let cmd = file;
  if (o.shell) {
    noNulBytes(o.shell, "options.shell");
    if (args.length > 0) warnArgsWithShell();
    const command = [file, ...strArgs].join(" ");
    cmd = typeof o.shell === "string" ? o.shell : "/bin/sh";
    strArgs = spawnargs = ["-c", command];
  }

  const source = (o.env || process.env) as Record<string, unknown>;
  // Without a prototype, a "__proto__" key is an entry like any other (on `{}` it would set the prototype).
  const env: Record<string, string> = Object.create(null);
  for (const key in source) {
    const value = source[key];
    if (value === undefined) continue;
    noNulBytes(key, `options.env['${key}']`);
    noNulBytes(value, `options.env['${key}']`);
    // Node passes each entry on as "key=value": a key holding "=" is read by the command as the name before
    // its first "=", whose value starts after it. Where that repeats a name, the later entry wins, as a shell
    // reads its environment. An entry without a name cannot be read by name at all, and is left out.
    const cut = key.indexOf("=");
    const name = cut < 0 ? key : key.slice(0, cut);
    if (name === "") continue;
    env[name] = cut < 0 ? String(value) : `${key.slice(cut + 1)}=${String(value)}`;
  }

  const stdio = stdioModes(o.stdio);
  if (typeof stdio === "string") return stdio;
  // Every field its own, the optional ones too: one left out would be read from Object.prototype.
  const spec: PooledSpawn = {
    file: cmd,
    args: strArgs,
    spawnargs: [argv0 ?? cmd, ...spawnargs],
    extraStdio: Array.isArray(o.stdio) ? Math.max(0, o.stdio.length - 3) : 0,
    cwd,
    env,
    stdio: stdio.modes,
    relays: stdio.relays,
    detached: o.detached === true,
    timeout,
    killSignal,
    argv0,
    uid,
    gid,
    signal,
    killTree: typeof o.killTree === "boolean" ? o.killTree : undefined,
    limits,
  };
  return spec;
}

const warned = new Set<string>();

export function warnNative(reason: string): void {
  if (warned.has(reason)) return;
  warned.add(reason);
  process.emitWarning(`${reason}, which a pool cannot provide; this spawn uses the runtime's node:child_process`, {
    code: "SPAWNPOOL_NATIVE_FALLBACK",
  });
}

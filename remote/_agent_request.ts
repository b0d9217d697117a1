/**
 * What an agent makes of a caller's spawn request: the workers' own check (core/request_check.ts), then the agent's,
 * and the request rebuilt from the fields a {@linkcode SpawnRequest} has and nothing else.
 *
 * @module
 */

import type { SpawnRequest } from "../core/frame.ts";
import { checkLimits } from "../core/limits.ts";
import { parseRequest, REQUEST_FIELDS } from "../core/request_check.ts";
import { signalNumber } from "../core/signals.ts";

/** The largest flow-control window a caller may ask for, per stream. */
const MAX_WINDOW = 16 * 1024 * 1024;

/**
 * What the agent passes on of each field of a caller's request (undefined: nothing). Every field is named (the type
 * says so), so a field added to {@linkcode SpawnRequest} is decided here before it reaches an agent's workers.
 */
const AGENT_FIELDS: {
  readonly [K in keyof SpawnRequest]-?: (raw: SpawnRequest, maxBuffer: number) => SpawnRequest[K] | undefined;
} = {
  cmd: (raw) => raw.cmd,
  args: (raw) => [...raw.args],
  cwd: (raw) => raw.cwd,
  env: (raw) => {
    if (raw.env === undefined) return undefined;
    // Without a prototype, a "__proto__" variable is one like any other.
    const env = Object.create(null) as Record<string, string>;
    for (const [name, value] of Object.entries(raw.env)) env[name] = value;
    return env;
  },
  clearEnv: (raw) => raw.clearEnv === true ? true : undefined,
  // The agent's stdin is not the caller's: "inherit" reads nothing.
  stdin: (raw) => raw.stdin === "inherit" ? "null" : raw.stdin,
  stdout: (raw) => raw.stdout,
  stderr: (raw) => raw.stderr,
  buffered: (raw) => raw.buffered,
  timeout: (raw) => raw.timeout,
  killSignal: (raw) => raw.killSignal,
  forceKillAfterDelay: (raw) => raw.forceKillAfterDelay,
  // What the agent holds for a caller is bounded whatever the caller asks: a window, and buffered output.
  maxBuffer: (raw, maxBuffer) => raw.buffered ? Math.min(raw.maxBuffer ?? maxBuffer, maxBuffer) : raw.maxBuffer,
  window: (raw) => Math.min(raw.window, MAX_WINDOW),
  argv0: (raw) => raw.argv0,
  uid: (raw) => raw.uid,
  gid: (raw) => raw.gid,
  // No command outlives the agent's hold on it, and each has a process group of its own.
  detached: () => false,
  group: () => true,
  sockets: (raw) => raw.sockets,
  killTree: (raw) => raw.killTree === true ? true : undefined,
  // Checked as a host checks them (a count at least 1), and rebuilt, as env is, from its own keys.
  limits: (raw) => checkLimits(raw.limits),
  // Checked by parseRequest (isWireTerminal), and rebuilt from its own fields.
  terminal: (raw) =>
    raw.terminal === undefined
      ? undefined
      : { cols: raw.terminal.cols, rows: raw.terminal.rows, ...(raw.terminal.raw === true ? { raw: true } : {}) },
};

/**
 * Checks a caller's Spawn frame payload and rebuilds the request, from the fields a {@linkcode SpawnRequest} has and
 * nothing else, as one an agent runs: stdin "inherit" reads nothing (the agent's stdin is not the caller's), no command
 * outlives the agent's hold on it (`detached` off), and each gets a process group of its own, so that a caller that
 * goes away takes all of it. A field the workers do not know is dropped, not passed on: whatever it holds (JSON nested
 * deeper than the native worker parses, say) would make a worker take its host for broken and fail every command it
 * runs, other callers' too. The payload passes the workers' own check ({@linkcode parseRequest}) first; the fields it
 * lets through are checked here.
 *
 * @throws {ProtocolError} For a request a worker would take for a broken host's.
 * @throws {TypeError} For a field of the wrong type.
 * @throws {RangeError} For a limit out of range.
 */
export function checkRequest(payload: Uint8Array, maxBuffer: number): SpawnRequest {
  const raw = parseRequest(payload);
  if (signalNumber(raw.killSignal) === undefined) throw new TypeError(`Unknown killSignal "${raw.killSignal}"`);
  const clearEnv: unknown = raw.clearEnv;
  if (clearEnv !== undefined && typeof clearEnv !== "boolean") throw new TypeError("clearEnv must be a boolean");
  for (const key of ["uid", "gid"] as const) {
    const id = raw[key];
    if (id !== undefined && (id < -0x8000_0000 || id > 0x7fff_ffff)) throw new TypeError(`${key} must be 32-bit`);
  }
  const request = {} as Record<keyof SpawnRequest, unknown>;
  for (const field of REQUEST_FIELDS) {
    const value = AGENT_FIELDS[field](raw, maxBuffer);
    if (value !== undefined) request[field] = value;
  }
  return request as SpawnRequest;
}

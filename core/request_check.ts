/**
 * The spawn request's fields and how a worker checks each, in one table: the JavaScript worker (worker/serve.ts) and
 * the remote agent (remote/_agent_request.ts) check a request with {@linkcode parseRequest}, and the native worker's
 * `valid_request` (native/host_frames.c) does the same by hand; tests/wire_schema_test.ts holds all of them to
 * {@linkcode REQUEST_RULES}.
 *
 * @module
 */

import { decodeJson, isWireTerminal, ProtocolError, type SpawnRequest } from "./frame.ts";
import { isWireLimits } from "./limits.ts";

/** How a worker checks one field of a request. */
export interface FieldRule {
  /** The field must be present. */
  readonly required: boolean;
  /**
   * Whether a value it holds is well formed; absent for a field a worker takes as it comes (`clearEnv`, read as
   * truthy or not).
   */
  readonly valid?: (value: unknown) => boolean;
  /** What the field, when present, asks of the rest of the request (a terminal's stdio). */
  readonly with?: (request: Record<string, unknown>) => boolean;
}

/** Whether a {@linkcode SpawnRequest} field may be left out: `false` for a required one. */
type Optional<K extends keyof SpawnRequest> = Record<string, never> extends Pick<SpawnRequest, K> ? true : false;

/** Each field's rule, its `required` held to the interface's `?` by the type. */
type RequestRules = {
  readonly [K in keyof SpawnRequest]-?: FieldRule & { readonly required: Optional<K> extends true ? false : true };
};

const isString = (v: unknown): boolean => typeof v === "string";
const isBoolean = (v: unknown): boolean => typeof v === "boolean";
const isMode = (v: unknown): boolean => v === "piped" || v === "inherit" || v === "null";
const isCount = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v) && v >= 0;
const isInteger = (v: unknown): boolean => Number.isInteger(v);

/**
 * Every field of a {@linkcode SpawnRequest} and how a worker checks it. The type names every key of the interface, so
 * a field added there does not compile until it has a rule here; the schema test then names what else must learn it.
 */
export const REQUEST_RULES: RequestRules = {
  cmd: { required: true, valid: isString },
  args: { required: true, valid: (v) => Array.isArray(v) && v.every(isString) },
  cwd: { required: false, valid: isString },
  env: {
    required: false,
    valid: (v) => typeof v === "object" && v !== null && !Array.isArray(v) && Object.values(v).every(isString),
  },
  clearEnv: { required: false },
  stdin: { required: true, valid: isMode },
  stdout: { required: true, valid: isMode },
  stderr: { required: true, valid: isMode },
  buffered: { required: true, valid: isBoolean },
  timeout: { required: false, valid: isCount },
  killSignal: { required: true, valid: isString },
  forceKillAfterDelay: { required: true, valid: isCount },
  maxBuffer: { required: false, valid: isCount },
  window: { required: true, valid: (v) => isCount(v) && v !== 0 },
  argv0: { required: false, valid: isString },
  uid: { required: false, valid: isInteger },
  gid: { required: false, valid: isInteger },
  detached: { required: false, valid: isBoolean },
  group: { required: true, valid: isBoolean },
  sockets: { required: false, valid: isBoolean },
  killTree: { required: false, valid: isBoolean },
  limits: { required: false, valid: isWireLimits },
  terminal: {
    required: false,
    valid: (v) => isWireTerminal({ terminal: v, stdout: "piped", stderr: "null" }),
    with: isWireTerminal,
  },
};

/** The names of a {@linkcode SpawnRequest}'s fields, in {@linkcode REQUEST_RULES}' order. */
export const REQUEST_FIELDS: readonly (keyof SpawnRequest)[] = Object.keys(REQUEST_RULES) as (keyof SpawnRequest)[];

/** Whether a decoded request holds every required field and a well-formed value in each field present. */
export function isSpawnRequest(raw: Record<string, unknown>): boolean {
  for (const field of REQUEST_FIELDS) {
    const rule: FieldRule = REQUEST_RULES[field];
    const value = raw[field];
    if (value === undefined ? rule.required : rule.valid !== undefined && !rule.valid(value)) return false;
    if (value !== undefined && rule.with !== undefined && !rule.with(raw)) return false;
  }
  return true;
}

/**
 * Decodes and checks a Spawn frame's payload: a malformed request is a protocol error, never a guess. Fields no
 * request has are left as they are (a worker never reads them).
 *
 * @throws {ProtocolError} When the payload is not a JSON object or the request is malformed.
 */
export function parseRequest(payload: Uint8Array): SpawnRequest {
  const raw = decodeJson(payload);
  if (!isSpawnRequest(raw)) throw new ProtocolError("Spawn request is malformed");
  return raw as unknown as SpawnRequest;
}

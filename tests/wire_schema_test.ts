/**
 * One wire, written down twice: the native worker's C (native/worker.h, native/host_frames.c and the files that read a
 * request) and the TypeScript (core/frame.ts, core/request_check.ts). This holds them to each other: the protocol
 * version, every frame type's name and number and who handles it, and every request field, whether it is required and
 * whether it is checked. A frame type or a request field added on one side only fails here, with what else to change.
 */

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { encodeJson, Frame, PROTOCOL_VERSION, type SpawnRequest } from "../core/frame.ts";
import { buildRequest } from "../core/options.ts";
import { REQUEST_FIELDS, REQUEST_RULES } from "../core/request_check.ts";
import { checkRequest as agentCheck } from "../remote/_agent_request.ts";
import { parseRequest as workerParse } from "../worker/job.ts";

const root = fileURLToPath(new URL("..", import.meta.url).href);
const read = (file: string) => readFileSync(join(root, file), "utf8");
/** A C file without its comments, so that a name in a comment is not taken for code. */
const code = (file: string) => read(file).replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
/** A TypeScript file without its comments. */
const tsCode = (file: string) => read(file).replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");

/** The body of a C function (from its signature's line to the closing brace at the start of a line). */
function cFunction(source: string, signature: RegExp): string {
  const start = source.search(signature);
  assert.ok(start >= 0, `no function matching ${signature}`);
  const end = source.indexOf("\n}", start);
  return source.slice(start, end);
}

/** `SpawnError` -> `F_SPAWN_ERROR`: the C name of a frame type. */
const cName = (name: string) => `F_${name.replace(/(?<=[a-z])(?=[A-Z])/g, "_").toUpperCase()}`;

/** Differences of two sets, for messages that say what to add where. */
function missing(want: Iterable<string>, have: Iterable<string>): string[] {
  const got = new Set(have);
  return [...want].filter((name) => !got.has(name)).sort();
}

const header = code("native/worker.h");
const hostFrames = code("native/host_frames.c");
/** The native files that read a request (channel.c's json_get reads the bootstrap, not a request). */
const requestReaders = readdirSync(join(root, "native")).filter((name) => name.endsWith(".c") && name !== "channel.c");

/** A request with every field set, each to a value a worker takes (and, for booleans, true). */
const SAMPLE: Required<SpawnRequest> = {
  cmd: "echo",
  args: ["hi"],
  cwd: "/",
  env: { A: "1" },
  clearEnv: true,
  stdin: "piped",
  stdout: "piped",
  stderr: "null",
  buffered: true,
  timeout: 1000,
  killSignal: "SIGTERM",
  forceKillAfterDelay: 100,
  maxBuffer: 1024,
  window: 65536,
  argv0: "echo",
  uid: 1000,
  gid: 1000,
  detached: false, // a terminal's command leads the terminal's session: never detached
  group: true,
  sockets: true,
  killTree: true,
  limits: { cpuSeconds: 1 },
  terminal: { cols: 80, rows: 24, raw: true },
};
/** A value no rule takes: not a string, number, boolean, mode, plain object or array of strings. */
const WRONG = [{}];

describe("the wire schema: native/ and core/ agree", () => {
  describe("frames", () => {
    const enumBody = header.match(/enum frame_type \{([\s\S]*?)\};/)?.[1];
    assert.ok(enumBody, "native/worker.h has an enum frame_type");
    const native = Object.fromEntries([...enumBody.matchAll(/(F_\w+)\s*=\s*(\d+)/g)].map(([, n, v]) => [n, Number(v)]));
    const ts = Object.fromEntries(Object.entries(Frame).map(([name, value]) => [cName(name), value]));
    /** Host-to-worker types (below 16) and worker-to-host types, as their TypeScript names. */
    const toWorker = Object.keys(Frame).filter((name) => Frame[name as keyof typeof Frame] < 16);
    const toHost = Object.keys(Frame).filter((name) => Frame[name as keyof typeof Frame] >= 16);
    const last = toWorker.reduce((a, b) => Frame[a as keyof typeof Frame] > Frame[b as keyof typeof Frame] ? a : b);

    it("PROTOCOL_VERSION is the same in native/worker.h and core/frame.ts", () => {
      const version = Number(header.match(/#define PROTOCOL_VERSION (\d+)/)?.[1]);
      assert.equal(version, PROTOCOL_VERSION, "change both, native/worker.h and core/frame.ts, in one commit");
    });

    it("every frame type has the same name and number in native/worker.h's enum frame_type and core/frame.ts' Frame", () => {
      assert.deepEqual(
        {
          onlyInNative: missing(Object.keys(native), Object.keys(ts)),
          onlyInCore: missing(Object.keys(ts), Object.keys(native)),
        },
        { onlyInNative: [], onlyInCore: [] },
        "add the type to the other side: Frame.Xyz in core/frame.ts is F_XYZ in native/worker.h",
      );
      assert.deepEqual(native, ts, "a frame type's number differs between native/worker.h and core/frame.ts");
    });

    it("the native worker takes every host-to-worker type and refuses the rest (native/host_frames.c)", () => {
      const bounds = [...hostFrames.matchAll(/type < F_SPAWN \|\| type > (F_\w+)/g)].map((m) => m[1]);
      assert.ok(bounds.length >= 2, "host_frames.c checks a type's range in check_header and on_frame");
      for (const bound of bounds) {
        assert.equal(bound, cName(last), `host_frames.c's "type > ${bound}" must name the last type`);
      }
      const cases = [...cFunction(hostFrames, /static void on_frame\(/).matchAll(/case (F_\w+):/g)].map((m) => m[1]);
      assert.deepEqual(
        missing(toWorker.filter((n) => n !== "Spawn").map(cName), cases),
        [],
        "on_frame in native/host_frames.c has no case for",
      );
    });

    it("the JavaScript worker takes every host-to-worker type and refuses the rest (worker/serve.ts)", () => {
      const serve = tsCode("worker/serve.ts");
      const bounds = [...serve.matchAll(/type < Frame\.Spawn \|\| type > Frame\.(\w+)/g)].map((m) => m[1]);
      assert.deepEqual(bounds, [last], `worker/serve.ts's "type > Frame.X" must name the last host-to-worker type`);
      const cases = [...serve.matchAll(/case Frame\.(\w+):/g)].map((m) => m[1]);
      assert.deepEqual(
        missing(toWorker.filter((n) => n !== "Spawn"), cases),
        [],
        "worker/serve.ts onFrame has no case for",
      );
    });

    it("a remote agent relays every host-to-worker type from its callers (remote/_relay.ts)", () => {
      const cases = [...tsCode("remote/_relay.ts").matchAll(/case Frame\.(\w+):/g)].map((m) => m[1]);
      // A caller's Spawn is the agent's subscription's message, not a relay's frame.
      assert.deepEqual(
        missing(toWorker.filter((n) => n !== "Spawn"), cases),
        [],
        "Relay's #frame in remote/_relay.ts has no case for",
      );
    });

    it("every worker-to-host type is sent by both workers and read by the host", () => {
      const nativeSources = requestReaders.map((name) => code(`native/${name}`)).join("\n");
      assert.deepEqual(
        missing(toHost.map(cName), nativeSources.match(/\bF_\w+/g) ?? []),
        [],
        "the native worker never sends",
      );
      const serve = tsCode("worker/serve.ts") + tsCode("worker/_output_sender.ts") + tsCode("worker/job.ts");
      assert.deepEqual(
        missing(toHost, [...serve.matchAll(/Frame\.(\w+)/g)].map((m) => m[1])),
        [],
        "worker/serve.ts (and its _output_sender.ts) never sends",
      );
      const host = tsCode("core/worker_handle.ts") + tsCode("core/request_sink.ts");
      assert.deepEqual(
        missing(toHost, [...host.matchAll(/Frame\.(\w+)/g)].map((m) => m[1])),
        [],
        "core/worker_handle.ts (and its request_sink.ts) never reads",
      );
    });
  });

  describe("spawn request fields", () => {
    const valid = cFunction(hostFrames, /static bool valid_request\(/);
    const checked = [...valid.matchAll(/GET\("(\w+)"\)/g)].map((m) => m[1]);
    const optional = [...valid.matchAll(/\(n = GET\("(\w+)"\)\) != NULL/g)].map((m) => m[1]);
    const read = new Set(
      requestReaders.flatMap((name) =>
        // A request's own fields: read from its root (a terminal's members are read from the terminal's node).
        [...code(`native/${name}`).matchAll(/json_get\([^,]+,\s*root,\s*"(\w+)"\)/g)].map((m) => m[1])
      ),
    );
    const rules: Record<string, { required: boolean; valid?: unknown }> = REQUEST_RULES;

    it("core/request_check.ts has a rule for every field of SpawnRequest, and only those", () => {
      // The type of REQUEST_RULES names every key of SpawnRequest; this is the same at run time.
      assert.deepEqual(
        [...REQUEST_FIELDS].sort(),
        Object.keys(SAMPLE).sort(),
        "give the field a value in SAMPLE below",
      );
    });

    it("the native worker checks the fields core/request_check.ts checks (valid_request in native/host_frames.c)", () => {
      const tsChecked = REQUEST_FIELDS.filter((field) => rules[field].valid !== undefined);
      assert.deepEqual(
        { notCheckedByNative: missing(tsChecked, checked), unknownToCore: missing(checked, REQUEST_FIELDS) },
        { notCheckedByNative: [], unknownToCore: [] },
      );
    });

    it("the native worker requires the fields core/request_check.ts requires", () => {
      const required = checked.filter((field) => !optional.includes(field));
      assert.deepEqual(
        required.sort(),
        REQUEST_FIELDS.filter((field) => rules[field].required).sort(),
        'valid_request tests an optional field as `(n = GET("x")) != NULL && ...`, a required one without it',
      );
    });

    it("every field the native worker reads is a request field, and every unchecked field is read", () => {
      assert.deepEqual(
        missing(read, REQUEST_FIELDS),
        [],
        "native/*.c reads a request field core/frame.ts does not have",
      );
      const unchecked = REQUEST_FIELDS.filter((field) => rules[field].valid === undefined);
      assert.deepEqual(
        missing(unchecked, read),
        [],
        "a field no worker checks must at least be read by the native worker",
      );
    });

    for (
      const [side, check] of [
        ["the JavaScript worker (worker/job.ts)", (payload: Uint8Array) => workerParse(payload)],
        ["a remote agent (remote/_agent_request.ts)", (payload: Uint8Array) => agentCheck(payload, 1 << 20)],
      ] as const
    ) {
      it(`${side} takes a request with every field, refuses one without a required field or with a malformed one`, () => {
        check(encodeJson(SAMPLE));
        for (const field of REQUEST_FIELDS) {
          const { [field]: _, ...without } = SAMPLE;
          if (rules[field].required) assert.throws(() => check(encodeJson(without)), `without ${field}`);
          else check(encodeJson(without));
          if (rules[field].valid !== undefined) {
            assert.throws(() => check(encodeJson({ ...SAMPLE, [field]: WRONG })), `${field} malformed`);
          }
        }
      });
    }

    it("a remote agent passes on every request field, and nothing else", () => {
      const passed = agentCheck(encodeJson({ ...SAMPLE, extra: 1 }), 1 << 20);
      assert.deepEqual(
        Object.keys(passed).sort(),
        [...REQUEST_FIELDS].sort(),
        "AGENT_FIELDS in remote/_agent_request.ts",
      );
    });

    it("the host builds requests of known fields only (core/options.ts buildRequest)", () => {
      const built = buildRequest({
        cmd: "echo",
        args: ["hi"],
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        buffered: true,
        timeout: 1000,
        killTree: true,
        limits: { cpuSeconds: 1 },
      });
      assert.deepEqual(missing(Object.keys(built), REQUEST_FIELDS), []);
      workerParse(encodeJson(built));
    });
  });
});

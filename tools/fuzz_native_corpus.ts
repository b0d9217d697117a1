/**
 * Writes the seed corpus of the native worker's libFuzzer harnesses (tools/fuzz_native.mjs) from the protocol's own
 * code: frames encoded with core/frame.ts, spawn requests built by core/options.ts buildRequest() with the fields each
 * API shape gives it (shapes/command.ts, shapes/subprocess.ts, shapes/child_process/child_process.ts), and the
 * libFuzzer dictionary of the requests' field names and values.
 *
 *   native/fuzz/corpus/frames/  one byte (how fuzz_frames.c cuts the rest into reads), then frames as a host sends them
 *   native/fuzz/corpus/json/    spawn request payloads, and the worker's other JSON: its hello, the bootstrap (SPAWNPOOL_BOOTSTRAP)
 *   native/fuzz/spawnpool.dict  the dictionary both harnesses run with
 *
 * Run it with a runtime that strips types (the pinned Node, Deno or Bun): `node_modules/.bin/node
 * tools/fuzz_native_corpus.ts`. It rewrites those files whole (and removes other files in the two corpus directories),
 * the same bytes each time. With `--check` it writes nothing and fails if any of them differs from what it would write
 * (`npm test` runs that, so a protocol change cannot leave the seeds behind).
 *
 * @module
 */

import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { bootstrapValue } from "../adapters/_unix_handshake.ts";
import {
  encodeCredit,
  encodeHeader,
  encodeJson,
  encodeRawMode,
  encodeResize,
  encodeU32,
  FD_PAYLOAD,
  Frame,
  type FrameType,
  type Hello,
  MAX_PAYLOAD_BYTES,
  PROTOCOL_VERSION,
  type SpawnRequest,
} from "../core/frame.ts";
import { buildRequest } from "../core/options.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const fuzzDir = join(root, "native", "fuzz");
const encoder = new TextEncoder();

function frame(type: FrameType, id: number, payload: Uint8Array | string = new Uint8Array()): Uint8Array {
  const bytes = typeof payload === "string" ? encoder.encode(payload) : payload;
  return concat([encodeHeader(type, id, bytes.byteLength), bytes]);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.byteLength, 0));
  let offset = 0;
  for (const part of parts) {
    out.set(part, offset);
    offset += part.byteLength;
  }
  return out;
}

const spawn = (id: number, request: SpawnRequest | unknown) => frame(Frame.Spawn, id, encodeJson(request));

// The requests of each API shape, built as the shape builds them.
const requests: Record<string, SpawnRequest> = {
  // Deno.Command#output(): collected output, stdin inherited (a worker gives /dev/null).
  "deno-command-output": buildRequest({
    cmd: "echo",
    args: ["hello"],
    stdin: "inherit",
    stdout: "piped",
    stderr: "piped",
    buffered: true,
  }),
  // Deno.Command#spawn() with its options: a timeout, a cwd, variables, a buffer limit.
  "deno-command-spawn": buildRequest({
    cmd: "cat",
    args: [],
    cwd: "/",
    env: { GREETING: "hé", EMPTY: "" },
    timeout: 5000,
    killSignal: "SIGINT",
    forceKillAfterDelay: 0,
    maxBuffer: 1024,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
    buffered: false,
  }),
  // Bun.spawn(): the env replaces the worker's, stdio as socketpairs.
  "bun-spawn": buildRequest({
    cmd: "sh",
    args: ["-c", "echo out; echo err >&2"],
    env: { PATH: "/usr/bin:/bin" },
    clearEnv: true,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
    buffered: false,
    sockets: true,
  }),
  // child_process.spawn(): everything node's options can carry.
  "node-spawn": buildRequest({
    cmd: "/bin/echo",
    args: ["a", "b c", "ünï", "😀"],
    cwd: "/tmp",
    env: { PATH: "relative:/usr/local/bin:", HOME: "/root" },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    buffered: false,
    timeout: 1,
    killSignal: "SIGKILL",
    argv0: "renamed",
    uid: 0,
    gid: 0,
    detached: true,
    sockets: true,
  }),
  // Process control: the whole tree, and every limit.
  "process-control": buildRequest({
    cmd: "sh",
    args: ["-c", "sleep 1 & exec sleep 2"],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    buffered: true,
    timeout: 100,
    killTree: true,
    limits: { cpuSeconds: 1, memoryBytes: 2 ** 30, processes: 64, openFiles: 256, fileSizeBytes: 0, coreBytes: 0 },
  }),
  // A command on a terminal (the Bun shape's `terminal`, node-pty's spawn): stdin and stdout are the terminal's.
  terminal: buildRequest({
    cmd: "sh",
    args: ["-c", "stty size; cat"],
    stdin: "piped",
    stdout: "piped",
    stderr: "null",
    buffered: false,
    timeout: 200,
    forceKillAfterDelay: 50,
    terminal: { cols: 80, rows: 24, raw: true },
  }),
  // child_process.exec(): a shell, a timeout and its group.
  "node-exec": buildRequest({
    cmd: "/bin/sh",
    args: ["-c", "exit 3"],
    clearEnv: true,
    env: {},
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    buffered: false,
    timeout: 2147483647,
    sockets: true,
  }),
};

const missingProgram = buildRequest({
  cmd: "spawnpool-no-such-program",
  args: [],
  stdin: "null",
  stdout: "null",
  stderr: "null",
  buffered: true,
});
// What no API shape sends (buildRequest refuses it) but the wire can carry: a NUL in an argument (EINVAL).
const withNul = { ...missingProgram, cmd: "true", args: ["nul\0inside"] };
const deno = requests["deno-command-spawn"];

const kill = (id: number, name: string) => frame(Frame.Kill, id, name);
const credit = (id: number, fd: 1 | 2, bytes: number) => frame(Frame.Credit, id, encodeCredit(fd, bytes));
const release = (id: number, fd: 1 | 2) => frame(Frame.Release, id, FD_PAYLOAD[fd]);
const stdin = (id: number, text: string) => frame(Frame.Stdin, id, text);
const stdinEnd = (id: number) => frame(Frame.StdinEnd, id);
const terminalOp = (id: number, payload: Uint8Array) => frame(Frame.Terminal, id, payload);

/** Frame seeds: [name, how the harness cuts them into reads (k: reads of 1 to 2^k bytes), frames]. */
const frameSeeds: [string, number, Uint8Array[]][] = [
  ["deno-command-output", 11, [spawn(1, requests["deno-command-output"])]],
  ["deno-command-spawn", 7, [
    spawn(2, deno),
    stdin(2, "hello\n"),
    credit(2, 1, 65536),
    stdin(2, ""),
    stdinEnd(2),
    kill(2, "SIGTERM"),
  ]],
  ["bun-spawn", 3, [spawn(3, requests["bun-spawn"]), stdin(3, "x".repeat(300)), release(3, 1), kill(3, "-SIGKILL")]],
  ["node-spawn", 0, [spawn(4, requests["node-spawn"]), credit(4, 2, 10), release(4, 2), kill(4, "SIGNOPE")]],
  ["node-exec", 5, [spawn(5, requests["node-exec"]), stdinEnd(5), stdin(5, "late"), kill(5, "-SIGTERM")]],
  // Two jobs, their frames interleaved; the first one's id is used again once it is free.
  ["two-jobs", 9, [
    spawn(8, requests["bun-spawn"]),
    spawn(9, requests["deno-command-spawn"]),
    stdin(8, "to eight"),
    credit(9, 1, 4096),
    kill(8, "SIGUSR1"),
    release(9, 2),
    stdinEnd(8),
    credit(9, 2, 0xffffffff),
  ]],
  ["process-control", 8, [spawn(12, requests["process-control"]), kill(12, "*SIGTERM"), kill(12, "*SIGKILL")]],
  // A terminal resized, put in raw mode and out of it, written to, and killed.
  ["terminal", 3, [
    spawn(19, requests.terminal),
    terminalOp(19, encodeResize(100, 40)),
    terminalOp(19, encodeRawMode(false)),
    stdin(19, "x\n"),
    terminalOp(19, encodeRawMode(true)),
    terminalOp(19, encodeResize(1, 65535)),
    stdinEnd(19),
    kill(19, "-SIGKILL"),
  ]],
  ["spawn-error-enoent", 4, [spawn(10, missingProgram), kill(10, "SIGTERM")]],
  ["spawn-error-nul", 6, [spawn(11, withNul)]],
  // Frames for requests that already completed (or never were) are ignored.
  ["unknown-ids", 2, [
    stdin(77, "nobody"),
    stdinEnd(77),
    kill(77, "SIGKILL"),
    credit(77, 1, 1),
    release(77, 2),
    kill(78, ""),
  ]],
  ["empty-payloads", 1, [spawn(12, requests["deno-command-spawn"]), kill(12, ""), kill(12, "-"), stdin(12, "")]],
  // What closes the channel: a protocol error ends each of these.
  ["error-hello", 8, [
    frame(Frame.Hello, 0, encodeJson({ version: PROTOCOL_VERSION, runtime: "node", pid: 1 } satisfies Hello)),
  ]],
  ["error-oversized", 10, [encodeHeader(Frame.Stdin, 1, MAX_PAYLOAD_BYTES + 1)]],
  ["error-unknown-type", 0, [frame(99 as number as FrameType, 1, "?")]],
  // A Terminal frame whose operation is none the worker knows (a resize of 0 rows would be one it refuses too).
  ["error-terminal-malformed", 5, [spawn(20, requests.terminal), terminalOp(20, new Uint8Array([0, 0, 5]))]],
  ["error-not-json", 3, [frame(Frame.Spawn, 13, '{"cmd": nope}')]],
  ["error-not-object", 4, [spawn(14, ["true"])]],
  ["error-malformed", 6, [spawn(15, { ...missingProgram, window: 0 })]],
  ["error-id-zero", 2, [spawn(0, missingProgram)]],
  ["error-id-in-use", 11, [spawn(16, deno), spawn(16, deno)]],
  ["error-credit-short", 5, [spawn(17, deno), frame(Frame.Credit, 17, encodeU32(1).subarray(0, 3))]],
  ["error-release-no-stream", 7, [spawn(18, deno), frame(Frame.Release, 18, new Uint8Array([3]))]],
];

const hello: Hello = { version: PROTOCOL_VERSION, runtime: "native", pid: 4242 };
const jsonSeeds: [string, string | Uint8Array][] = [
  ...Object.entries(requests).map(([name, request]) => [name, encodeJson(request)] as [string, Uint8Array]),
  ["spawn-error-nul", encodeJson(withNul)],
  ["hello", encodeJson(hello)],
  ["bootstrap", bootstrapValue("\0spawnpool-fuzz", new Uint8Array(32).fill(0xa5))],
  ["escapes", '{"s":"\\"\\\\\\/\\b\\f\\n\\r\\t\\u0000\\u00e9\\ud83d\\ude00\\ud800x\\udc00","k\\u0000":[]}'],
  ["numbers", "[0,-0,1.5e300,-2E-5,1e999,123456789012345678901234567890,0.1,true,false,null]"],
  ["nested", "\ufeff" + "[".repeat(40) + '{"a":{"b":[{}]}}' + "]".repeat(40)],
];

// The dictionary: the requests' field names and string values, as JSON.
const words = new Set<string>();
for (const request of [...Object.values(requests), missingProgram]) {
  for (const [key, value] of Object.entries(request)) {
    words.add(JSON.stringify(key));
    words.add(`${JSON.stringify(key)}:`);
    if (typeof value === "string") words.add(JSON.stringify(value));
  }
}
for (const word of ["clearEnv", "piped", "inherit", "null", "SIGTERM", "-SIGKILL"]) words.add(JSON.stringify(word));
// JSON's own tokens, and escapes a string can hold (a NUL, a surrogate pair, a lone surrogate).
for (const token of ["true", "false", "null", "1e999", "-0", "\\u0000", "\\ud83d\\ude00", "\\udc00"]) words.add(token);
const dictEntry = (word: string) =>
  `"${
    [...encoder.encode(word)].map((b) => (b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c
      ? String.fromCharCode(b)
      : `\\x${b.toString(16).padStart(2, "0")}`)
    ).join("")
  }"`;

/** Every file the generator writes, by path, with its bytes. */
const files = new Map<string, Uint8Array>();
/** Each corpus directory, with the names of its seeds (other files there are removed, or reported by --check). */
const dirs = new Map<string, Set<string>>();
function addSeeds(dir: string, seeds: [string, Uint8Array][]): void {
  dirs.set(dir, new Set(seeds.map(([name]) => name)));
  for (const [name, bytes] of seeds) files.set(join(dir, name), bytes);
}
addSeeds(
  join(fuzzDir, "corpus", "frames"),
  frameSeeds.map(([name, split, frames]) => [name, concat([new Uint8Array([split]), ...frames])]),
);
addSeeds(
  join(fuzzDir, "corpus", "json"),
  jsonSeeds.map(([name, text]) => [name, typeof text === "string" ? encoder.encode(text) : text]),
);
files.set(
  join(fuzzDir, "spawnpool.dict"),
  encoder.encode(
    "# The native worker's libFuzzer dictionary, written by tools/fuzz_native_corpus.ts.\n" +
      [...words].sort().map(dictEntry).join("\n") + "\n",
  ),
);

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.byteLength === b.byteLength && a.every((byte, i) => byte === b[i]);
}

if (process.argv.includes("--check")) {
  // `npm test`: the committed seeds are what this file writes (a protocol change that is not regenerated fails here).
  const stale: string[] = [];
  for (const [path, bytes] of files) {
    let now: Uint8Array | undefined;
    try {
      now = readFileSync(path);
    } catch {
      // missing
    }
    if (now === undefined || !sameBytes(now, bytes)) stale.push(relative(root, path));
  }
  for (const [dir, names] of dirs) {
    for (const name of readdirSync(dir)) if (!names.has(name)) stale.push(`${relative(root, join(dir, name))} (extra)`);
  }
  if (stale.length > 0) {
    console.error(
      `Fuzz seeds out of date; run \`node_modules/.bin/node tools/fuzz_native_corpus.ts\`:\n  ${stale.join("\n  ")}`,
    );
    process.exit(1);
  }
  console.log(`${files.size} fuzz seeds and the dictionary are what tools/fuzz_native_corpus.ts writes`);
} else {
  for (const [dir, names] of dirs) {
    mkdirSync(dir, { recursive: true });
    for (const name of readdirSync(dir)) if (!names.has(name)) rmSync(join(dir, name));
  }
  for (const [path, bytes] of files) writeFileSync(path, bytes);
  console.log(
    `Wrote ${frameSeeds.length} frame seeds and ${jsonSeeds.length} JSON seeds under native/fuzz/corpus/, and ${words.size} ` +
      "dictionary entries to native/fuzz/spawnpool.dict",
  );
}

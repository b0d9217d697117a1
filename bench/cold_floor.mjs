// Cold floor: the least a worker-based first command can cost a fresh process, next to the runtime's own spawn and to
// spawnpool's default pool. On Node, Deno and Bun hosts, three scripts each run one command (`echo hi`), print its
// output and exit without closing anything:
//   direct: the runtime's own spawn (Node's child_process, Deno.Command, Bun.spawn);
//   floor:  a hand-written minimal client of the native worker, importing nothing of spawnpool: it starts the worker
//           (dist/native/, the binary the pool starts) as the host adapters do (Node and Bun: a socketpair on fd 3,
//           SPAWNPOOL_CHANNEL=fd3; Deno: the unix-socket handshake, a socket file in a fresh 0700 directory and a
//           32-byte secret in the worker's SPAWNPOOL_BOOTSTRAP, SPAWNPOOL_CHANNEL=unix), reads its Hello
//           frame, sends one Spawn frame (the JSON the pool's `output()` sends), reads frames until the Exit frame,
//           prints the stdout it holds, unrefs the worker and its channel and lets the process end: the worker
//           exits on its own when the channel closes;
//   pool:   spawnpool's default pool from the bundled build (dist/, built first): `new Command(...).output()`.
// So floor / direct is what any design with a worker process must pay on a first command (a runtime's spawn, the
// worker's start, a request round trip), whatever the library does; pool / floor is what spawnpool adds to it.
//
// Runs are interleaved as in bench/cold_start.mjs (its approach and its helpers): every round runs each script once,
// in an order that rotates each round; medians over the rounds, the ratio of the medians and the median of the
// paired (same round) ratios. A run's wall time ends when the script has exited and its stdout and stderr have
// closed (what a shell's `$(script)` waits for; a worker holds both until it has exited). Each script runs in a
// session of its own (setsid); when it has exited, every process still in that session is counted ("left at exit"),
// and the time until none is left is measured ("gone after"). Anything still there after 3 s is killed and reported.
//
// Then a few runs of each script with timestamps (BENCH_PHASES, default 5), ms from spawning the script: when its
// first line ran, when the module was loaded (child_process, spawnpool), when the worker's spawn call returned, when
// the Deno floor's connection was authenticated, when the Hello frame was in, when the command's output was in,
// when the script exited and when its stdout and stderr closed.
//
// Run: `node bench/cold_floor.mjs`. Options (env): BENCH_ROUNDS (default 30), BENCH_PHASES (default 5, 0 for none),
// BENCH_HOSTS (default "node,deno,bun"). Writes the tables to stdout only.
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { countOf, median, scriptArgs } from "../support/fixture.mjs";
import { buildDist, root, runtimes } from "../support/setup.mjs";
import { interleavedRounds, runInSession } from "../support/session.mjs";

const ROUNDS = countOf("BENCH_ROUNDS", 30);
const PHASE_RUNS = countOf("BENCH_PHASES", 5, 0);
const HOSTS = (process.env.BENCH_HOSTS ?? "node,deno,bun").split(",").map((host) => host.trim());
const KINDS = ["direct", "floor", "pool"];

buildDist();
/** The native worker the default pool of dist/ starts (adapters/platform.ts localWorkers), which the floor starts too. */
const WORKER = join(root, "dist", "native", `spawnpool-worker-${process.platform}-${process.arch}`);
if (!existsSync(WORKER)) throw new Error(`No native worker at ${WORKER}`);
/** The protocol version the worker's Hello must state (core/frame.ts). */
const PROTOCOL_VERSION = Number(
  /export const PROTOCOL_VERSION = (\d+);/.exec(readFileSync(join(root, "core", "frame.ts"), "utf8"))[1],
);
/**
 * The Spawn request the pool sends for `new Command("echo", { args: ["hi"] }).output()` (core/options.ts
 * buildRequest, as the library writes it to the channel), request id 1.
 */
const REQUEST = {
  cmd: "echo",
  args: ["hi"],
  stdin: "inherit",
  stdout: "piped",
  stderr: "piped",
  buffered: true,
  killSignal: "SIGTERM",
  forceKillAfterDelay: 5000,
  window: 1048576,
  group: false,
};

/**
 * What every floor script shares: the frame reader (core/frame.ts's 9-byte header: u32 BE payload length, u8 type,
 * u32 BE request id), the Spawn frame, the Exit frame's output (decodeExit's layout: u32 JSON length, the JSON, u32
 * stdout length, stdout, stderr) and the handler that answers the Hello with the request and settles on its Exit.
 */
const FRAMES = `const HEADER = 9;
const HELLO = 16, SPAWN_ERROR = 18, EXIT = 23, SPAWN = 1, ID = 1;
const decoder = new TextDecoder();
/** Calls onFrame(type, id, payload) for every whole frame of the chunks pushed, in order. */
function frameReader(onFrame) {
  let held = new Uint8Array(0);
  return (chunk) => {
    if (held.byteLength > 0) {
      const joined = new Uint8Array(held.byteLength + chunk.byteLength);
      joined.set(held);
      joined.set(chunk, held.byteLength);
      chunk = joined;
    }
    const view = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let offset = 0;
    while (chunk.byteLength - offset >= HEADER) {
      const length = view.getUint32(offset);
      if (chunk.byteLength - offset - HEADER < length) break;
      onFrame(chunk[offset + 4], view.getUint32(offset + 5), chunk.subarray(offset + HEADER, offset + HEADER + length));
      offset += HEADER + length;
    }
    held = chunk.slice(offset);
  };
}
function spawnFrame() {
  const json = new TextEncoder().encode(${JSON.stringify(JSON.stringify(REQUEST))});
  const frame = new Uint8Array(HEADER + json.byteLength);
  const view = new DataView(frame.buffer);
  view.setUint32(0, json.byteLength);
  frame[4] = SPAWN;
  view.setUint32(5, ID);
  frame.set(json, HEADER);
  return frame;
}
/** The frame handler: answers the Hello with the request, resolves with the Exit frame's stdout as text. */
function client(resolve, reject, send, mark) {
  return (type, id, payload) => {
    if (type === HELLO) {
      mark("hello");
      const hello = JSON.parse(decoder.decode(payload));
      if (hello.version !== ${PROTOCOL_VERSION} || hello.error !== undefined) {
        reject(new Error("Unexpected hello " + JSON.stringify(hello)));
        return;
      }
      send(spawnFrame());
    } else if (type === SPAWN_ERROR && id === ID) {
      reject(new Error("Spawn failed: " + decoder.decode(payload)));
    } else if (type === EXIT && id === ID) {
      const view = new DataView(payload.buffer, payload.byteOffset, payload.byteLength);
      const jsonLength = view.getUint32(0);
      const info = JSON.parse(decoder.decode(payload.subarray(4, 4 + jsonLength)));
      const outLength = view.getUint32(4 + jsonLength);
      if (info.code !== 0) reject(new Error("Command failed: " + JSON.stringify(info)));
      else resolve(decoder.decode(payload.subarray(8 + jsonLength, 8 + jsonLength + outLength)));
    }
  };
}
`;

/**
 * A script's body (after its module load, `m`), which leaves the command's output in `out`; `M(key)` is the code
 * that records a timestamp under `key` in phase runs (nothing otherwise).
 */
const floors = {
  node: (M) =>
    `const worker = m.spawn(${JSON.stringify(WORKER)}, [], {
  stdio: ["ignore", "inherit", "inherit", "pipe"],
  env: { ...process.env, SPAWNPOOL_CHANNEL: "fd3" },
});
${M("spawned")}
const channel = worker.stdio[3];
const out = await new Promise((resolve, reject) => {
  worker.once("error", reject);
  channel.on("data", frameReader(client(resolve, reject, (frame) => channel.write(frame), (key) => {${M("key")}})));
  channel.once("close", () => reject(new Error("The worker closed its channel")));
});
channel.unref();
worker.unref();`,
  deno: (M) =>
    `const dir = Deno.makeTempDirSync({ prefix: "spawnpool-" }); // mode 0700
const path = dir + "/s";
const listener = Deno.listen({ transport: "unix", path });
const secret = crypto.getRandomValues(new Uint8Array(32));
let hex = "";
for (const byte of secret) hex += byte.toString(16).padStart(2, "0");
const worker = new Deno.Command(${JSON.stringify(WORKER)}, {
  env: { SPAWNPOOL_CHANNEL: "unix", SPAWNPOOL_BOOTSTRAP: JSON.stringify({ path, secret: hex }) },
  stdin: "null",
  stdout: "inherit",
  stderr: "inherit",
}).spawn();
${M("spawned")}
const conn = await listener.accept();
listener.close();
Deno.removeSync(dir, { recursive: true });
const buffer = new Uint8Array(65536);
let head = new Uint8Array(0);
while (head.byteLength < 32) {
  const n = await conn.read(buffer);
  if (n === null) throw new Error("The worker closed its connection before its secret");
  const joined = new Uint8Array(head.byteLength + n);
  joined.set(head);
  joined.set(buffer.subarray(0, n), head.byteLength);
  head = joined;
}
let diff = 0;
for (let i = 0; i < 32; i++) diff |= head[i] ^ secret[i];
if (diff !== 0) throw new Error("Wrong secret");
${M("connected")}
let out;
let failure;
const push = frameReader(client((text) => (out = text), (error) => (failure = error), (frame) => {
  conn.write(frame).catch((error) => (failure = error));
}, (key) => {${M("key")}}));
push(head.subarray(32));
while (out === undefined && failure === undefined) {
  const n = await conn.read(buffer);
  if (n === null) throw new Error("The worker closed its channel");
  push(buffer.subarray(0, n));
}
if (failure !== undefined) throw failure;
worker.unref();`,
  bun: (M) =>
    `const worker = Bun.spawn({
  cmd: [${JSON.stringify(WORKER)}],
  stdio: ["ignore", "inherit", "inherit", "pipe"],
  env: { ...process.env, SPAWNPOOL_CHANNEL: "fd3" },
});
${M("spawned")}
let socket;
const out = await new Promise((resolve, reject) => {
  const push = frameReader(client(resolve, reject, (frame) => socket.write(frame), (key) => {${M("key")}}));
  Bun.connect({
    fd: worker.stdio[3],
    socket: {
      binaryType: "uint8array",
      data(s, chunk) {
        socket = s;
        push(chunk);
      },
      drain() {},
      error(_, error) { reject(error); },
      close() { reject(new Error("The worker closed its channel")); },
      connectError(_, error) { reject(error); },
    },
  }).then((s) => (socket = s), reject);
});
socket.unref();
worker.unref();`,
};

/** The three scripts of `host`: `load` is the module import, `run` runs `echo hi` and leaves its output in `out`. */
function scriptsFor(host) {
  const pool = {
    load: `import(${JSON.stringify(pathToFileURL(join(root, "dist", "mod.js")).href)})`,
    run: () => `const out = new TextDecoder().decode((await new m.Command("echo", { args: ["hi"] }).output()).stdout);`,
  };
  const direct = host === "deno"
    ? { load: `Promise.resolve(globalThis.Deno)`, run: pool.run }
    : host === "bun"
    ? { load: `Promise.resolve(globalThis.Bun)`, run: () => `const out = await m.spawn(["echo", "hi"]).stdout.text();` }
    : {
      load: `import("node:child_process")`,
      run: () =>
        `const out = await new Promise((resolve) => {
  const child = m.spawn("echo", ["hi"]);
  let text = "";
  child.stdout.setEncoding("utf8").on("data", (chunk) => (text += chunk));
  child.on("close", () => resolve(text));
});`,
    };
  const floor = {
    load: host === "node"
      ? `import("node:child_process")`
      : `Promise.resolve(globalThis.${host === "deno" ? "Deno" : "Bun"})`,
    run: floors[host],
    prelude: FRAMES,
  };
  return { direct, floor, pool };
}

function source({ load, run, prelude = "" }, phases) {
  const now = "(performance.timeOrigin + performance.now())";
  const M = (key) => phases ? `marks[${key === "key" ? "key" : JSON.stringify(key)}] = ${now};` : "";
  return phases
    ? `const marks = { t0: ${now} };\n${prelude}const m = await ${load};\nmarks.load = ${now};\n${run(M)}\n` +
      `marks.out = ${now};\nconsole.log(out.trimEnd());\nconsole.error(JSON.stringify(marks));\n`
    : `${prelude}const m = await ${load};\n${run(M)}\nconsole.log(out.trimEnd());\n`;
}

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-floor-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));

/** Every case: { host, kind, file, phaseFile, walls, exits, left, gone }. */
const cases = [];
for (const host of HOSTS) {
  if (!(host in runtimes)) throw new Error(`BENCH_HOSTS: unknown host "${host}"`);
  const scripts = scriptsFor(host);
  for (const kind of KINDS) {
    const base = join(scratch, `${host}-${kind}`);
    writeFileSync(`${base}.mjs`, source(scripts[kind], false));
    writeFileSync(`${base}.phases.mjs`, source(scripts[kind], true));
    cases.push({
      host,
      kind,
      file: `${base}.mjs`,
      phaseFile: `${base}.phases.mjs`,
      walls: [],
      exits: [],
      left: [],
      gone: [],
    });
  }
}

/** Runs a script once: its wall time, exit time, what it printed and who was left behind (support/session.mjs). */
function runOnce(item, file) {
  return runInSession(runtimes[item.host], scriptArgs(item.host, file), {
    expected: "hi\n",
    label: `${item.host} ${item.kind}`,
  });
}

const fmt = (ms) => ms.toFixed(1);

await interleavedRounds(cases, ROUNDS, (item) => runOnce(item, item.file));

const find = (host, kind) => cases.find((c) => c.host === host && c.kind === kind);
console.log(`# Cold floor: one command, whole process (${new Date().toISOString().slice(0, 10)})`);
console.log();
console.log(
  `\`node bench/cold_floor.mjs\` (BENCH_ROUNDS=${ROUNDS}); ${ROUNDS} interleaved rounds, medians, ms. Hosts: node ` +
    `${process.version}, deno and bun from node_modules/.bin; ${navigator.hardwareConcurrency ?? "?"} cores.`,
);
console.log("Wall: from spawning the script until it exited and its stdout and stderr closed; exit: until it exited.");
console.log("Ratios: of the medians, and in brackets the median of the paired (same round) ratios.");
console.log();
console.log(
  "| host | direct ms | floor ms | pool ms | floor / direct | pool / direct | pool / floor | direct exit | floor exit | " +
    "pool exit |",
);
console.log(
  "| ---- | --------- | -------- | ------- | -------------- | ------------- | ------------ | ----------- | " +
    "---------- | --------- |",
);
const ratios = (a, b) => {
  const paired = a.walls.map((wall, i) => wall / b.walls[i]);
  return `${(median(a.walls) / median(b.walls)).toFixed(2)}x (${median(paired).toFixed(2)}x)`;
};
for (const host of HOSTS) {
  const [direct, floor, pool] = KINDS.map((kind) => find(host, kind));
  console.log(
    `| ${host} | ${fmt(median(direct.walls))} | ${fmt(median(floor.walls))} | ${fmt(median(pool.walls))} | ` +
      `${ratios(floor, direct)} | ${ratios(pool, direct)} | ${ratios(pool, floor)} | ${fmt(median(direct.exits))} | ` +
      `${fmt(median(floor.exits))} | ${fmt(median(pool.exits))} |`,
  );
}
console.log();
console.log("Left at exit: runs in which a process of the script's session (its worker) was still alive when the");
console.log("script had exited; gone after: the median and the slowest of those runs' times until none was.");
console.log();
console.log("| host | script | left at exit | gone after (median) | gone after (max) |");
console.log("| ---- | ------ | ------------ | ------------------- | ---------------- |");
for (const item of cases) {
  const lingering = item.gone.filter((_, i) => item.left[i] > 0);
  console.log(
    `| ${item.host} | ${item.kind} | ${lingering.length} of ${ROUNDS} | ` +
      `${lingering.length > 0 ? `${fmt(median(lingering))} ms` : "-"} | ` +
      `${lingering.length > 0 ? `${fmt(Math.max(...lingering))} ms` : "-"} |`,
  );
}

if (PHASE_RUNS > 0) {
  console.log();
  console.log(`## Where the time goes (${PHASE_RUNS} runs each, medians, ms from spawning the script)`);
  console.log();
  console.log("Boot: the script's first line ran. Load: its module (child_process, spawnpool) was imported.");
  console.log("Spawned: the floor's spawn call for the worker returned. Connected: the Deno floor's connection was");
  console.log("authenticated. Hello: the worker's Hello frame was in. Output: the command's output was in. Exit: the");
  console.log(
    "process had exited. Close: its stdout and stderr had closed (the worker, which holds them too, had exited).",
  );
  console.log();
  const columns = ["t0", "load", "spawned", "connected", "hello", "out"];
  console.log("| host | script | boot | load | spawned | connected | hello | output | exit | close |");
  console.log("| ---- | ------ | ---- | ---- | ------- | --------- | ----- | ------ | ---- | ----- |");
  for (const item of cases) {
    const runs = [];
    for (let i = 0; i < PHASE_RUNS; i++) runs.push(await runOnce(item, item.phaseFile));
    const marks = runs.map((run) => JSON.parse(run.stderr.trim().split("\n").at(-1)));
    const mark = (key) =>
      marks[0][key] === undefined ? "-" : fmt(median(runs.map((run, i) => marks[i][key] - run.start)));
    console.log(
      `| ${item.host} | ${item.kind} | ${columns.map(mark).join(" | ")} | ${fmt(median(runs.map((r) => r.exit)))} | ` +
        `${fmt(median(runs.map((r) => r.wall)))} |`,
    );
  }
}

// First use: what a runtime charges the first time a script does something on spawnpool's way to its first command,
// each timed inside a fresh process (`performance.now()` around the one call), runs interleaved, medians in ms. These
// are the costs the cold start (bench/cold_start.mjs) is made of, measured one at a time:
//
// - every host: importing spawnpool's bundle against an empty module, and the time from the import to the output of
//   its first command through the default pool (`new Command("echo", { args: ["hi"] }).output()`); then the same path
//   a second time in the process (a second pool, its own worker started, its first command: the same waits for a new
//   worker and for `echo`), so that the difference is what the first command pays for running spawnpool's code and the
//   runtime's for the first time; and the runtime's own spawn of `echo`, the first and the second in a process, for what
//   the runtime's first use costs a direct script;
// - Deno: the first `setTimeout` (Deno's is Node's, loaded on first use) against the first `Atomics.waitAsync` and
//   `AbortSignal.timeout`; a failing `Deno.statSync` followed by one that finds its file, against the second alone;
//   the host's PATH check of `echo` (adapters/_preflight.ts, from the sources; BENCH_OTHER's beside it), the first in
//   a process, on the PATH the bench runs with; importing `node:net` (what a JavaScript worker loaded as it started
//   until its bundle was split, 2026-11-29);
// - Bun: loading `node:fs` (what a `stat` needs) against a `Bun.which` in one directory;
// - Node: making a connected socket pair through a private listener (`connectedPair`, how a Node host's later workers
//   get their channel) the first and the second time in a process; importing `node:child_process`, and `node:net` once
//   `node:child_process` is loaded (what a host's first worker no longer imports);
// - Deno: the first `Deno.permissions.querySync`, and the first write through a child's stdin (a web stream: how the
//   bootstrap reached a Deno host's worker until it moved to the worker's environment, 2026-11-29);
// - every host: spawnpool's main chunk parsed but not run (its text in a function never called), against importing it.
//
// Run: `node bench/first_use.mjs` (it builds dist/). Options (env): BENCH_ROUNDS (default 21), BENCH_OTHER (another
// checkout, its dist/ built: its bundle's rows beside this one's, "(other)", for a before/after). Writes the table to
// stdout.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { countOf, median, scriptArgs } from "../support/fixture.mjs";
import { buildDist, root, runtimes } from "../support/setup.mjs";

const ROUNDS = countOf("BENCH_ROUNDS", 21);
const OTHER = process.env.BENCH_OTHER;
buildDist();

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-first-use-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));
const empty = join(scratch, "empty.mjs");
writeFileSync(empty, "export const nothing = 0;\n");

/** A probe's script: `body` runs between two clock readings; what it leaves in `ms` is printed if it sets it. */
const timed = (body) =>
  `let ms; const t0 = performance.now();\n${body}\nms ??= performance.now() - t0;\nconsole.log(JSON.stringify({ ms }));\n`;
const mod = (from) => pathToFileURL(join(from, "dist", "mod.js")).href;
const listener = (from) =>
  pathToFileURL(join(
    from,
    "dist",
    "lib",
    readdirSync(join(from, "dist", "lib")).find(
      (name) => name.startsWith("_net_listener-"),
    ),
  )).href;
const nativeWorker = join(root, "dist", "native", `spawnpool-worker-${process.platform}-${process.arch}`);
/**
 * spawnpool's main chunk (the one dist/mod.js imports) as a module that only parses it: its text, exports left out,
 * inside a function nothing calls.
 */
const parsedOnly = join(scratch, "parsed_only.mjs");
{
  const chunk = /from "\.\/lib\/([^"]+)"/.exec(readFileSync(join(root, "dist", "mod.js"), "utf8"))[1];
  const text = readFileSync(join(root, "dist", "lib", chunk), "utf8").replace(/^export \{[^}]*\};?\s*$/m, "");
  if (/^import /m.test(text)) throw new Error(`${chunk} has static imports: it cannot be parsed alone`);
  writeFileSync(parsedOnly, `function neverCalled() {\n${text}\n}\nexport { neverCalled };\n`);
}

/** Each runtime's own spawn of `echo hi`, its output read to the end (as bench/cold_floor.mjs's direct scripts). */
const directEcho = {
  node: `await new Promise((resolve) => {
  const child = cp.spawn("echo", ["hi"]);
  child.stdout.on("data", () => {});
  child.on("close", resolve);
});`,
  deno: `await new Deno.Command("echo", { args: ["hi"] }).output();`,
  bun: `{ const child = Bun.spawn(["echo", "hi"]); await child.stdout.text(); await child.exited; }`,
};

const probes = [];
for (const [label, from] of [["", root], [" (other)", OTHER]]) {
  if (from === undefined) continue;
  const preflight = pathToFileURL(join(from, "adapters", "_preflight.ts")).href;
  probes.push({
    host: "deno",
    name: `the host's PATH check of echo (adapters/_preflight.ts), the first in a process, this PATH${label}`,
    script: `const { preflight } = await import(${JSON.stringify(preflight)});
` +
      timed(`preflight({ cmd: "echo", args: [] });`),
  });
}
for (const host of Object.keys(runtimes)) {
  probes.push({ host, name: "import an empty module", script: timed(`await import(${JSON.stringify(empty)});`) });
  for (const [label, from] of [["", root], [" (other)", OTHER]]) {
    if (from === undefined) continue;
    probes.push({
      host,
      name: `import spawnpool${label}`,
      script: timed(`await import(${JSON.stringify(mod(from))});`),
    });
    probes.push({
      host,
      name: `import to the first command's output${label}`,
      script: `const m = await import(${JSON.stringify(mod(from))});\n` +
        timed(`await new m.Command("echo", { args: ["hi"] }).output();`),
    });
    probes.push({
      host,
      name: `a second pool's first command (its worker started too), after a first pool's${label}`,
      script: `const m = await import(${JSON.stringify(mod(from))});\n` +
        `await new m.Command("echo", { args: ["hi"] }).output();\nconst pool = new m.Pool();\n` +
        timed(`await pool.command("echo", { args: ["hi"] }).output();`) + "await pool.close();\n",
    });
  }
  for (const which of ["first", "second"]) {
    probes.push({
      host,
      name: `the runtime's own spawn of echo, its output read: the ${which} in the process` +
        (host === "node" ? " (node:child_process imported first)" : ""),
      script: (host === "node" ? `const cp = await import("node:child_process");\n` : "") +
        (which === "second" ? `${directEcho[host]}\n` : "") + timed(directEcho[host]),
    });
  }
}
probes.push(
  {
    host: "deno",
    name: "first setTimeout (set, cleared)",
    script: timed("clearTimeout(setTimeout(() => {}, 30000));"),
  },
  {
    host: "deno",
    name: "first Atomics.waitAsync (set, cancelled)",
    script: timed(
      "const c = new Int32Array(new SharedArrayBuffer(4)); Atomics.waitAsync(c, 0, 0, 30000); " +
        "Atomics.notify(c, 0);",
    ),
  },
  { host: "deno", name: "first AbortSignal.timeout", script: timed("AbortSignal.timeout(30000);") },
  {
    host: "deno",
    name: "Deno.statSync: a missing path, then the worker",
    script: timed(
      `try { Deno.statSync(${JSON.stringify(`${nativeWorker}-missing`)}); } catch {}\n` +
        `Deno.statSync(${JSON.stringify(nativeWorker)});`,
    ),
  },
  {
    host: "deno",
    name: "Deno.statSync: the worker alone",
    script: timed(`Deno.statSync(${JSON.stringify(nativeWorker)});`),
  },
  {
    host: "deno",
    name: "first Deno.permissions.querySync",
    script: timed(`Deno.permissions.querySync({ name: "read" });`),
  },
  {
    host: "deno",
    name: "first write through a child's stdin (get a writer, write a line, close)",
    script: `const child = new Deno.Command("head", { args: ["-c", "1"], stdin: "piped", stdout: "null" }).spawn();\n` +
      timed(
        "const writer = child.stdin.getWriter();\n" +
          `await writer.write(new TextEncoder().encode(${JSON.stringify(`${"x".repeat(120)}\n`)}));\n` +
          "await writer.close();",
      ) + "await child.status;\n",
  },
  ...Object.keys(runtimes).map((host) => ({
    host,
    name: "spawnpool's main chunk, parsed only (never run)",
    script: timed(`await import(${JSON.stringify(parsedOnly)});`),
  })),
  {
    host: "deno",
    name: "import node:net (Deno's Node layer)",
    script: timed(`await import("node:net");`),
  },
  {
    host: "bun",
    name: "load node:fs (process.getBuiltinModule)",
    script: timed(`process.getBuiltinModule("node:fs");`),
  },
  {
    host: "bun",
    name: "Bun.which in the worker's directory",
    script: timed(
      `Bun.which("spawnpool-worker-${process.platform}-${process.arch}", ` +
        `{ PATH: ${JSON.stringify(join(root, "dist", "native"))} });`,
    ),
  },
  ...["first", "second"].map((which) => ({
    host: "node",
    name: `connectedPair, the ${which} in the process`,
    script: `const { connectedPair } = await import(${JSON.stringify(listener(root))});\n` +
      `const onread = { buffer: new Uint8Array(65536), callback: () => true };\n` +
      (which === "second" ? "{ const p = await connectedPair(onread); p.host.destroy(); p.worker.destroy(); }\n" : "") +
      timed("const pair = await connectedPair(onread);") + "pair.host.destroy(); pair.worker.destroy();\n",
  })),
  {
    host: "node",
    name: "import node:child_process (what a direct script and a Node host's first worker load)",
    script: timed(`await import("node:child_process");`),
  },
  {
    host: "node",
    name: "import node:net once node:child_process is loaded",
    script: `await import("node:child_process");\n` + timed(`await import("node:net");`),
  },
);

for (const [i, probe] of probes.entries()) {
  probe.file = join(scratch, `probe-${i}.mjs`);
  writeFileSync(probe.file, probe.script);
  probe.ms = [];
}
for (let round = 0; round < ROUNDS; round++) {
  for (let i = 0; i < probes.length; i++) {
    const probe = probes[(i + round) % probes.length]; // the order rotates each round
    const run = spawnSync(runtimes[probe.host], scriptArgs(probe.host, probe.file), { encoding: "utf8", cwd: scratch });
    if (run.status !== 0) throw new Error(`${probe.host} ${probe.name}: exit ${run.status}\n${run.stderr}`);
    probe.ms.push(JSON.parse(run.stdout.trim().split("\n").at(-1)).ms);
  }
}

console.log(`# First use (${new Date().toISOString().slice(0, 10)})\n`);
console.log(
  `\`node bench/first_use.mjs\`: ${ROUNDS} interleaved runs of each probe, each in a fresh process; medians.\n`,
);
console.log("| host | probe | ms |\n| ---- | ----- | -- |");
for (const probe of probes) console.log(`| ${probe.host} | ${probe.name} | ${median(probe.ms).toFixed(2)} |`);

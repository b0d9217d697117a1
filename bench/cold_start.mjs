// Cold start: the whole-process wall time of a script that runs one command (`echo hi`), prints its output and exits
// without closing anything, through the runtime's own spawn and through spawnpool's default pool, on Node, Deno and
// Bun hosts, for each API shape: the Deno shape (`Command`), the Bun shape (`spawn`) and the `./node` drop-in.
// Every host imports the bundled build (dist/, built first): what npm installs and JSR serves (BENCH_DENO_SOURCES=1:
// Deno imports the TypeScript sources, as from a checkout).
//
// Runs are interleaved: every round runs each host's direct scripts and pooled scripts once, in an order that
// rotates each round; medians over the rounds, the ratio of the medians and the median of the paired (same round)
// ratios. A run's wall time ends when the script has exited and its stdout and stderr have closed (what a shell's
// `$(script)` waits for). Each script runs in a session of its own (setsid); when it has exited, every process
// still in that session is counted ("left at exit"), and the time until none is left is measured ("gone after").
// Anything still there after 3 s is killed and reported.
//
// Probes split the pool's cost: the direct script after importing spawnpool without using it (its module load), after
// importing only its runtime-neutral core and shapes, and on Deno after importing the node: built-ins that spawnpool's
// Deno path imports (Deno's Node compatibility layer).
//
// Then a few runs of each script with timestamps (BENCH_PHASES, default 5): when the runtime ran the script's first
// line, when the module was loaded, when the command's output was in, and when the process was gone; and CPU profiles
// of the Node host's scripts, by category.
//
// Run: `node bench/cold_start.mjs`. Options (env): BENCH_ROUNDS (default 15), BENCH_PHASES (default 5, 0 for none),
// BENCH_PROFILES (CPU profiles of each Node script, default 5, 0 for none), BENCH_HOSTS (default
// "node,deno,bun"), BENCH_OTHER (the path of another checkout, its dist/ built: its pool runs in
// the same rounds, rows "(other)", for a before/after comparison), BENCH_START_IN_HOST ("off", the default pool as it
// is; "on", its scripts call `configureDefaultPool({ startInHost: true })` first; "both", rows of each, "(in host)"),
// BENCH_COMPILE_CACHE ("1": every Node script turns on Node's compile cache first). Writes the table to stdout and
// bench/results/cold_start.md.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { countOf, median, scriptArgs } from "../support/fixture.mjs";
import { buildDist, root, runtimes } from "../support/setup.mjs";
import { interleavedRounds, runInSession } from "../support/session.mjs";

const ROUNDS = countOf("BENCH_ROUNDS", 15);
const PHASE_RUNS = countOf("BENCH_PHASES", 5, 0);
const PROFILE_RUNS = countOf("BENCH_PROFILES", 5, 0);
const HOSTS = (process.env.BENCH_HOSTS ?? "node,deno,bun").split(",").map((host) => host.trim());

buildDist();
/**
 * Where each host imports spawnpool from: the bundled build, which npm installs for Node and Bun and JSR serves to Deno
 * (tools/stage.mjs; the JSR package's files are dist/'s, with a comment naming their types). BENCH_DENO_SOURCES=1: Deno
 * imports the TypeScript sources instead, as from a checkout.
 */
const DENO_SOURCES = process.env.BENCH_DENO_SOURCES === "1";
const entry = (host, name, from = root) =>
  pathToFileURL(join(from, host === "deno" && DENO_SOURCES ? `${name}.ts` : join("dist", `${name}.js`))).href;
/** A module of the TypeScript sources (for the Deno probe that imports the core alone). */
const sourceModule = (name, from = root) => pathToFileURL(join(from, `${name}.ts`)).href;
/** Another checkout whose pool runs beside this one's, for a before/after comparison (its dist/ built already). */
const OTHER = process.env.BENCH_OTHER;
const IN_HOST = process.env.BENCH_START_IN_HOST ?? "off";
/**
 * BENCH_COMPILE_CACHE=1: every Node script (direct and pooled alike) first turns on Node's module compile cache, as an
 * application that starts often would (`module.enableCompileCache()`), in a directory of this run's, filled by the
 * warm-up round.
 */
const COMPILE_CACHE = process.env.BENCH_COMPILE_CACHE === "1";
if (!["off", "on", "both"].includes(IN_HOST)) {
  throw new Error(`BENCH_START_IN_HOST: "off", "on" or "both", not ${IN_HOST}`);
}

/**
 * The scripts: `load` is the module import, `run` runs `echo hi` and leaves its output in `out`. With `phases`, the
 * script imports dynamically and prints its timestamps (ms since the epoch) to stderr.
 */
function scriptsFor(host, from = root) {
  const cp = {
    load: `import("node:child_process")`,
    run: `const out = await new Promise((resolve) => {
  const child = m.spawn("echo", ["hi"]);
  let text = "";
  child.stdout.setEncoding("utf8").on("data", (chunk) => (text += chunk));
  child.on("close", () => resolve(text));
});`,
  };
  const dropIn = { ...cp, load: `import(${JSON.stringify(entry(host, "node", from))})` };
  const command = {
    load: `import(${JSON.stringify(entry(host, "mod", from))})`,
    run: `const out = new TextDecoder().decode((await new m.Command("echo", { args: ["hi"] }).output()).stdout);`,
  };
  const bunShape = {
    load: command.load,
    run: `const out = await m.spawn(["echo", "hi"]).stdout.text();`,
  };
  const direct = host === "deno"
    ? { load: `Promise.resolve(globalThis.Deno)`, run: command.run }
    : host === "bun"
    ? { load: `Promise.resolve(globalThis.Bun)`, run: bunShape.run }
    : cp;
  const native = host === "deno" ? "Deno.Command" : host === "bun" ? "Bun.spawn" : "child_process";
  // Probes, to split the pool's cost: the direct script after importing spawnpool without using it (module load), and
  // on Deno after importing the node: built-in modules spawnpool's Deno path imports (Deno's Node compatibility layer).
  const probes = [
    {
      shape: "probe: spawnpool imported, unused",
      script: { ...direct, load: `${command.load}.then(() => ${direct.load})` },
    },
  ];
  if (host === "deno") {
    // The runtime-neutral core and both shapes, without the adapters and the runtime's modules they import (the npm
    // build Node and Bun import is one bundle: no such part of it to import).
    probes.push({
      shape: "probe: core modules (TS sources) imported, unused",
      script: {
        ...direct,
        load: `Promise.all(${
          JSON.stringify(
            ["core/pool_core", "shapes/command", "shapes/subprocess"].map((name) => sourceModule(name, from)),
          )
        }.map((url) => import(url))).then(() => ${direct.load})`,
      },
    });
    const builtins = ["process", "fs", "path", "url", "module", "os", "net", "child_process", "buffer"];
    probes.push({
      shape: "probe: node: built-ins imported",
      script: {
        ...direct,
        load: `Promise.all(${
          JSON.stringify(builtins)
        }.map((name) => import("node:" + name))).then(() => ${direct.load})`,
      },
    });
  }
  const shapes = [
    { shape: "Command", script: command, against: native },
    { shape: "spawn", script: bunShape, against: native },
    { shape: "./node", script: dropIn, against: "child_process" },
  ];
  // The same scripts with `startInHost` set for the default pool first (the drop-in's module shares that pool).
  const configure = `import(${JSON.stringify(entry(host, "mod", from))}).then((pool) => ` +
    `pool.configureDefaultPool({ startInHost: true }))`;
  const inHost = shapes.map(({ shape, script, against }) => ({
    shape: `${shape} (in host)`,
    script: { ...script, load: `${configure}.then(() => ${script.load})` },
    against,
  }));
  return {
    direct: { [native]: direct, ...(host === "node" ? {} : { child_process: cp }) },
    pooled: [
      ...probes.map((probe) => ({ ...probe, against: native })),
      ...(IN_HOST === "on" ? [] : shapes),
      ...(IN_HOST === "off" ? [] : inHost),
    ],
  };
}

function source({ load, run }, phases) {
  const now = "(performance.timeOrigin + performance.now())";
  return phases
    ? `const t0 = ${now};\nconst m = await ${load};\nconst t1 = ${now};\n${run}\nconst t2 = ${now};\n` +
      `console.log(out.trimEnd());\nconsole.error(JSON.stringify({ t0, t1, t2 }));\n`
    : `const m = await ${load};\n${run}\nconsole.log(out.trimEnd());\n`;
}

const scratch = mkdtempSync(join(tmpdir(), "spawnpool-cold-"));
process.on("exit", () => rmSync(scratch, { recursive: true, force: true }));
const nodePrelude = COMPILE_CACHE
  ? `(await import("node:module")).enableCompileCache(${JSON.stringify(join(scratch, "compile-cache"))});\n`
  : "";

/** Every case: { host, name, file, phaseFile }. */
const cases = [];
const plan = [];
for (const host of HOSTS) {
  if (!(host in runtimes)) throw new Error(`BENCH_HOSTS: unknown host "${host}"`);
  const { direct, pooled } = scriptsFor(host);
  const add = (name, script) => {
    const base = join(scratch, `${host}-${name.replace(/[^A-Za-z]/g, "_")}`);
    const prelude = host === "node" ? nodePrelude : "";
    writeFileSync(`${base}.mjs`, prelude + source(script, false));
    writeFileSync(`${base}.phases.mjs`, prelude + source(script, true));
    const item = { host, name, file: `${base}.mjs`, phaseFile: `${base}.phases.mjs`, walls: [], exits: [] };
    item.left = [];
    item.gone = [];
    cases.push(item);
    return item;
  };
  const directCases = Object.fromEntries(Object.entries(direct).map(([name, script]) => [name, add(name, script)]));
  for (const { shape, script, against } of pooled) {
    plan.push({
      host,
      shape,
      against,
      direct: directCases[against],
      pooled: add(shape.startsWith("probe") ? shape : `pool ${shape}`, script),
    });
  }
  if (OTHER !== undefined) {
    for (
      const { shape, script, against } of scriptsFor(host, OTHER).pooled.filter((p) => !p.shape.startsWith("probe"))
    ) {
      plan.push({
        host,
        shape: `${shape} (other)`,
        against,
        direct: directCases[against],
        pooled: add(`other ${shape}`, script),
      });
    }
  }
}

/** Runs a script once: its wall time, exit time, what it printed and who was left behind (support/session.mjs). */
function runOnce(item, file, runtimeFlags = []) {
  const args = [...runtimeFlags, ...scriptArgs(item.host, file)];
  return runInSession(runtimes[item.host], args, { expected: "hi\n", label: `${item.host} ${item.name}` });
}

const fmt = (ms) => ms.toFixed(1);
const ratio = (a, b) => (a / b).toFixed(2);

await interleavedRounds(cases, ROUNDS, (item) => runOnce(item, item.file));

const lines = [];
const out = (line = "") => {
  lines.push(line);
  console.log(line);
};
out(`# Cold start: one command, whole process (${new Date().toISOString().slice(0, 10)})`);
out();
out(
  `\`node bench/cold_start.mjs\` (BENCH_ROUNDS=${ROUNDS}); ${ROUNDS} interleaved rounds, medians, ms. ` +
    "Hosts: node " + process.version + `, deno and bun from node_modules/.bin; ${navigatorCores()} cores.`,
);
out("Wall: from spawning the script until it exited and its stdout and stderr closed. Left at exit: runs in which a");
out("process of the script's session was still alive when the script had exited (gone after: the slowest to go).");
out();
out(
  "| host | shape | direct API | direct ms | pool ms | pool / direct | paired ratio (median) | left at exit | gone after |",
);
out(
  "| ---- | ----- | ---------- | --------- | ------- | ------------- | --------------------- | ------------ | ---------- |",
);
for (const { host, shape, against, direct, pooled } of plan) {
  const paired = pooled.walls.map((wall, i) => wall / direct.walls[i]);
  const leftRuns = pooled.left.filter((n) => n > 0).length;
  out(
    `| ${host} | ${shape} | ${against} | ${fmt(median(direct.walls))} | ${fmt(median(pooled.walls))} | ` +
      `${ratio(median(pooled.walls), median(direct.walls))}x | ${median(paired).toFixed(2)}x | ` +
      `${leftRuns} of ${ROUNDS} | ${leftRuns > 0 ? `${fmt(Math.max(...pooled.gone))} ms` : "-"} |`,
  );
}
const directLeft = cases.filter((c) => !/^(pool|other|probe)\b/.test(c.name) && c.left.some((n) => n > 0));
if (directLeft.length > 0) out(`\nDirect scripts that left processes: ${directLeft.map((c) => c.name).join(", ")}`);

if (PHASE_RUNS > 0) {
  out();
  out(`## Where the time goes (${PHASE_RUNS} runs each, medians, ms from spawning the script)`);
  out();
  out("Boot: the runtime ran the script's first line. Load: the module (spawnpool or the runtime's own) was imported.");
  out("Command: the command's output was in. Exit: the process had exited. Close: its stdout and stderr had closed.");
  out();
  out("| host | script | boot | load | command | exit | close |");
  out("| ---- | ------ | ---- | ---- | ------- | ---- | ----- |");
  for (const item of cases) {
    const runs = [];
    for (let i = 0; i < PHASE_RUNS; i++) runs.push(await runOnce(item, item.phaseFile));
    const at = (pick) => fmt(median(runs.map(pick)));
    const marks = runs.map((run) => JSON.parse(run.stderr.trim().split("\n").at(-1)));
    const mark = (key) => fmt(median(runs.map((run, i) => marks[i][key] - run.start)));
    out(
      `| ${item.host} | ${item.name} | ${mark("t0")} | ${mark("t1")} | ${mark("t2")} | ${at((r) => r.exit)} | ` +
        `${at((r) => r.wall)} |`,
    );
  }
}

if (PROFILE_RUNS > 0) {
  out();
  out(`## CPU profiles, Node host (${PROFILE_RUNS} runs each, \`--cpu-prof\` every 250 µs, medians of self time, ms)`);
  out();
  out("Deno's `run` has no CPU profiler flag, and Bun's profiles do not attribute time to functions usable here. The");
  out("profiler slows the scripts down: compare the rows with each other, not with the wall times above.");
  out("Module loading: the runtime's module loader and its built-in modules (resolving, reading, compiling, linking,");
  out(
    "their top-level code); spawnpool: functions in its own files; spawn: the runtime's spawn functions (the fork and",
  );
  out(
    "exec of the worker or the command); GC; other JS: the rest of the runtime's JavaScript; native: V8's (program),",
  );
  out("the runtime's own start and teardown; idle: waiting (for the command, the worker).");
  out();
  const categories = ["module loading", "spawnpool", "spawn", "GC", "other JS", "native", "idle", "total"];
  out(`| host | script | ${categories.join(" | ")} |`);
  out(`| ---- | ------ | ${categories.map(() => "---").join(" | ")} |`);
  for (const item of cases) {
    if (item.host !== "node" || item.name.startsWith("other")) continue;
    const totals = [];
    for (let i = 0; i < PROFILE_RUNS; i++) {
      const dir = mkdtempSync(join(scratch, "prof-"));
      await runOnce(item, item.file, ["--cpu-prof", `--cpu-prof-dir=${dir}`, "--cpu-prof-interval=250"]);
      const file = readdirSync(dir).find((name) => name.endsWith(".cpuprofile"));
      if (file === undefined) throw new Error(`${item.host} wrote no CPU profile`);
      totals.push(profileCategories(JSON.parse(readFileSync(join(dir, file), "utf8"))));
    }
    out(
      `| ${item.host} | ${item.name} | ${
        categories.map((c) => fmt(median(totals.map((t) => t[c] ?? 0)))).join(" | ")
      } |`,
    );
  }
}

/** A V8 CPU profile's self time (ms) by category (see the table's legend). */
function profileCategories(profile) {
  const selfUs = new Map();
  profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const totals = {};
  for (const node of profile.nodes) {
    const us = selfUs.get(node.id) ?? 0;
    if (us === 0) continue;
    const { functionName: name, url } = node.callFrame;
    const category = name === "(garbage collector)"
      ? "GC"
      : name === "(idle)"
      ? "idle"
      : name === "(program)" || name === "(root)"
      ? "native"
      : url.startsWith(pathToFileURL(root).href) || url.startsWith(root)
      ? "spawnpool"
      : /modules\/|bootstrap\/realm|compileForInternalLoader|internal\/modules|^node:internal\/bootstrap/.test(url) ||
          /^(compileSourceTextModule|compileForInternalLoader|internalBinding|requireBuiltin|moduleEvaluation)$/
            .test(name) ||
          (name === "" && url.startsWith("node:")) // a built-in module's top-level code
      ? "module loading"
      : /child_process/.test(url) && /^(spawn|_spawn|spawnWith|ChildProcess)/.test(name) || name === "spawn"
      ? "spawn"
      : "other JS";
    totals[category] = (totals[category] ?? 0) + us / 1000;
    totals.total = (totals.total ?? 0) + us / 1000;
  }
  return totals;
}

function navigatorCores() {
  return globalThis.navigator?.hardwareConcurrency ?? "?";
}

mkdirSync(join(root, "bench", "results"), { recursive: true });
writeFileSync(join(root, "bench", "results", "cold_start.md"), `${lines.join("\n")}\n`);

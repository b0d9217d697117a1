// node-pty's own tests against spawnpool/pty. microsoft/node-pty's unix-applicable test files (src/*.test.ts) run
// with mocha (the major version node-pty uses, pinned below) on Node 24 (node_modules/.bin/node), and with --runtime
// on Bun and Deno too, with a shim in place of node-pty: its `require('./unixTerminal')` gets a `UnixTerminal` whose
// `new UnixTerminal(file, args, options)` is spawnpool/pty's `spawn(file, args, options)` (the default pool,
// configured to native workers), and `require('./lib/index')` (in the scripts its signal tests run with `node -e`)
// gets spawnpool/pty itself. Nothing of node-pty is kept in this repository: the test files are read from a checkout
// you give, transpiled (TypeScript's transpileModule, as node-pty's `tsc -b` does) into .cache/node-pty-suite/ with
// the shim, and run there. Tests that use what a pool cannot have (a master fd in the host, ptsName,
// UnixTerminal.open()'s sockets, node-pty's private fields and internal classes, Windows) are skipped, each with its
// reason (EXCLUDED); tests that fail for a documented difference of spawnpool/pty still run, each in a mocha run of
// its own (DIFFERENCES). Prints a results table (each test by runtime) and writes it to
// bench/results/latest.node-pty.md (or --out); exits 1 if a test failed that is not a listed difference. Not part of
// `npm test`: it needs node-pty's sources and mocha from npm. Build the native worker first (`npm run build:native`).
//
//   git clone https://github.com/microsoft/node-pty /tmp/node-pty
//   git -C /tmp/node-pty checkout 7822654b683c0a24a3d3b30f6e97b4139655ca66      (PINNED below)
//   node_modules/.bin/node tools/node_pty_suite.mjs /tmp/node-pty [--runtime node --runtime bun --runtime deno]
//   SPAWNPOOL_NODE_PTY_DIR=/tmp/node-pty node_modules/.bin/node tools/node_pty_suite.mjs
//
// The path may also be a git directory (a bare clone or mirror): the files are then read at --ref (default: the
// pinned commit) with `git show`. --mocha DIR uses the mocha package in DIR (the folder holding its package.json)
// instead of installing the pinned one from npm (network) into .cache/node-pty-suite/. --timeout MS is mocha's
// per-test timeout (default: mocha's 2000, as node-pty runs it). The `node` their signal tests start is PATH's, with
// node_modules/.bin first (Node 24) whatever --runtime runs mocha.
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import ts from "typescript";
import { bin, root } from "../support/setup.mjs";

/** The node-pty commit these exclusions were written against (its main branch, 2026-08-07). */
const PINNED = "7822654b683c0a24a3d3b30f6e97b4139655ca66";
/** The mocha node-pty's package-lock.json installs ("mocha": "10"). */
const MOCHA = "10.7.3";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    runtime: { type: "string", multiple: true },
    ref: { type: "string" },
    mocha: { type: "string" },
    timeout: { type: "string" },
    runs: { type: "string", default: "1" },
    out: { type: "string", default: join(root, "bench", "results", "latest.node-pty.md") },
  },
});
const runtimes = opts.runtime ?? ["node"];
for (const runtime of runtimes) {
  if (!["node", "bun", "deno"].includes(runtime)) throw new Error(`--runtime: node, bun or deno, not ${runtime}`);
}
const source = positionals[0] ?? process.env.SPAWNPOOL_NODE_PTY_DIR;
if (!source) {
  console.error("Give a node-pty checkout: an argument or SPAWNPOOL_NODE_PTY_DIR (see the top of this file)");
  process.exit(2);
}

const PRIVATE = "reads node-pty's private fields";
/**
 * Tests skipped, by mocha's full title: what they need cannot exist in a pool, where the terminal is opened by a
 * worker process and only its command's bytes reach the host.
 */
const EXCLUDED = {
  "UnixTerminal Constructor should set a valid pts name":
    "reads term.ptsName and tty.isatty(term.fd): the terminal's master fd is in the worker, not in the host, and " +
    "its pts name is not reported (the command's `tty` prints it)",
  "UnixTerminal open should open a pty with access to a master and slave socket":
    "UnixTerminal.open(): a bare pty pair with master and slave sockets in the host; a pool's terminals exist only " +
    "in a worker, for a command",
  "Terminal checkType should throw for the wrong type":
    "node-pty's internal Terminal base class (_checkType through a subclass), not its API",
  "Terminal checkType should throw for wrong types within arrays":
    "node-pty's internal Terminal base class (_checkType through a subclass), not its API",
  "Terminal automatic flow control should respect ctor flow control options":
    `${PRIVATE} _flowControlPause and _flowControlResume (the public handleFlowControl is set)`,
};

const PID_IN_CALL_TURN = "its script prints ptyProcess.pid in the turn of spawn(): undefined until the worker " +
  "reports it (await `spawned`), so it signals process.kill(NaN) and throws; with the pid awaited the same script " +
  "gives what the test expects";
/**
 * Tests expected to fail: an intended difference of spawnpool/pty, by full title. Each runs in a mocha run of its
 * own (the others skip it), so what it leaves behind (a child process, a timer) cannot fail another test.
 */
const DIFFERENCES = {
  "UnixTerminal signals in parent and child SIGINT - custom in parent and child": PID_IN_CALL_TURN,
  "UnixTerminal signals in parent and child SIGINT - custom in parent, default in child": PID_IN_CALL_TURN,
};

/** Tests that pass, with what their passing does not show. */
const NOTES = {
  "Terminal constructor should do basic type checks":
    "as in node-pty, it calls `new` on the module object require('./unixTerminal') gives, which throws before any " +
    "option is read: it checks nothing of either (spawnpool/pty's own type checks: tests/conformance_terminal_test.ts)",
  "UnixTerminal spawn should not leak pty file descriptors to child processes":
    "waits a fixed 1,000 ms for three interactive bash shells to start and the third to run `file` over its fds: on " +
    "a loaded 2-core machine that takes 700-1,200 ms with no pool (Python's pty.openpty and bash), so it fails now " +
    "and then; the count, whenever it arrived, was 0",
  "UnixTerminal spawn should not leak child process":
    "counts the machine's processes whose command line holds 'node' (`ps -ax | grep node`) before the spawn and " +
    "right after its SIGINT (its `await setTimeout(...)` waits for nothing): other processes of a shared machine " +
    "move the count. A wrong count shows as a timeout (the assertion throws in an async listener: a rejection, " +
    "which mocha does not take for the test's failure)",
};

/** Test files not loaded, and why (their tests are listed from the source). */
const NOT_LOADED = {
  "eventEmitter2.test.ts": "node-pty's internal EventEmitter2 class (src/eventEmitter2.ts), not its API",
  "windowsTerminal.test.ts": "Windows only (conpty; registered on win32 only)",
  "windowsPtyAgent.test.ts": "Windows only (conpty agent, Windows command lines; registered on win32 only)",
};
/** Test files loaded; helpers are transpiled but hold no tests. */
const LOADED = ["unixTerminal.test.ts", "terminal.test.ts"];
const HELPERS = ["testUtils.test.ts"];

/** node-pty's sources at the chosen commit: a work tree or a git directory. */
function sources(dir) {
  const path = resolve(dir);
  if (existsSync(join(path, "src", "unixTerminal.test.ts"))) {
    const head = spawnSync("git", ["-C", path, "rev-parse", "HEAD"], { encoding: "utf8" });
    const commit = head.status === 0 ? head.stdout.trim() : "unknown"; // not a git work tree
    if (commit !== PINNED) console.log(`Note: ${path} is at ${commit}; the exclusions were written for ${PINNED}`);
    return {
      commit,
      list: (folder) => readdirSync(join(path, folder)),
      read: (file) => readFileSync(join(path, file)),
    };
  }
  const git = (...args) => {
    const result = spawnSync("git", ["--git-dir", path, ...args], { maxBuffer: 1 << 28 });
    if (result.status !== 0) throw new Error(`git ${args.join(" ")} in ${path}: ${result.stderr}`);
    return result.stdout;
  };
  const commit = git("rev-parse", `${opts.ref ?? PINNED}^{commit}`).toString().trim();
  return {
    commit,
    list: (folder) => git("ls-tree", "--name-only", `${commit}:${folder}`).toString().split("\n").filter(Boolean),
    read: (file) => git("show", `${commit}:${file}`),
  };
}

/** The mocha CLI to run: --mocha's, or the pinned one installed from npm into the cache. */
function mochaDir(cache) {
  if (opts.mocha) return resolve(opts.mocha);
  const dir = join(cache, `mocha-${MOCHA}`);
  const pkg = join(dir, "node_modules", "mocha");
  if (!existsSync(join(pkg, "package.json"))) {
    console.log(`Installing mocha ${MOCHA} from npm (network) into ${dir}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "package.json"), '{ "private": true }\n');
    const install = spawnSync("npm", ["install", "--no-audit", "--no-fund", "--ignore-scripts", `mocha@${MOCHA}`], {
      cwd: dir,
      stdio: "inherit",
      env: { ...process.env, PATH: `${bin}:${process.env.PATH}` },
    });
    if (install.status !== 0) throw new Error(`npm install mocha@${MOCHA} exited with ${install.status}`);
  }
  return pkg;
}

/** The shim modules that stand where node-pty's would be (CommonJS, as node-pty's lib/). */
function writeShim(run, mocha) {
  const pty = JSON.stringify(join(root, "pty.ts"));
  const mod = JSON.stringify(join(root, "mod.ts"));
  // lib/index.js: node-pty's entry (`require('./lib/index')` in the scripts the signal tests run) is spawnpool/pty.
  writeFileSync(
    join(run, "lib", "index.js"),
    `"use strict";
// spawnpool/pty in node-pty's place, on the default pool with native workers (no fallback to the host's runtime).
require(${mod}).configureDefaultPool({ runtime: "native" });
module.exports = require(${pty});
`,
  );
  // lib/unixTerminal.js: node-pty's UnixTerminal; constructing one spawns through spawnpool/pty.
  writeFileSync(
    join(run, "lib", "unixTerminal.js"),
    `"use strict";
const pty = require("./index");
class UnixTerminal {
  constructor(file, args, options) {
    return pty.spawn(file, args, options);
  }
  static open() {
    throw new Error("spawnpool/pty has no UnixTerminal.open(): a pool's terminals are opened by its workers");
  }
}
exports.UnixTerminal = UnixTerminal;
`,
  );
  // lib/terminal.js: node-pty's internal base class, which terminal.test.ts subclasses at load time; the tests that
  // use it are excluded.
  writeFileSync(
    join(run, "lib", "terminal.js"),
    `"use strict";
class Terminal {}
exports.Terminal = Terminal;
`,
  );
  // Root hooks: excluded tests are skipped (pending); a difference runs alone (SPAWNPOOL_NODE_PTY_ONLY names it),
  // skipped in the other runs.
  writeFileSync(
    join(run, "hooks.js"),
    `"use strict";
const excluded = ${JSON.stringify(Object.keys(EXCLUDED), null, 2)};
const alone = ${JSON.stringify(Object.keys(DIFFERENCES), null, 2)};
exports.mochaHooks = {
  beforeEach() {
    const title = this.currentTest.fullTitle();
    const only = process.env.SPAWNPOOL_NODE_PTY_ONLY;
    if (excluded.includes(title) || (only ? title !== only : alone.includes(title))) this.skip();
  },
};
`,
  );
  // A spec reporter that also writes each test's result as JSON.
  writeFileSync(
    join(run, "reporter.js"),
    `"use strict";
const { writeFileSync } = require("node:fs");
const Mocha = require(${JSON.stringify(mocha)});
class Reporter extends Mocha.reporters.Spec {
  constructor(runner, options) {
    super(runner, options);
    const results = [];
    const add = (test, state, error) =>
      results.push({ file: test.file, title: test.fullTitle(), state, error: error && String(error.message ?? error) });
    runner.on("pass", (test) => add(test, "passed"));
    runner.on("fail", (test, error) => add(test, "failed", error));
    runner.on("pending", (test) => add(test, "skipped"));
    runner.once("end", () => writeFileSync(process.env.SPAWNPOOL_NODE_PTY_RESULTS, JSON.stringify(results)));
  }
}
module.exports = Reporter;
`,
  );
}

/** Transpiles node-pty's test files into `run/lib/` (as node-pty's build does, CommonJS) and copies its fixtures. */
function prepare(src, run) {
  rmSync(run, { recursive: true, force: true });
  mkdirSync(join(run, "lib"), { recursive: true });
  mkdirSync(join(run, "fixtures"));
  // The repository's package.json says "type": "module"; node-pty's lib/ is CommonJS.
  writeFileSync(join(run, "package.json"), '{ "type": "commonjs" }\n');
  for (const file of [...LOADED, ...HELPERS]) {
    const { outputText } = ts.transpileModule(src.read(`src/${file}`).toString(), {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 },
      fileName: file,
    });
    writeFileSync(join(run, "lib", file.replace(/\.ts$/, ".js")), outputText);
  }
  for (const file of src.list("fixtures")) writeFileSync(join(run, "fixtures", file), src.read(`fixtures/${file}`));
}

/**
 * The `it` titles in a test file's source (commented-out lines left out), for tests mocha does not register here, each
 * with the platform of the last `process.platform === '...'` check before it (undefined without one).
 */
function titlesIn(text) {
  const titles = [];
  for (const match of text.matchAll(/^[ \t]*it\(\s*(['"`])((?:\\.|(?!\1).)*)\1/gm)) {
    const checks = [...text.slice(0, match.index).matchAll(/process\.platform === '(\w+)'/g)];
    titles.push({ title: match[2].replace(/\\(.)/g, "$1"), platform: checks.at(-1)?.[1] });
  }
  return titles;
}
const PLATFORMS = { darwin: "macOS", linux: "Linux", win32: "Windows" };

function command(runtime, mochaCli) {
  if (runtime === "node") return [join(bin, "node"), [mochaCli]];
  if (runtime === "bun") return [join(bin, "bun"), [mochaCli]];
  return [join(bin, "deno"), ["run", "-A", mochaCli]];
}

function runtimeVersion(runtime) {
  const result = spawnSync(join(bin, runtime), ["--version"], { encoding: "utf8" });
  return (result.stdout ?? "").split("\n")[0].replace(/^deno /, "").replace(/ \(.*$/, "").trim();
}

/** Runs the loaded files with mocha under `runtime`, then each difference alone; the results by full title. */
function runSuite(runtime, run, mocha) {
  const byTitle = runMocha(runtime, run, mocha);
  for (const title of Object.keys(DIFFERENCES)) {
    const alone = runMocha(runtime, run, mocha, title).get(title);
    if (alone !== undefined) byTitle.set(title, alone);
  }
  return byTitle;
}

/** One mocha run (of the test titled `only` alone, if given); the results by full title. */
function runMocha(runtime, run, mocha, only) {
  const results = join(run, `results.${runtime}.json`);
  rmSync(results, { force: true });
  const [exe, pre] = command(runtime, join(mocha, "bin", "mocha.js"));
  const args = [
    ...pre,
    "--exit", // as node-pty's `npm test`
    "--require",
    join(run, "hooks.js"),
    "--reporter",
    join(run, "reporter.js"),
    ...(opts.timeout ? ["--timeout", opts.timeout] : []),
    ...LOADED.map((file) => join("lib", file.replace(/\.ts$/, ".js"))),
  ];
  console.log(`\n--- ${runtime}${only ? `, ${only} alone` : ""}: ${exe} ${args.join(" ")}`);
  const started = Date.now();
  const result = spawnSync(exe, args, {
    cwd: run,
    stdio: "inherit",
    // Their signal tests start `node -e <script>` (PATH's node: Node 24 here), whose require('./lib/index') is the shim.
    env: {
      ...process.env,
      PATH: `${bin}:${process.env.PATH}`,
      NODE_OPTIONS: "",
      SPAWNPOOL_NODE_PTY_RESULTS: results,
      SPAWNPOOL_NODE_PTY_ONLY: only ?? "",
    },
    timeout: 10 * 60_000,
    killSignal: "SIGKILL",
  });
  console.log(`--- ${runtime}: exit ${result.status ?? result.signal}, ${Math.round((Date.now() - started) / 1000)} s`);
  if (!existsSync(results)) throw new Error(`${runtime}: mocha wrote no results (exit ${result.status})`);
  const byTitle = new Map();
  for (const test of JSON.parse(readFileSync(results, "utf8"))) {
    byTitle.set(test.title, { ...test, file: test.file && test.file.split("/").pop().replace(/\.js$/, ".ts") });
  }
  return byTitle;
}

const src = sources(source);
const cache = join(root, ".cache", "node-pty-suite");
const mocha = mochaDir(cache);
const run = join(cache, `run-${src.commit.slice(0, 12)}`);
prepare(src, run);
writeShim(run, mocha);
console.log(`node-pty ${src.commit} (${resolve(source)}), mocha ${MOCHA} (${mocha}), run in ${run}`);

const loadBefore = loadavg()[0].toFixed(1);
// Each runtime's results, one map per run (--runs N: the whole suite N times, runtimes in turn).
const byRuntime = Object.fromEntries(runtimes.map((runtime) => [runtime, []]));
for (let i = 0; i < Number(opts.runs); i++) {
  for (const runtime of runtimes) byRuntime[runtime].push(runSuite(runtime, run, mocha));
}

// Every test: those mocha ran (on any runtime), those the loaded files hold but do not register on this platform,
// and those of the files not loaded.
const rows = [];
const seen = new Set();
for (const results of Object.values(byRuntime).flat()) {
  for (const [title, test] of results) {
    if (seen.has(title)) continue;
    seen.add(title);
    rows.push({ file: test.file, title });
  }
}
const ranTitles = [...seen];
for (const file of LOADED) {
  for (const { title, platform } of titlesIn(src.read(`src/${file}`).toString())) {
    if (!ranTitles.some((full) => full === title || full.endsWith(` ${title}`))) {
      const only = PLATFORMS[platform] ?? platform;
      rows.push({
        file,
        title,
        note: `${only} only: node-pty registers it when process.platform is '${platform}' (this host: ` +
          `${process.platform})`,
      });
    }
  }
}
const known = new Set([...LOADED, ...HELPERS, ...Object.keys(NOT_LOADED)]);
for (const file of src.list("src").filter((name) => name.endsWith(".test.ts"))) {
  if (LOADED.includes(file) || HELPERS.includes(file)) continue;
  const reason = NOT_LOADED[file] ?? "not classified by this script (a newer node-pty?): not run";
  if (!known.has(file)) console.log(`Note: ${file} is new to this script; not run`);
  const titles = titlesIn(src.read(`src/${file}`).toString()).map((test) => test.title);
  if (file.startsWith("windows")) {
    rows.push({ file, title: `(${titles.length} tests)`, note: reason, excluded: true, tests: titles.length });
  } else for (const title of titles) rows.push({ file, title, note: reason, excluded: true });
}

/** One test's result on one runtime over the runs, as the table shows it, and how it counts. */
function cell(runtime, row) {
  if (row.excluded || row.note) return { text: "excluded", count: "excluded" };
  const states = byRuntime[runtime].map((results) => results.get(row.title)?.state ?? "not run");
  const passed = states.filter((state) => state === "passed").length;
  const failed = states.filter((state) => state === "failed").length;
  if (passed === 0 && failed === 0) {
    const text = EXCLUDED[row.title] ? "excluded" : states[0] === "skipped" ? "skipped" : "not run";
    return { text, count: text === "excluded" ? "excluded" : "failed" };
  }
  if (DIFFERENCES[row.title] && passed === 0) return { text: "fails (difference)", count: "difference" };
  if (failed === 0) return { text: "passes", count: "passed" };
  if (passed === 0) return { text: "FAILS", count: "failed" };
  return { text: `passes ${passed}/${passed + failed}`, count: "flaky" };
}
const counts = Object.fromEntries(runtimes.map((runtime) => {
  const tally = { passed: 0, flaky: 0, failed: 0, difference: 0, excluded: 0 };
  for (const row of rows) tally[cell(runtime, row).count] += row.tests ?? 1;
  return [runtime, tally];
}));

const lines = [
  `# node-pty's own tests against spawnpool/pty (${new Date().toISOString().slice(0, 10)})`,
  "",
  `node-pty ${src.commit}, mocha ${MOCHA}, \`tools/node_pty_suite.mjs ${process.argv.slice(2).join(" ")}\`, ` +
  `${opts.runs} run(s); ${runtimes.map((r) => `${r} ${runtimeVersion(r)}`).join(", ")}; native workers; load ` +
  `average (1 min) ${loadBefore} before, ${loadavg()[0].toFixed(1)} after`,
  "",
  "Counts are tests (a Windows file's row stands for all its tests).",
  "",
  "| runtime | passed (every run) | passed in some runs | failed | failed (difference) | excluded |",
  "|---|---|---|---|---|---|",
  ...runtimes.map((runtime) => {
    const c = counts[runtime];
    return `| ${runtime} | ${c.passed} | ${c.flaky} | ${c.failed} | ${c.difference} | ${c.excluded} |`;
  }),
  "",
  `| file | test | ${runtimes.join(" | ")} | reason |`,
  `|---|---|${runtimes.map(() => "---|").join("")}---|`,
  ...rows.map((row) => {
    const reason = row.note ?? EXCLUDED[row.title] ?? DIFFERENCES[row.title] ?? NOTES[row.title] ?? "";
    const cells = runtimes.map((runtime) => cell(runtime, row).text);
    const escape = (text) => text.replaceAll("|", "\\|"); // a table cell's own bars
    return `| ${row.file} | ${escape(row.title)} | ${cells.join(" | ")} | ${escape(reason)} |`;
  }),
];
const failures = runtimes.flatMap((runtime) =>
  byRuntime[runtime].flatMap((results, i) =>
    [...results.values()].filter((test) => test.state === "failed" && !DIFFERENCES[test.title])
      .map((test) => `- ${runtime}, run ${i + 1}: ${test.title}: ${test.error.split("\n")[0]}`)
  )
);
if (failures.length > 0) lines.push("", "Failures:", "", ...failures);
console.log(`\n${lines.join("\n")}`);
mkdirSync(dirname(opts.out), { recursive: true });
writeFileSync(opts.out, lines.join("\n") + "\n");
console.log(`\nWrote ${opts.out}`);
process.exit(failures.length > 0 ? 1 : 0);

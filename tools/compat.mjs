// `npm run compat`: Node's own child_process tests against the drop-in. Each test/parallel/test-child-process-*.js
// of a Node `test/` folder runs on Node 24 (node_modules/.bin/node) twice: plain, then with `child_process`
// redirected to dist/node.js by a preload (tools/compat_redirect.mjs). Prints per-file results for both modes,
// the totals, and the files that pass natively but fail with the drop-in; writes the summary to
// bench/results/latest.compat.md (or --out). Not part of `npm test`: it needs Node's test files, which stay out
// of the repository (in .cache/compat/, gitignored).
//
//   npm run compat -- --node-tests <node>/test       a test/ folder: test/common, test/fixtures, test/parallel
//   npm run compat -- --from-git <git dir or URL> [--ref <rev>]
//                                                     extracts those folders from a git repository whose tree
//                                                     holds test/ (a clone of nodejs/node, or denoland/node_test,
//                                                     a copy of Node's test/ per release) into .cache/compat/;
//                                                     only a URL needs the network (a blobless clone)
//   --runs N (default 1)  --jobs N (default 2)  --timeout S (default 60, per file and mode)
//   --filter TEXT (only files whose name contains it)  --out FILE
//   npm run compat -- --client tinyexec|execa|zx [--from-git <git dir or URL>] [--ref <rev>] [--runs N]
//                     [--log PREFIX] [--no-build]
//                                                     a client library's own test suite instead, plain and with the
//                                                     preload: its source from git at the release pinned in CLIENTS
//                                                     (default: its GitHub URL, which needs the network), its dev
//                                                     dependencies from npm (network), built as the library builds
//                                                     itself; the suite runs with the runner it uses (node:test for
//                                                     tinyexec and zx, ava for execa), whose summary gives the counts.
//                                                     --log writes each mode's whole output to PREFIX.<mode>.txt;
//                                                     --no-build runs on dist/ as it is (another run is using it).
//                                                     execa's suite takes about 15 min per mode here, zx's 3 to 5.
//                                                     Some of their tests need the network (zx: npm and JSR
//                                                     registries, fetch; execa: get-node) and fail without it, in
//                                                     both modes.
//
// Getting a test/ folder: `git clone --depth 1 --branch v24.12.0 https://github.com/nodejs/node` (large), or
// `git clone https://github.com/denoland/node_test` and pick the commit "Track Node.js 24.x".
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join, resolve } from "node:path";
import { parseArgs, stripVTControlCharacters } from "node:util";
import { runGrouped } from "./_run_grouped.mjs";
import { bin, buildDist, root } from "../support/setup.mjs";

const { values: opts } = parseArgs({
  options: {
    "node-tests": { type: "string" },
    "from-git": { type: "string" },
    ref: { type: "string" },
    runs: { type: "string", default: "1" },
    jobs: { type: "string", default: "2" },
    timeout: { type: "string", default: "60" },
    filter: { type: "string", default: "" },
    out: { type: "string", default: join(root, "bench", "results", "latest.compat.md") },
    client: { type: "string" },
    log: { type: "string" },
    "no-build": { type: "boolean", default: false },
  },
});
const cache = join(root, ".cache", "compat");
const node = join(bin, "node");

/** The test/ folder to run: given, or extracted from a git repository into the cache. */
function testsFolder() {
  if (opts["node-tests"]) return resolve(opts["node-tests"]);
  if (!opts["from-git"]) {
    const cached = existsSync(cache) &&
      readdirSync(cache, { withFileTypes: true }).find((entry) => entry.name.startsWith("node-tests-"));
    if (cached) return join(cache, cached.name, "test");
    console.error("Give --node-tests <node>/test or --from-git <repository> (see the top of tools/compat.mjs)");
    process.exit(2);
  }
  const gitDir = gitDirOf(opts["from-git"]);
  const commit = git(gitDir, ["rev-parse", `${opts.ref ?? "HEAD"}^{commit}`]).trim();
  const dir = join(cache, `node-tests-${commit.slice(0, 12)}`);
  if (!existsSync(join(dir, "test", "common"))) extract(gitDir, commit, dir);
  return join(dir, "test");
}

/** A local git directory (or a work tree's), or a blobless bare clone of a URL in the cache (network). */
function gitDirOf(source) {
  const local = resolve(source);
  if (existsSync(local)) return existsSync(join(local, ".git")) ? join(local, ".git") : local;
  const gitDir = join(cache, `${basename(source).replace(/\.git$/, "")}.git`);
  if (!existsSync(gitDir)) {
    console.log(`Fetching ${source} (network) into ${gitDir}`);
    mkdirSync(cache, { recursive: true });
    git(null, ["clone", "--bare", "--filter=blob:none", source, gitDir]);
  }
  return gitDir;
}

function git(gitDir, args, input) {
  const result = spawnSync("git", gitDir ? [`--git-dir=${gitDir}`, ...args] : args, {
    input,
    encoding: input === undefined ? "utf8" : "buffer",
    maxBuffer: 1 << 30,
    stdio: [input === undefined ? "ignore" : "pipe", "pipe", "inherit"],
  });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")} exited with ${result.status}`);
  return result.stdout;
}

/**
 * Writes test/common, test/fixtures and the child_process tests of `commit` under `dir`, file by file (a
 * partial mirror may lack a few large fixture blobs, which `git archive` would stop at: those are skipped and
 * counted).
 */
function extract(gitDir, commit, dir) {
  const listing = git(gitDir, ["ls-tree", "-r", "-z", commit, "test/common", "test/fixtures", "test/parallel"]);
  const files = listing.split("\0").filter(Boolean).map((line) => {
    const [meta, path] = line.split("\t");
    const [mode, type, object] = meta.split(" ");
    return { mode, type, object, path };
  }).filter((f) =>
    f.type === "blob" && (!f.path.startsWith("test/parallel/") || /\/test-child-process-[^/]*$/.test(f.path))
  );
  const batch = git(gitDir, ["cat-file", "--batch"], Buffer.from(files.map((f) => f.object).join("\n") + "\n"));
  rmSync(dir, { recursive: true, force: true });
  let at = 0;
  let missing = 0;
  for (const file of files) {
    const eol = batch.indexOf(10, at);
    const header = batch.subarray(at, eol).toString();
    at = eol + 1;
    if (header.endsWith(" missing")) {
      missing++;
      continue;
    }
    const size = Number(header.split(" ")[2]);
    const target = join(dir, file.path);
    mkdirSync(join(target, ".."), { recursive: true });
    // Symlinks among the fixtures are written as the files they name nothing of; tests here do not use them.
    writeFileSync(target, batch.subarray(at, at + size), { mode: file.mode === "100755" ? 0o755 : 0o644 });
    at += size + 1;
  }
  // Node's tests are CommonJS; without this, the project's own package.json ("type": "module") would apply.
  writeFileSync(join(dir, "package.json"), '{ "type": "commonjs" }\n');
  console.log(
    `Extracted ${files.length - missing} files of ${commit.slice(0, 12)} into ${dir}` +
      (missing ? ` (${missing} blobs missing from the repository, skipped)` : ""),
  );
}

/** The flags a test asks for in its `// Flags:` comment, as Node's tools/test.py passes them. */
function flagsOf(file) {
  const match = readFileSync(file, "utf8").match(/^\/\/ Flags: (.*)$/m);
  return match ? match[1].trim().split(/\s+/) : [];
}

/** Runs one file in one mode; resolves to { ok, ms, output }. */
async function runOne(testDir, name, mode, slot) {
  const file = join(testDir, "parallel", name);
  const args = [...flagsOf(file)];
  if (mode === "drop-in") args.unshift("--import", join(root, "tools", "compat_redirect.mjs"));
  const started = Date.now();
  const marker = join(markers, `${mode}-${slot}`);
  rmSync(marker, { force: true });
  const { code, signal, output, timedOut } = await runGrouped(node, [...args, file], {
    cwd: join(testDir, ".."),
    // Each parallel slot gets its own test/.tmp.<id> (test/common/tmpdir reads TEST_THREAD_ID).
    env: {
      ...process.env,
      TEST_THREAD_ID: `${mode === "drop-in" ? "d" : "n"}${slot}`,
      NODE_OPTIONS: "",
      SPAWNPOOL_COMPAT_USED: marker,
    },
    timeout: Number(opts.timeout),
    keepChars: 4000,
  });
  const why = timedOut ? `timeout after ${opts.timeout} s` : signal ? `signal ${signal}` : `exit ${code}`;
  return { ok: code === 0 && !timedOut, why, ms: Date.now() - started, output, pooled: existsSync(marker) };
}

async function runAll(testDir, names) {
  const jobs = [];
  for (const name of names) for (const mode of ["native", "drop-in"]) jobs.push({ name, mode });
  const results = new Map(names.map((name) => [name, {}]));
  let next = 0;
  const slots = Array.from({ length: Number(opts.jobs) }, async (_, slot) => {
    while (next < jobs.length) {
      const job = jobs[next++];
      results.get(job.name)[job.mode] = await runOne(testDir, job.name, job.mode, slot);
    }
  });
  await Promise.all(slots);
  return results;
}

/**
 * How a client's test runner reports: the counts and the names of the failing tests, read from its output.
 * `node:test`: the spec reporter's summary (`ℹ pass N`, `✖ failing tests:`). `ava`: its TAP reporter (`--tap`).
 */
const RUNNERS = {
  "node:test": (output) => {
    const count = (what) => Number(output.match(new RegExp(`^ℹ ${what} (\\d+)`, "m"))?.[1] ?? NaN);
    const failing = output.split("✖ failing tests:")[1] ?? "";
    const failed = [...failing.matchAll(/^\s*✖ (.+?) \([\d.]+ms\)$/gm)].map((m) => m[1]);
    const passed = [...output.matchAll(/^\s*✔ (.+?) \([\d.]+ms\)$/gm)].map((m) => m[1]);
    return { tests: count("tests"), pass: count("pass"), fail: count("fail"), failed, passed };
  },
  ava: (output) => {
    const count = (what) => Number(output.match(new RegExp(`^# ${what} (\\d+)`, "m"))?.[1] ?? NaN);
    const failed = [...output.matchAll(/^not ok \d+ - (.+?)(?: # .*)?$/gm)].map((m) => m[1]);
    const passed = [...output.matchAll(/^ok \d+ - (.+?)(?: # .*)?$/gm)].map((m) => m[1]);
    return { tests: count("tests"), pass: count("pass"), fail: count("fail"), failed, passed };
  },
};

/** Why a test is left out of the counts: what a pool cannot give (bench/README.md#compatibility has each case). */
const PID_IN_CALL_TURN = "pid read in the turn of the call: a pooled command has one once its worker spawned it";
const NOT_A_POOL = {
  syncBuiltin: "module.syncBuiltinESMExports() after replacing an export: reaches Node's builtins only",
  internals: "Node's internal ChildProcess patched under --expose-internals: pooled children do not go through it",
  handle: "a child's stdout given to another child as its fd, checked through child.stdout._handle: no libuv handle",
  order: "two commands started in one turn, the first one's output expected first: a race that Node wins by " +
    "forking the first before starting the second, and loses now and then too (bench/output_order.ts)",
};

/**
 * Node's own files left out, each with its reason; the runner still runs and reports them.
 */
const NODE_EXCLUDED = {
  "test-child-process-cwd.js": PID_IN_CALL_TURN,
  "test-child-process-exec-error.js": PID_IN_CALL_TURN,
  "test-child-process-constructor.js": `${PID_IN_CALL_TURN}; and new ChildProcess() with its internal spawn(options)`,
  "test-child-process-bad-stdio.js": NOT_A_POOL.internals,
  "test-child-process-windows-hide.js": NOT_A_POOL.internals,
  "test-child-process-exec-kill-throws.js": NOT_A_POOL.internals,
  "test-child-process-pipe-dataflow.js": NOT_A_POOL.handle,
};

/**
 * Client libraries whose own suites run the same way: where their source is (`ref`: the pinned release), dev
 * dependencies pinned to another version than their package.json asks (`pin`), how to build them, their test
 * command as `node` arguments with the runner that reads its output, and the tests left out of the counts
 * (`excluded`: the name the runner reports, and why).
 */
const CLIENTS = {
  tinyexec: {
    url: "https://github.com/tinylibs/tinyexec",
    build: [["npx", "tsc"]],
    runner: "node:test",
    test: ["--test", "lib/test/*.js"],
  },
  // execa's `npm run unit` is `c8 --merge-async ava`: the same ava run, without the coverage. Its suite fails any
  // file that emits a process warning, so the drop-in's SPAWNPOOL_NATIVE_FALLBACK warning is muted (by the preload).
  execa: {
    url: "https://github.com/sindresorhus/execa",
    ref: "v10.0.1",
    // ava 8.0.2 and later need a cbor2 that the npm registry reached here does not have.
    pin: { ava: "8.0.1" },
    build: [],
    runner: "ava",
    test: ["node_modules/ava/entrypoints/cli.js", "--tap"],
    env: { SPAWNPOOL_COMPAT_MUTE_FALLBACK: "1" },
    excluded: {
      "methods › main-async › execa() returns a promise with pid": PID_IN_CALL_TURN,
      "resolve › exit › error.signal is SIGINT": PID_IN_CALL_TURN,
      "resolve › exit › error.signalDescription is defined": PID_IN_CALL_TURN,
      "resolve › exit › error.signal is SIGTERM": PID_IN_CALL_TURN,
      "resolve › exit › exitCode is undefined on signal termination": PID_IN_CALL_TURN,
      "return › result › error.isTerminated is true if subprocess was killed indirectly": PID_IN_CALL_TURN,
      "terminate › kill-descendants › taskkill fallback uses direct subprocess kill when taskkill cannot be spawned":
        NOT_A_POOL.syncBuiltin,
    },
  },
  // zx's `npm run test:unit`, on its build (`npm run build`: esbuild bundles and tsc declarations), with the
  // FORCE_COLOR its CI sets (its log tests expect colours).
  zx: {
    url: "https://github.com/google/zx",
    ref: "8.8.5",
    build: [["npm", "run", "build"]],
    runner: "node:test",
    // --test-force-exit: a command the suite fails to kill with the drop-in (its pid is not known yet) would keep
    // the run from ending after its last test.
    test: ["--experimental-transform-types", "--test-force-exit", "test/all.test.js"],
    env: { FORCE_COLOR: "3", NO_COLOR: undefined },
    excluded: {
      "getters": PID_IN_CALL_TURN,
      "rejected piping": PID_IN_CALL_TURN,
      "propagates rejection": PID_IN_CALL_TURN,
      "disables piping": NOT_A_POOL.order,
    },
  },
};

/** A client's source at its pinned ref (or `--ref`), extracted into the cache, its dev dependencies installed, built. */
function prepareClient(name) {
  const client = CLIENTS[name];
  if (!client) throw new Error(`Unknown client ${name}; known: ${Object.keys(CLIENTS).join(", ")}`);
  const gitDir = gitDirOf(opts["from-git"] ?? client.url);
  const commit = git(gitDir, ["rev-parse", `${opts.ref ?? client.ref ?? "HEAD"}^{commit}`]).trim();
  const dir = join(cache, `${name}-${commit.slice(0, 12)}`);
  if (!existsSync(join(dir, ".built"))) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    const untar = spawnSync("tar", ["-x", "-C", dir], { input: git(gitDir, ["archive", commit], "") });
    if (untar.status !== 0) throw new Error(`tar exited with ${untar.status}`);
    if (client.pin) {
      const manifest = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      Object.assign(manifest.devDependencies, client.pin);
      writeFileSync(join(dir, "package.json"), JSON.stringify(manifest, null, 2) + "\n");
    }
    console.log(`Installing ${name}'s dev dependencies from npm (network) in ${dir}`);
    const env = { ...process.env, PATH: `${bin}:${process.env.PATH}` };
    for (const [cmd, ...args] of [["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"], ...client.build]) {
      const step = spawnSync(cmd, args, { cwd: dir, env, stdio: "inherit" });
      if (step.status !== 0) throw new Error(`${cmd} ${args.join(" ")} exited with ${step.status}`);
    }
    writeFileSync(join(dir, ".built"), "");
  }
  return { dir, commit, client };
}

/** Runs a client's suite in one mode; the counts and failing test names, as its runner reports them. */
function runClient({ dir, client }, mode) {
  const args = mode === "drop-in" ? ["--import", join(root, "tools", "compat_redirect.mjs")] : [];
  const result = spawnSync(node, [...args, ...client.test], {
    cwd: dir,
    env: { ...process.env, NO_COLOR: "1", NODE_OPTIONS: "", ...client.env },
    encoding: "utf8",
    maxBuffer: 1 << 28,
    timeout: 60 * 60_000,
    killSignal: "SIGKILL",
  });
  // Without colours (a client's env may force them on, for its runner's reporter too).
  const output = stripVTControlCharacters(`${result.stdout}${result.stderr}`);
  if (opts.log) writeFileSync(`${opts.log}.${mode}.txt`, output);
  return RUNNERS[client.runner](output);
}

function compareClient(name) {
  const prepared = prepareClient(name);
  const excluded = prepared.client.excluded ?? {};
  const lines = [
    `# ${name}'s own test suite against the drop-in (${new Date().toISOString().slice(0, 10)})`,
    "",
    `\`npm run compat -- ${process.argv.slice(2).join(" ")}\`: ${name} ${opts.ref ?? prepared.client.ref ?? ""} at ` +
    `${prepared.commit.slice(0, 12)}, ` +
    `\`node ${prepared.client.test.join(" ")}\`, plain and with the preload.`,
    "",
    "Excluded from the last column (the runner still runs them):",
    "",
    ...(Object.keys(excluded).length === 0
      ? ["none"]
      : Object.entries(excluded).map(([test, why]) => `- ${test}: ${why}`)),
    "",
    "| run | native pass/tests | drop-in pass/tests | fail with the drop-in only | " +
    "passing natively and not excluded: drop-in passes |",
    "|---|---|---|---|---|",
  ];
  for (let run = 1; run <= Number(opts.runs); run++) {
    const native = runClient(prepared, "native");
    const dropIn = runClient(prepared, "drop-in");
    const only = dropIn.failed.filter((test) => !native.failed.includes(test));
    // The tests that pass natively, less the excluded ones among them (as the runner reported them: a name that did not
    // run is not subtracted); of those, the ones that fail with the drop-in.
    const applicable = native.pass - Object.keys(excluded).filter((test) => native.passed.includes(test)).length;
    const lost = only.filter((test) => !(test in excluded)).length;
    const row = `| ${run} | ${native.pass}/${native.tests} | ${dropIn.pass}/${dropIn.tests} | ${
      only.map((test) => test in excluded ? `${test} (excluded)` : test).join("; ") || "none"
    } | ${applicable - lost} of ${applicable} |`;
    console.log(row);
    lines.push(row);
  }
  mkdirSync(join(opts.out, ".."), { recursive: true });
  writeFileSync(opts.out, lines.join("\n") + "\n");
  console.log(`Wrote ${opts.out}`);
}

if (!opts["no-build"]) buildDist();
if (opts.client) {
  compareClient(opts.client);
  process.exit(0);
}
/** Where the preload notes that a test ran commands through the pool (see tools/compat_redirect.mjs). */
const markers = mkdtempSync(join(tmpdir(), "spawnpool-compat-"));
process.on("exit", () => rmSync(markers, { recursive: true, force: true }));
const testDir = testsFolder();
const names = readdirSync(join(testDir, "parallel"))
  .filter((name) => /^test-child-process-.*\.(js|mjs|cjs)$/.test(name) && name.includes(opts.filter)).sort();
console.log(`${names.length} files from ${testDir}, Node ${spawnSync(node, ["--version"]).stdout.toString().trim()}`);
const runs = [];
for (let run = 1; run <= Number(opts.runs); run++) {
  const started = Date.now();
  const results = await runAll(testDir, names);
  runs.push(results);
  console.log(`\n--- run ${run} (${Math.round((Date.now() - started) / 1000)} s)`);
  for (const [name, r] of results) {
    const used = r["drop-in"].pooled ? "pool" : "    ";
    console.log(`${r.native.ok ? "pass" : "FAIL"} ${r["drop-in"].ok ? "pass" : "FAIL"} ${used}  ${name}`);
  }
  const count = (mode) => [...results.values()].filter((r) => r[mode].ok).length;
  const lost = [...results].filter(([, r]) => r.native.ok && !r["drop-in"].ok).map(([name]) => name);
  console.log(
    `run ${run}: native ${count("native")}/${names.length}, drop-in ${count("drop-in")}/${names.length}, ` +
      `pass natively but fail with the drop-in: ${lost.length}`,
  );
  for (const name of lost) {
    const why = results.get(name)["drop-in"];
    const last = why.output.trim().split("\n").filter((line) => /Error|assert|expected|!==|Received/i.test(line));
    console.log(`  ${name}: ${why.why}; ${last.slice(0, 2).join(" | ").slice(0, 300)}`);
  }
}

// Summary: per run, counts; per file, how many runs passed in each mode.
const lines = [
  `# Node's own child_process tests against the drop-in (${new Date().toISOString().slice(0, 10)})`,
  "",
  `\`npm run compat -- ${process.argv.slice(2).join(" ")}\`: ${names.length} files from \`${testDir}\`, ` +
  `Node ${spawnSync(node, ["--version"]).stdout.toString().trim()}, ${opts.jobs} at a time, ${opts.timeout} s timeout.`,
  "",
  "`pool`: the file ran commands through the pool (the others use only what the drop-in re-exports, such as",
  "`fork` and the sync APIs, or fail before spawning).",
  "",
  "Excluded from the last column (the runner still runs them):",
  "",
  ...Object.entries(NODE_EXCLUDED).map(([name, why]) => `- ${name}: ${why}`),
  "",
  "| run | native passes | drop-in passes | drop-in passes among native passes | of those using the pool | " +
  "pass natively, fail with the drop-in | passing natively and not excluded: drop-in passes |",
  "|---|---|---|---|---|---|---|",
];
runs.forEach((results, i) => {
  const all = [...results.values()];
  const native = all.filter((r) => r.native.ok);
  const both = native.filter((r) => r["drop-in"].ok).length;
  const pooled = native.filter((r) => r["drop-in"].pooled);
  const pooledBoth = pooled.filter((r) => r["drop-in"].ok).length;
  const applicable = [...results].filter(([name, r]) => r.native.ok && !(name in NODE_EXCLUDED)).map(([, r]) => r);
  lines.push(
    `| ${i + 1} | ${native.length} | ${all.filter((r) => r["drop-in"].ok).length} | ${both}/${native.length} ` +
      `(${(100 * both / native.length).toFixed(1)} %) | ${pooledBoth}/${pooled.length} | ${native.length - both} | ` +
      `${applicable.filter((r) => r["drop-in"].ok).length} of ${applicable.length} |`,
  );
});
lines.push("", "Files that failed in some run (runs passed, native / drop-in):", "");
for (const name of names) {
  const nativeRuns = runs.filter((results) => results.get(name).native.ok).length;
  const dropInRuns = runs.filter((results) => results.get(name)["drop-in"].ok).length;
  if (nativeRuns === runs.length && dropInRuns === runs.length) continue;
  const why = runs.map((results) => results.get(name)["drop-in"]).find((r) => !r.ok)?.why ?? "";
  lines.push(
    `- ${name}: ${nativeRuns}/${runs.length} / ${dropInRuns}/${runs.length}${why ? ` (drop-in: ${why})` : ""}`,
  );
}
mkdirSync(join(opts.out, ".."), { recursive: true });
writeFileSync(opts.out, lines.join("\n") + "\n");
console.log(`\n${lines.slice(7 + Object.keys(NODE_EXCLUDED).length + 3).join("\n")}\n\nWrote ${opts.out}`);

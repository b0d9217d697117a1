// `npm run compat:shapes`: the runtimes' own tests of the APIs whose shapes spawnpool copies, run natively and
// with spawnpool's shape swapped in by a preload, test by test:
//
// - Deno's tests/unit/command_test.ts (denoland/deno) on node_modules/.bin/deno: `deno test -A --no-check`,
//   plain, then with `--preload tools/compat_shapes/deno_preload.ts`, which makes `Deno.Command` spawnpool's
//   `Command` (mod.ts). Each test runs in its own `deno test --filter` process in both modes, so an
//   uncaught error (a rejection nobody handles) fails the test that caused it, not every test after it;
//   the native processes preload tools/compat_shapes/deno_native_preload.ts, which only loads Deno's
//   process extension as the file's earlier tests would have (see there).
//   The file imports "./test_util.ts", which re-exports `@std/assert` (JSR, unreachable here): its
//   stand-in, tools/compat_shapes/test_util.ts, is copied next to the cached test file.
// - Bun's test/js/bun/spawn/spawn.test.ts (oven-sh/bun) on node_modules/.bin/bun: `bun test`, plain, then
//   with `--preload tools/compat_shapes/bun_preload.ts`, which makes `Bun.spawn` (and so `import { spawn }
//   from "bun"`) spawnpool's `spawn`; `Bun.spawnSync` stays native. The whole file runs in one process per
//   mode. It imports "harness" (Bun's test/harness.ts): its stand-in, tools/compat_shapes/harness.ts, is
//   installed as node_modules/harness next to the cached test file, with the fixture files the test names
//   (`join(import.meta.dir, "...")`, e.g. does-not-hang.js).
//
// Left out of the counts (the tests still run), each listed with its count in the summary:
// - Deno: tests that call `outputSync()` (spawnpool's throws by design: a pool cannot run a command
//   synchronously), and tests that never construct `Deno.Command` (Deno.spawn, Deno.spawnAndWait[Sync]:
//   other APIs, which the swap does not touch).
// - Bun: tests that call `spawnSync` and never `spawn` (Bun.spawnSync stays native).
// - Tests the runtime skips here (ignore / skip / skipIf for this OS) and tests that fail natively.
// A test's permissions (`Deno.test({ permissions })`) are applied by `deno test` as usual, under -A: the
// one with `run: false` checks that the shape honours the permission; the pool is started by the preload,
// before any test narrows the permissions, as a program's pool starts with the program's own.
//
// After each suite's runs, processes still running in its cache folder (what the tests left behind outside
// their process group, which the runner kills) are killed by pid and reported: with the swap, a command's
// descendants live in the process group the pool gave that command, not in the test run's.
//
// Prints per-test results for both modes, the totals, and the tests that pass natively but fail swapped
// with the first line of their error; writes the summary to bench/results/latest.compat-shapes.md (or
// --out). Not part of `npm test`: the upstream files stay out of the repository, in .cache/compat/shapes/
// (gitignored).
//
//   npm run compat:shapes -- --deno-test <path>/command_test.ts --bun-test <path>/spawn.test.ts
//                                       copies the upstream files into the cache (a Bun test's fixture
//                                       files are taken from the same folder); later runs reuse the cache
//   --deno-git <git dir> [--deno-ref <rev>]   the same from a clone of denoland/deno (default rev HEAD)
//   --bun-git <git dir> [--bun-ref <rev>]     the same from a clone of oven-sh/bun
//   --suite deno|bun|all (default all)  --runs N (default 1)  --jobs N (Deno test processes at a time,
//   default 2)  --timeout S (per Deno test process, default 120; a Bun file run gets 15 times that)
//   --filter TEXT (only tests whose name contains it)  --out FILE
//   SPAWNPOOL_COMPAT_MOD=<absolute path of another checkout's mod.ts> measures that checkout's library.
//
// Getting the upstream files (this repository never holds them). Measured so far: denoland/deno at tag
// v2.9.5 (the release before the pinned deno 2.9.6) and oven-sh/bun at 7a5293cef99b (June 2026, 1.4.0
// development; the pinned bun is 1.4.5):
//   https://raw.githubusercontent.com/denoland/deno/v2.9.5/tests/unit/command_test.ts
//   https://raw.githubusercontent.com/oven-sh/bun/<rev>/test/js/bun/spawn/spawn.test.ts and, next to it,
//   .../test/js/bun/spawn/does-not-hang.js; or a clone at a tag (`git clone --depth 1 --branch v2.9.5
//   https://github.com/denoland/deno`, `git clone --depth 1 https://github.com/oven-sh/bun`) given to
//   --deno-git / --bun-git.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { runGrouped } from "./_run_grouped.mjs";
import { bin, ensureInstalled, root } from "../support/setup.mjs";

const { values: opts } = parseArgs({
  options: {
    "deno-test": { type: "string" },
    "bun-test": { type: "string" },
    "deno-git": { type: "string" },
    "deno-ref": { type: "string", default: "HEAD" },
    "bun-git": { type: "string" },
    "bun-ref": { type: "string", default: "HEAD" },
    suite: { type: "string", default: "all" },
    runs: { type: "string", default: "1" },
    jobs: { type: "string", default: "2" },
    timeout: { type: "string", default: "120" },
    filter: { type: "string", default: "" },
    out: { type: "string", default: join(root, "bench", "results", "latest.compat-shapes.md") },
  },
});
const cache = join(root, ".cache", "compat", "shapes");
const standIns = join(root, "tools", "compat_shapes");
const deno = join(bin, "deno");
const bun = join(bin, "bun");
const SUITES = {
  deno: { title: "Deno's tests/unit/command_test.ts", file: "command_test.ts", upstream: "tests/unit/command_test.ts" },
  bun: {
    title: "Bun's test/js/bun/spawn/spawn.test.ts",
    file: "spawn.test.ts",
    upstream: "test/js/bun/spawn/spawn.test.ts",
  },
};

// --- Sources ---------------------------------------------------------------------------------------------

function git(gitDir, args) {
  const result = spawnSync("git", [`--git-dir=${gitDir}`, ...args], { maxBuffer: 1 << 28 });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")}: ${result.stderr.toString().trim()}`);
  return result.stdout;
}

function gitDirOf(path) {
  const dir = resolve(path);
  return existsSync(join(dir, ".git")) ? join(dir, ".git") : dir;
}

/** Fixture files a Bun test names next to itself: `join(import.meta.dir, "name")`. */
function siblingsNamed(source) {
  return [...source.matchAll(/join\(\s*import\.meta\.dir\s*,\s*["']([^"'/]+)["']\s*\)/g)].map((m) => m[1]);
}

/**
 * Fills .cache/compat/shapes/<suite>/ from a file or a git repository (when given), then writes the
 * stand-ins; returns the path of the cached test file, or undefined when there is none.
 */
function prepare(suite) {
  const { file, upstream } = SUITES[suite];
  const dir = join(cache, suite);
  const target = join(dir, file);
  const fromFile = opts[`${suite}-test`];
  const fromGit = opts[`${suite}-git`];
  if (fromFile || fromGit) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    let origin;
    let read;
    if (fromFile) {
      const path = resolve(fromFile);
      origin = { from: path };
      read = (name) => {
        const sibling = join(dirname(path), name);
        return existsSync(sibling) ? readFileSync(sibling) : undefined;
      };
      writeFileSync(target, readFileSync(path));
    } else {
      const gitDir = gitDirOf(fromGit);
      const commit = git(gitDir, ["rev-parse", `${opts[`${suite}-ref`]}^{commit}`]).toString().trim();
      origin = { from: resolve(fromGit), ref: opts[`${suite}-ref`], commit };
      read = (name) => {
        try {
          return git(gitDir, ["show", `${commit}:${dirname(upstream)}/${name}`]);
        } catch {
          return undefined;
        }
      };
      writeFileSync(target, git(gitDir, ["show", `${commit}:${upstream}`]));
    }
    const source = readFileSync(target, "utf8");
    origin.sha256 = createHash("sha256").update(source).digest("hex");
    if (suite === "bun") {
      origin.fixtures = {};
      for (const name of siblingsNamed(source)) {
        const bytes = read(name);
        if (bytes) writeFileSync(join(dir, name), bytes);
        origin.fixtures[name] = bytes ? "copied" : "missing";
      }
    }
    writeFileSync(join(dir, "SOURCE.json"), JSON.stringify(origin, null, 2) + "\n");
  }
  if (!existsSync(target)) return undefined;
  // The stand-ins, fresh on every run (they are this repository's code).
  if (suite === "deno") copyFileSync(join(standIns, "test_util.ts"), join(dir, "test_util.ts"));
  else {
    const harness = join(dir, "node_modules", "harness");
    mkdirSync(harness, { recursive: true });
    copyFileSync(join(standIns, "harness.ts"), join(harness, "index.ts"));
    writeFileSync(join(harness, "package.json"), '{ "name": "harness", "type": "module", "main": "index.ts" }\n');
  }
  return target;
}

function sourceNote(suite) {
  const path = join(cache, suite, "SOURCE.json");
  if (!existsSync(path)) return "";
  const origin = JSON.parse(readFileSync(path, "utf8"));
  const where = origin.commit ? `${origin.from} at ${origin.ref} (${origin.commit})` : origin.from;
  return `${where}, sha256 ${origin.sha256.slice(0, 16)}`;
}

// --- Reading the test files -------------------------------------------------------------------------------

/**
 * The source with the contents of strings, template literals (but not their `${}` expressions), comments
 * and regular expression literals blanked out, offsets and line breaks kept: code to search and to match
 * brackets in, where code inside a string (a fixture a child process runs) does not count.
 */
function codeOnly(src) {
  const out = src.split("");
  const blank = (from, to) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  const templates = []; // brace depth at which each open `${` returns to its template
  let depth = 0;
  let last = ""; // the last significant code character, to tell a regex from a division
  let i = 0;
  const template = () => {
    // at the first character inside a template literal; stops after its closing ` or at a `${`
    const start = i;
    while (i < src.length) {
      if (src[i] === "\\") i += 2;
      else if (src[i] === "`") {
        blank(start, i);
        i++;
        last = "`";
        return;
      } else if (src[i] === "$" && src[i + 1] === "{") {
        blank(start, i);
        i += 2;
        templates.push(depth);
        depth++;
        last = "{";
        return;
      } else i++;
    }
  };
  while (i < src.length) {
    const c = src[i];
    if (c === "/" && src[i + 1] === "/") {
      const end = src.indexOf("\n", i);
      blank(i, end < 0 ? src.length : end);
      i = end < 0 ? src.length : end;
    } else if (c === "/" && src[i + 1] === "*") {
      const end = src.indexOf("*/", i + 2) + 2;
      blank(i, end);
      i = end;
    } else if (c === '"' || c === "'") {
      const start = i++;
      while (i < src.length && src[i] !== c && src[i] !== "\n") i += src[i] === "\\" ? 2 : 1;
      blank(start + 1, i);
      i++;
      last = c;
    } else if (c === "`") {
      i++;
      template();
    } else if (c === "/" && (last === "" || "(,=:[!&|?{};+-*%<>~^".includes(last))) {
      const start = i++;
      let inClass = false;
      while (i < src.length && src[i] !== "\n" && (inClass || src[i] !== "/")) {
        if (src[i] === "\\") i++;
        else if (src[i] === "[") inClass = true;
        else if (src[i] === "]") inClass = false;
        i++;
      }
      blank(start + 1, i);
      i++;
      last = "/";
    } else {
      if (c === "{") depth++;
      else if (c === "}") {
        depth--;
        if (templates.length > 0 && templates[templates.length - 1] === depth) {
          templates.pop();
          i++;
          template();
          continue;
        }
      }
      if (!/\s/.test(c)) last = c;
      i++;
    }
  }
  return out.join("");
}

/** The offset of the bracket closing the one at `open`, in code from codeOnly(). */
function closing(code, open) {
  let depth = 0;
  for (let i = open; i < code.length; i++) {
    if ("([{".includes(code[i])) depth++;
    else if (")]}".includes(code[i]) && --depth === 0) return i;
  }
  return code.length;
}

const lineAt = (src, offset) => src.slice(0, offset).split("\n").length;

/** Each test call of the file: its line, its source, its code (codeOnly) and the name given literally. */
function testCalls(src, suite) {
  const code = codeOnly(src);
  const pattern = suite === "deno"
    ? /\bDeno\.test\s*\(/g
    : /(?<![\w$.])(?:it|test)(?:\.\w+(?:\((?:[^()]|\([^()]*\))*\))?)*\s*\(/g;
  const calls = [];
  for (const match of code.matchAll(pattern)) {
    const open = match.index + match[0].length - 1;
    const close = closing(code, open);
    const body = code.slice(open, close + 1);
    const text = src.slice(open, close + 1);
    const literal = text.match(/^\(\s*(["'])((?:\\.|(?!\1).)*)\1/);
    const named = body.match(/\bfunction\s+([\w$]+)\s*\(/);
    calls.push({
      line: lineAt(src, match.index),
      name: literal ? literal[2] : named ? named[1] : undefined,
      body,
    });
  }
  return calls;
}

/** The test call a reported line belongs to: the last one starting at or before it. */
function callAt(calls, line) {
  let found;
  for (const call of calls) if (call.line <= line) found = call;
  return found;
}

function exclusionOf(suite, call) {
  if (!call) return undefined;
  if (suite === "deno") {
    if (/\.outputSync\s*\(/.test(call.body)) return "calls outputSync() (spawnpool's throws by design)";
    if (!/\bDeno\.Command\b/.test(call.body)) {
      return "never constructs Deno.Command (Deno.spawn / Deno.spawnAndWait[Sync], untouched by the swap)";
    }
    return undefined;
  }
  if (/\bspawnSync\s*\(/.test(call.body) && !/(?<![\w$])spawn\s*\(/.test(call.body)) {
    return "calls spawnSync only (Bun.spawnSync stays native)";
  }
  return undefined;
}

// --- JUnit reports ------------------------------------------------------------------------------------------

const unescapeXml = (s) =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'")
    .replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replace(/&amp;/g, "&");

const attr = (tag, name) => {
  const m = tag.match(new RegExp(`\\s${name}="([^"]*)"`));
  return m ? unescapeXml(m[1]) : undefined;
};

/**
 * The testcases of a JUnit report, in order: { name (with the enclosing suites' names, " > " between),
 * line, status "pass" | "fail" | "skip", error (the first line of the failure) }.
 */
function parseJunit(xml) {
  const cases = [];
  const suites = [];
  const tags = /<(\/?)(testsuites|testsuite|testcase|failure|error|skipped)\b([^>]*?)(\/?)>/g;
  let current;
  for (const m of xml.matchAll(tags)) {
    const [, end, tag, attrs, selfClosing] = m;
    if (tag === "testsuite") {
      if (end) suites.pop();
      else if (!selfClosing) suites.push(attr(attrs, "name"));
    } else if (tag === "testcase") {
      if (end) current = undefined;
      else {
        // The outermost testsuite is the file.
        const path = [...suites.slice(1), attr(attrs, "name")];
        current = { name: path.join(" > "), line: Number(attr(attrs, "line")), status: "pass", error: "" };
        cases.push(current);
        if (selfClosing) current = undefined;
      }
    } else if (current && !end && (tag === "failure" || tag === "error")) {
      current.status = "fail";
      const after = xml.slice(m.index + m[0].length);
      const text = selfClosing ? "" : unescapeXml(after.slice(0, after.indexOf(`</${tag}>`)));
      current.error ||= firstLine(text) || attr(attrs, "message") || tag;
      // What a matcher says under its first line ("Expected substring: ...", "Received function did not
      // throw"): up to two more lines, stack frames and source excerpts aside.
      current.detail ??= plain(text).split("\n").slice(1).map((l) => l.trim())
        .filter((l) => l && !/^(at |\^|\d+ \||throw |const |- |\+ Received)/.test(l)).slice(0, 2).join(" / ")
        .slice(0, 160);
    } else if (current && !end && tag === "skipped") current.status = "skip";
  }
  return cases;
}

// deno-lint-ignore no-control-regex
const plain = (s) => s.replace(/\x1b\[[0-9;]*m/g, "");
const firstLine = (s) => plain(s).split("\n").map((l) => l.trim()).find(Boolean) ?? "";

// --- Running ------------------------------------------------------------------------------------------------

/** Runs a command in its own process group; resolves to { code, output, timedOut } (tools/_run_grouped.mjs). */
async function run(command, args, { cwd, timeout, env }) {
  const merged = { ...process.env, NO_COLOR: "1", ...env };
  const { code, output, timedOut } = await runGrouped(command, args, { cwd, env: merged, timeout, keepChars: 200_000 });
  return { code, output: plain(output), timedOut };
}

/**
 * Kills (by pid) the processes still running in a suite's cache folder after a run: what its tests left
 * behind outside their process group. Linux only (/proc); returns how many.
 */
function sweep(dir) {
  if (process.platform !== "linux") return 0;
  let killed = 0;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cwd = readlinkSync(`/proc/${entry}/cwd`).replace(/ \(deleted\)$/, "");
      if (cwd !== dir && !cwd.startsWith(dir + "/")) continue;
      process.kill(Number(entry), "SIGKILL");
      killed++;
    } catch {
      // gone, or not ours to read
    }
  }
  return killed;
}

const escapeRegExp = (s) => s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

/** Deno: one `deno test --filter` process per test name, both modes; results keyed by line. */
async function runDeno(file, calls) {
  const names = [...new Set(calls.map((c) => c.name).filter((n) => n !== undefined && n.includes(opts.filter)))];
  const jobs = names.flatMap((name) => ["native", "swapped"].map((mode) => ({ name, mode })));
  const results = { native: new Map(), swapped: new Map() };
  let next = 0;
  const slot = async (id) => {
    while (next < jobs.length) {
      const { name, mode } = jobs[next++];
      const report = join(cache, "deno", `.report-${id}.xml`);
      rmSync(report, { force: true });
      const args = ["test", "-A", "--no-check", `--junit-path=${report}`, `--filter=/^${escapeRegExp(name)}$/`];
      args.push(`--preload=${join(standIns, mode === "swapped" ? "deno_preload.ts" : "deno_native_preload.ts")}`);
      const outcome = await run(deno, [...args, file], { cwd: dirname(file), timeout: Number(opts.timeout) });
      const cases = existsSync(report) ? parseJunit(readFileSync(report, "utf8")) : [];
      const uncaught = outcome.output.match(/\(uncaught error\)\n(?:error: )?(.*)/);
      for (const c of cases.filter((c) => c.name === name)) {
        // Filtered-out tests are reported skipped too; only this name's cases belong to this run.
        if (c.status === "pass" && (uncaught || outcome.timedOut)) {
          c.status = "fail";
          c.error = outcome.timedOut ? `timeout after ${opts.timeout} s` : `uncaught error: ${uncaught[1]}`;
        }
        results[mode].set(`${c.line}`, { ...c, key: `${c.line}` });
      }
      if (!cases.some((c) => c.name === name)) {
        const why = outcome.timedOut ? `timeout after ${opts.timeout} s` : firstLine(outcome.output.slice(-2000));
        for (const call of calls.filter((c) => c.name === name)) {
          results[mode].set(`${call.line}`, { name, line: call.line, status: "fail", error: why, key: `${call.line}` });
        }
      }
    }
  };
  await Promise.all(Array.from({ length: Number(opts.jobs) }, (_, id) => slot(id)));
  return results;
}

/** Bun: the whole file in one `bun test` process per mode; results keyed by full name (and occurrence). */
async function runBun(file) {
  const results = {};
  for (const mode of ["native", "swapped"]) {
    const report = join(cache, "bun", ".report.xml");
    rmSync(report, { force: true });
    const args = ["test", "--reporter=junit", `--reporter-outfile=${report}`];
    if (opts.filter) args.push("-t", escapeRegExp(opts.filter));
    if (mode === "swapped") args.push(`--preload=${join(standIns, "bun_preload.ts")}`);
    const outcome = await run(bun, [...args, `./${basename(file)}`], {
      cwd: dirname(file),
      timeout: Number(opts.timeout) * 15,
    });
    if (!existsSync(report)) {
      throw new Error(`bun test (${mode}) wrote no report: ${outcome.output.slice(-2000)}`);
    }
    const seen = new Map();
    results[mode] = new Map();
    for (const c of parseJunit(readFileSync(report, "utf8"))) {
      const n = (seen.get(c.name) ?? 0) + 1;
      seen.set(c.name, n);
      const key = n > 1 ? `${c.name} (#${n})` : c.name;
      results[mode].set(key, { ...c, key });
    }
  }
  return results;
}

// --- Summary ------------------------------------------------------------------------------------------------

function label(suite, r, calls) {
  if (suite === "bun") return r.key;
  const twins = calls.filter((c) => c.name === r.name).length;
  return twins > 1 ? `${r.name} (line ${r.line})` : r.name;
}

/** Per run of a suite: the tests with their status in both modes, their exclusion, the counts. */
function tally(suite, results, calls) {
  const rows = [...results.native.values()].map((n) => {
    const s = results.swapped.get(n.key) ?? { status: "missing", error: "not reported with the swap" };
    return {
      label: label(suite, n, calls),
      native: n,
      swapped: s,
      excluded: exclusionOf(suite, callAt(calls, n.line)),
    };
  });
  const ran = rows.filter((r) => r.native.status !== "skip");
  const applicable = ran.filter((r) => !r.excluded);
  const nativePass = applicable.filter((r) => r.native.status === "pass");
  const both = nativePass.filter((r) => r.swapped.status === "pass");
  return {
    rows,
    total: rows.length,
    skipped: rows.length - ran.length,
    excluded: ran.filter((r) => r.excluded),
    applicable: applicable.length,
    nativePass: nativePass.length,
    both: both.length,
    lost: nativePass.filter((r) => r.swapped.status !== "pass"),
    nativeFail: applicable.filter((r) => r.native.status !== "pass"),
  };
}

const pct = (a, b) => (b ? `${(100 * a / b).toFixed(1)} %` : "n/a");

// --- Main ---------------------------------------------------------------------------------------------------

ensureInstalled();
const suites = opts.suite === "all" ? ["deno", "bun"] : opts.suite.split(",");
for (const suite of suites) {
  if (!SUITES[suite]) {
    console.error(`Unknown suite "${suite}": deno, bun or all`);
    process.exit(2);
  }
}
const prepared = {};
for (const suite of suites) {
  const file = prepare(suite);
  if (!file) {
    console.error(
      `No ${SUITES[suite].title} in ${join(cache, suite)}: give --${suite}-test <file> or ` +
        `--${suite}-git <git dir> (see the top of tools/compat_shapes.mjs)`,
    );
    process.exit(2);
  }
  const calls = testCalls(readFileSync(file, "utf8"), suite);
  prepared[suite] = { file, calls };
  console.log(`${SUITES[suite].title}: ${calls.length} test calls, from ${sourceNote(suite) || file}`);
}
const version = (tool) => spawnSync(tool, ["--version"]).stdout.toString().split("\n")[0].trim();
const versions = { deno: version(deno), bun: `bun ${version(bun)}` };

const tallies = Object.fromEntries(suites.map((suite) => [suite, []]));
for (let n = 1; n <= Number(opts.runs); n++) {
  for (const suite of suites) {
    const { file, calls } = prepared[suite];
    const started = Date.now();
    const results = suite === "deno" ? await runDeno(file, calls) : await runBun(file);
    const leftovers = sweep(dirname(file));
    if (leftovers) console.log(`  killed ${leftovers} process(es) the tests left running (cwd in ${dirname(file)})`);
    const t = tally(suite, results, calls);
    tallies[suite].push(t);
    console.log(
      `\n--- ${SUITES[suite].title}, run ${n} (${Math.round((Date.now() - started) / 1000)} s)` +
        "\nnative swapped",
    );
    for (const r of t.rows) {
      console.log(
        `${r.native.status.padEnd(6)} ${r.swapped.status.padEnd(7)} ${r.label}` +
          (r.excluded ? `  [excluded: ${r.excluded}]` : ""),
      );
    }
    console.log(
      `run ${n}: ${t.total} tests, ${t.skipped} skipped here, ${t.excluded.length} excluded, ` +
        `${t.applicable} applicable; native passes ${t.nativePass}; swapped passes among those ${t.both} ` +
        `(${pct(t.both, t.nativePass)}); pass natively, fail swapped: ${t.lost.length}`,
    );
    for (const r of t.lost) console.log(`  ${r.label}: ${r.swapped.error}`);
  }
}

// --- The summary file ---
const runs = Number(opts.runs);
const lines = [
  `# The runtimes' own tests against spawnpool's Deno.Command and Bun.spawn shapes ` +
  `(${new Date().toISOString().slice(0, 10)})`,
  "",
  `\`npm run compat:shapes -- ${process.argv.slice(2).join(" ")}\`: ${runs} run(s); ${versions.deno}, ` +
  `${versions.bun}.` + (process.env.SPAWNPOOL_COMPAT_MOD ? ` Library: ${process.env.SPAWNPOOL_COMPAT_MOD}.` : ""),
];
for (const suite of suites) {
  const list = tallies[suite];
  const last = list[list.length - 1];
  lines.push(
    "",
    `## ${SUITES[suite].title}`,
    "",
    `From ${sourceNote(suite) || prepared[suite].file}.`,
    "",
    "| run | tests | skipped here | excluded | applicable | native passes | swapped passes among them | " +
      "pass natively, fail swapped |",
    "|---|---|---|---|---|---|---|---|",
  );
  list.forEach((t, i) => {
    lines.push(
      `| ${i + 1} | ${t.total} | ${t.skipped} | ${t.excluded.length} | ${t.applicable} | ${t.nativePass} | ` +
        `${t.both} (${pct(t.both, t.nativePass)}) | ${t.lost.length} |`,
    );
  });
  const reasons = new Map();
  for (const r of last.excluded) reasons.set(r.excluded, [...(reasons.get(r.excluded) ?? []), r.label]);
  lines.push("", "Excluded (they run, and are not counted):", "");
  if (reasons.size === 0) lines.push("- none");
  for (const [why, names] of reasons) lines.push(`- ${why}: ${names.length}: ${names.join(", ")}`);
  const everLost = new Map();
  list.forEach((t) => {
    for (const r of t.lost) everLost.set(r.label, [...(everLost.get(r.label) ?? []), r.swapped.error]);
  });
  lines.push("", "Pass natively, fail swapped (runs failing, first line of the error):", "");
  if (everLost.size === 0) lines.push("- none");
  for (const [name, errors] of everLost) {
    const detail = list.flatMap((t) => t.lost).find((r) => r.label === name)?.swapped.detail;
    lines.push(`- ${name}: ${errors.length}/${runs}: ${errors[0]}${detail ? ` (${detail})` : ""}`);
  }
  // The same first line, numbers aside (fds, signals), is most often the same cause.
  const causes = new Map();
  for (const [name, errors] of everLost) {
    const cause = errors[0].replace(/\d+/g, "N");
    causes.set(cause, [...(causes.get(cause) ?? []), name]);
  }
  lines.push("", "The same, by first line of the error (numbers as N):", "");
  if (causes.size === 0) lines.push("- none");
  for (const [cause, names] of [...causes].sort((a, b) => b[1].length - a[1].length)) {
    lines.push(`- ${names.length}: \`${cause}\``);
  }
  const nativeFails = new Map();
  list.forEach((t) => {
    for (const r of t.nativeFail) nativeFails.set(r.label, r.native.error || r.native.status);
  });
  lines.push("", "Fail natively here in some run (not counted):", "");
  if (nativeFails.size === 0) lines.push("- none");
  for (const [name, error] of nativeFails) lines.push(`- ${name}: ${error}`);
}
mkdirSync(dirname(opts.out), { recursive: true });
writeFileSync(opts.out, lines.join("\n") + "\n");
console.log(`\n${lines.join("\n")}\n\nWrote ${opts.out}`);

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
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { parseArgs } from "node:util";
import { runGrouped } from "./_run_grouped.mjs";
import { callAt, exclusionOf, testCalls } from "./compat_shapes/reading.mjs";
import { firstLine, parseJunit, plain } from "./compat_shapes/junit.mjs";
import { prepare, sourceNote, SUITES } from "./compat_shapes/sources.mjs";
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
  const file = prepare(suite, { cache, standIns, opts });
  if (!file) {
    console.error(
      `No ${SUITES[suite].title} in ${join(cache, suite)}: give --${suite}-test <file> or ` +
        `--${suite}-git <git dir> (see the top of tools/compat_shapes.mjs)`,
    );
    process.exit(2);
  }
  const calls = testCalls(readFileSync(file, "utf8"), suite);
  prepared[suite] = { file, calls };
  console.log(`${SUITES[suite].title}: ${calls.length} test calls, from ${sourceNote(suite, cache) || file}`);
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
    `From ${sourceNote(suite, cache) || prepared[suite].file}.`,
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

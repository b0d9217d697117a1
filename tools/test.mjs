// `npm test`: the whole quality gate, what CI runs. Format, lint, type-checks and doc lint; every test file
// under Deno, Bun and Node (the conformance suite against node, bun, deno and native workers); the conformance suite
// again on remote pools, an agent of each runtime behind a nats-server, and under Node on native workers of the other
// Linux architecture's build run under qemu-user; the drop-in's differential suite again on
// native workers, and on pools that run commands in the host (`startInHost`); the JSDoc examples; a JSR publish dry run; and the npm package
// installed into scratch Node and Bun apps. Setup builds the native worker first (support/build_native.mjs). Prints each
// step's time, a total, and exits non-zero on any failure.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { crossCompile } from "../support/build_native.mjs";
import { runCollecting } from "../support/run.mjs";
import { natsRequired, natsServerMissing, natsServerPath } from "../support/nats_server.mjs";
import { emulatedTarget, ensureQemu, qemuRequired } from "../support/qemu_user.mjs";
import { bin, ensureInstalled, root } from "../support/setup.mjs";

ensureInstalled();
const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, NO_COLOR: "1" };
// Every test file, so a new one cannot be left out.
const tests = readdirSync(join(root, "tests")).filter((name) => name.endsWith("_test.ts")).sort().map((name) =>
  `tests/${name}`
);
// Every TypeScript benchmark is type-checked (they import what they share).
const benchmarks = readdirSync(join(root, "bench")).filter((name) => name.endsWith(".ts")).sort().map((name) =>
  `bench/${name}`
);
// Every library file with a JSDoc example, so a new one cannot be left out.
const libraryDirs = ["core", "shapes", "shapes/child_process", "adapters", "worker"];
const withExamples = [
  "mod.ts",
  "node.ts",
  "pty.ts",
  "pool.ts",
  ...libraryDirs.flatMap((dir) =>
    readdirSync(join(root, dir)).filter((name) => name.endsWith(".ts")).map((name) => `${dir}/${name}`)
  ),
].filter((file) => readFileSync(join(root, file), "utf8").includes("```ts"));
// The conformance files, and the nats-server their remote pools need (when it is missing, those steps are skipped, but
// not on CI).
const conformance = tests.filter((file) => /\/conformance_\w+_test\.ts$/.test(file));
const natsMissing = natsServerPath() === undefined ? natsServerMissing() : undefined;

/**
 * Readies the emulated native worker's step: qemu-user (installed with apt-get as root on Debian when missing,
 * support/qemu_user.mjs) and the other Linux architecture's build (support/build_native.mjs). Returns why it cannot
 * run, or undefined when it can.
 */
async function emulatedMissing() {
  const target = emulatedTarget();
  if (target === undefined) {
    return `no other Linux architecture's worker to emulate on ${process.platform}-${process.arch}`;
  }
  const { missing } = ensureQemu({ install: true });
  if (missing) return missing;
  try {
    const [built] = await crossCompile({ quiet: true, only: [`linux-${target.arch}`] });
    return built.error && `the linux-${target.arch} worker did not build: ${built.error}`;
  } catch (error) {
    return `no Zig to build the linux-${target.arch} worker: ${error.message}`;
  }
}

/**
 * Test files under each host runtime's runner (deno test, bun test, node --test), each step with its runner's summary
 * line; `what(host)` names the step, `extra(host)` adds its environment and whether it needs the nats-server.
 */
function underEachHost(what, files, extra) {
  const runners = {
    deno: {
      args: ["test", "-A"],
      // Its tests are the files' describe blocks; their steps are the tests the other runners count.
      count: /(\d+) passed \((\d+) steps\) \| (\d+) failed(?: \((\d+) steps\))?/,
      totals: (m) => [Number(m[2]), Number(m[4] ?? m[3])],
    },
    // The per-test timeout: Bun reads none from bunfig.toml, and a preload's setDefaultTimeout() holds for one file.
    bun: { args: ["test", "--timeout", "30000"], count: /^\s*(\d+) pass\s*$[\s\S]*^\s*(\d+) fail\s*$/m },
    // Two files at once (Node's default is one per core less one: one here); the suite's time is kept under 20 min.
    node: { args: ["--test", "--test-concurrency=2"], count: /ℹ pass (\d+)\s*ℹ fail (\d+)/ },
  };
  return Object.entries(runners).map(([host, runner]) => ({
    name: [host, runner.args[0], what(host)].filter(Boolean).join(" "),
    cmd: host,
    ...runner,
    // Deno and Bun run a list of files one at a time in one process: a long list runs as two processes at once, as
    // Node runs two files at once (separate processes: `deno test --parallel` shares one process's state between
    // files, which these tests' pools, signals and exit hooks cannot share).
    shards: host !== "node" && files.length >= SHARD_MIN_FILES ? halves(files) : [files],
    ...extra(host),
  }));
}

/** A list of test files long enough to be worth two runner processes. */
const SHARD_MIN_FILES = 8;

/** `files` dealt alternately into two lists (files of a kind sit together in name order, so each half gets some). */
function halves(files) {
  return [files.filter((_, i) => i % 2 === 0), files.filter((_, i) => i % 2 === 1)];
}

const steps = [
  { name: "deno fmt --check", cmd: "deno", args: ["fmt", "--check"] },
  { name: "deno lint", cmd: "deno", args: ["lint"] },
  // The native worker's fuzz seeds are written from the protocol's code: they must be what it writes today.
  { name: "fuzz seeds up to date", cmd: "node", args: ["tools/fuzz_native_corpus.ts", "--check"] },
  {
    name: "deno check",
    cmd: "deno",
    args: [
      "check",
      "mod.ts",
      "node.ts",
      "pty.ts",
      "worker/main.ts",
      "support/soak.ts",
      "support/proc.ts",
      ...tests,
      ...benchmarks,
    ],
  },
  { name: "core is runtime-neutral (tsc, no Deno/Bun/Node types)", cmd: "tsc", args: ["-p", "tsconfig.core.json"] },
  { name: "deno doc --lint", cmd: "deno", args: ["doc", "--lint", "mod.ts", "node.ts", "pty.ts", "worker/main.ts"] },
  // What JSR publishes: the bundled build staged by tools/stage.mjs, not the checkout's sources.
  { name: "JSR publish dry run (the staged package)", cmd: "node", args: ["tools/stage.mjs", "--jsr-dry-run"] },
  {
    name: "deno test --doc (the JSDoc examples)",
    cmd: "deno",
    // The examples import the published names (as JSR's pages show them); the import map points those at the checkout.
    args: ["test", "--doc", "-A", "--import-map=tools/doc_imports.json", ...withExamples],
    count: /(\d+) passed \| (\d+) failed/,
  },
  // Every test file under each runtime: the conformance suite against node, bun, deno and native workers.
  ...underEachHost(() => "", tests, () => ({})),
  // The conformance suite on remote pools: each host runtime's pool sends its commands through a nats-server to an agent
  // of the same runtime (whose workers run under it too).
  ...underEachHost((host) => `the conformance files, remote pool with a ${host} agent`, conformance, (host) => ({
    env: { SPAWNPOOL_TEST_WORKERS: `remote-${host}` },
    nats: true,
  })),
  // The conformance suite on native workers of the other Linux architecture's build (linux-arm64 on an x64 machine), run
  // under qemu-user: the same C, compiled for the other target, through the same protocol paths. Under Node only: one
  // host runner is enough to reach every path of the worker, and it keeps the suite's time down.
  ...underEachHost(
    () => `the conformance files, native workers for linux-${emulatedTarget()?.arch} under qemu-user`,
    conformance,
    () => ({ env: { SPAWNPOOL_TEST_WORKERS: "native-qemu" }, qemu: true }),
  ).filter((step) => step.cmd === "node"),
  // The ./node drop-in's differential suite once more, its default pool on native workers, under each host.
  ...underEachHost(
    () => "tests/node_compat_test.ts and node_extras_test.ts, native workers",
    ["tests/node_compat_test.ts", "tests/node_extras_test.ts"],
    () => ({ env: { SPAWNPOOL_COMPAT_WORKERS: "native" } }),
  ),
  // And on pools that run commands in the host until a worker is ready (`startInHost`, the default pool's way).
  ...underEachHost(
    () => "tests/node_compat_test.ts, commands run in the host",
    ["tests/node_compat_test.ts"],
    () => ({ env: { SPAWNPOOL_COMPAT_WORKERS: "in-host" } }),
  ),
  {
    name: "npm package in scratch Node and Bun apps",
    cmd: "node",
    args: ["tools/pack_test.mjs"],
    count: /pack test: (\d+) passed, (\d+) failed/,
  },
];

let passed = 0;
let failed = 0;
const failures = [];
for (const step of steps) {
  console.log(`\n=== ${step.name}`);
  if (step.nats && natsMissing) {
    if (natsRequired()) {
      console.log(`FAIL: no nats-server, and CI must run this step: ${natsMissing}`);
      failures.push(`${step.name}: no nats-server`);
    } else {
      console.log(`SKIP ${step.name}: ${natsMissing}`);
    }
    continue;
  }
  if (step.qemu) {
    const missing = await emulatedMissing();
    if (missing && qemuRequired()) {
      console.log(`FAIL: CI must run this step: ${missing}`);
      failures.push(`${step.name}: ${missing}`);
      continue;
    }
    if (missing) {
      console.log(`SKIP ${step.name}: ${missing}`);
      continue;
    }
  }
  const started = performance.now();
  // A step's shards (lists of files for one runner each) run at once; their outputs are printed one after the other.
  const shards = step.shards?.map((files) => [...step.args, ...files]) ?? [step.args];
  // A step that hangs fails (and is killed) after 20 minutes instead of holding CI forever.
  const results = await Promise.all(
    shards.map((args) =>
      runCollecting(join(bin, step.cmd), args, { cwd: root, env: { ...env, ...step.env }, ms: 20 * 60_000 })
    ),
  );
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  let ok = true;
  let counted = [0, 0];
  for (const [i, result] of results.entries()) {
    if (shards.length > 1) console.log(`--- shard ${i + 1} of ${shards.length}`);
    process.stdout.write(result.out);
    if (result.error) console.log(`${step.name}: ${result.error}`);
    if (result.timedOut) console.log(`${step.name}: killed after 20 minutes`);
    ok &&= result.status === 0;
    if (!step.count) continue;
    const m = result.out.match(step.count);
    if (!m) {
      counted = undefined;
      continue;
    }
    const [p, f] = step.totals ? step.totals(m) : [Number(m[1]), Number(m[2])];
    if (counted) counted = [counted[0] + p, counted[1] + f];
  }
  if (!ok) failures.push(step.name);
  if (step.count) {
    if (!counted) {
      failures.push(`${step.name}: no test summary`);
      failed++;
      continue;
    }
    const [p, f] = counted;
    console.log(
      `--- ${step.name}: ${p} passed, ${f} failed, ${seconds} s${
        shards.length > 1 ? ` (${shards.length} shards at once)` : ""
      }`,
    );
    passed += p;
    failed += f;
    if (p === 0) failures.push(`${step.name}: ran no test`);
  } else {
    console.log(`--- ${step.name}: ${ok ? "ok" : "failed"}, ${seconds} s`);
  }
}
console.log(`\n${failures.length ? `FAILED: ${failures.join("; ")}` : "All checks passed"}`);
console.log(`tests: ${passed} passed, ${failed} failed`);
process.exit(failures.length ? 1 : 0);

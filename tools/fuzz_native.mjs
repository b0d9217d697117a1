// `node tools/fuzz_native.mjs [seconds] [options] [-- libFuzzer flags]`: coverage-guided fuzzing of the native worker's
// frame decoder, JSON parser and request validation with libFuzzer (native/fuzz/README.md). Builds the harnesses with
// clang (-fsanitize=fuzzer,address,undefined, warnings as errors) into native/build/fuzz/, runs each on the committed
// seeds (native/fuzz/corpus/<harness>/, only read) and a working corpus (a fresh temporary directory, removed at the
// end, or --corpus), then prints the coverage reached (libFuzzer's cov and ft), the corpus and the speed. Exits 1 on a
// crash, a leak, a timeout or an out-of-memory (the input is saved under native/build/fuzz/artifacts/), 2 when no
// clang with libFuzzer is found (it says what to install; it installs nothing unless given --install).
//
//   seconds          fuzzing time in all (default 60): 2/3 to the frame harness, 1/3 to the JSON one
//   --harness=NAME   only `frames` or `json`, for all the time
//   --corpus=DIR     keep the working corpus in DIR/<harness>/ (created; grows across runs)
//   --install        when no clang has libFuzzer, install the pinned Debian packages with apt-get (root only)
//   --build          build only
//   --repro=FILE     run FILE through the harness once (the frame one unless --harness)
//   --minimize=FILE  minimize a crashing input into FILE.min
//   --verbose        print every line libFuzzer prints (default: not its NEW and REDUCE lines)
import { execFile, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureLibFuzzer } from "../support/libfuzzer.mjs";

const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const native = join(root, "native");
const fuzzDir = join(native, "fuzz");
const out = join(native, "build", "fuzz");
const artifacts = join(out, "artifacts");

/** The harnesses: each runs its share of the time, on its seeds, with its longest input. */
const HARNESSES = {
  frames: { share: 2 / 3, maxLen: 8192 },
  json: { share: 1 / 3, maxLen: 4096 },
};
// The worker's files but main.c (its entry) and host_frames.c (each harness compiles it into itself: fuzz.h).
const workerSources = readdirSync(native).filter((name) =>
  name.endsWith(".c") && name !== "main.c" &&
  name !== "host_frames.c"
).sort().map((name) => join(native, name));
const headers = [
  ...readdirSync(native).filter((name) => name.endsWith(".h")).map((name) => join(native, name)),
  join(fuzzDir, "fuzz.h"),
];
const common = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-D_GNU_SOURCE", "-g", "-O1"];
const sanitize = ["-fno-omit-frame-pointer", "-fno-sanitize-recover=all"];
// The stubs (native/fuzz/stubs.c): the worker's exit, kill and vfork, at the C library's entry points; and its
// allocations, recorded.
const WRAPS = "-Wl,--wrap=exit,--wrap=_exit,--wrap=kill,--wrap=vfork,--wrap=malloc,--wrap=realloc,--wrap=strdup";

function parseArgs(argv) {
  const options = { seconds: 60, harnesses: Object.keys(HARNESSES), extra: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [flag, value] = arg.split(/=(.*)/s);
    if (arg === "--") {
      options.extra = argv.slice(i + 1);
      break;
    } else if (/^\d+(\.\d+)?$/.test(arg)) options.seconds = Number(arg);
    else if (flag === "--harness" && value in HARNESSES) options.harnesses = [value];
    else if (flag === "--corpus" && value) options.corpus = resolve(value);
    else if (flag === "--repro" && value) options.repro = resolve(value);
    else if (flag === "--minimize" && value) options.minimize = resolve(value);
    else if (arg === "--install") options.install = true;
    else if (arg === "--build") options.buildOnly = true;
    else if (arg === "--verbose") options.verbose = true;
    else {
      console.error(`fuzz_native: unknown argument ${arg} (see the top of tools/fuzz_native.mjs)`);
      process.exit(2);
    }
  }
  return options;
}

const newest = (files) => Math.max(...files.map((file) => statSync(file).mtimeMs));
const olderThan = (target, sources) => !existsSync(target) || statSync(target).mtimeMs < newest(sources);

function run(cmd, args) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { cwd: root, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(Object.assign(error, { output: `${stdout}${stderr}` }));
      else resolve();
    });
  });
}

/** Writes `target` through a temporary name: a harness running meanwhile keeps its file, another build its own. */
async function atomically(target, write) {
  const temporary = `${target}.${process.pid}.tmp`;
  try {
    await write(temporary);
    renameSync(temporary, target);
  } finally {
    rmSync(temporary, { force: true });
  }
}

/** Builds the harnesses that are older than their sources; returns their paths by name. */
async function build(clang, names, quiet) {
  const objDir = join(out, "obj");
  mkdirSync(objDir, { recursive: true });
  const self = fileURLToPath(import.meta.url);
  const objects = new Map();
  const units = [
    ...workerSources.map((source) => ({ source, deps: [source, ...headers, self] })),
    { source: join(fuzzDir, "stubs.c"), deps: [join(fuzzDir, "stubs.c"), ...headers, self] },
    ...names.map((name) => {
      const source = join(fuzzDir, `fuzz_${name}.c`);
      return { source, deps: [source, join(native, "host_frames.c"), ...headers, self] };
    }),
  ];
  // One compiler per core.
  const queue = [...units];
  const compile = async () => {
    for (let unit = queue.shift(); unit; unit = queue.shift()) {
      const object = join(objDir, `${relative(native, unit.source).replaceAll("/", "_").replace(/\.c$/, "")}.o`);
      objects.set(unit.source, object);
      if (!olderThan(object, unit.deps)) continue;
      const args = [...common, ...sanitize, "-fsanitize=fuzzer-no-link,address,undefined", `-I${native}`];
      if (!quiet) console.log(`${clang} ${args.join(" ")} -c ${relative(root, unit.source)}`);
      await atomically(object, (to) => run(clang, [...args, "-c", unit.source, "-o", to]));
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, availableParallelism()) }, compile));
  const binaries = {};
  for (const name of names) {
    const binary = join(out, `fuzz_${name}`);
    const inputs = [
      objects.get(join(fuzzDir, `fuzz_${name}.c`)),
      objects.get(join(fuzzDir, "stubs.c")),
      ...workerSources.map((source) => objects.get(source)),
    ];
    if (olderThan(binary, inputs)) {
      const args = ["-fsanitize=fuzzer,address,undefined", WRAPS, ...inputs, "-lm"];
      if (!quiet) console.log(`${clang} ${args.map((arg) => relative(root, arg) || arg).join(" ")}`);
      await atomically(binary, (to) => run(clang, [...args, "-o", to]));
    }
    binaries[name] = binary;
  }
  return binaries;
}

/** The sanitizers' options, and their symbolizer (clang's own llvm-symbolizer, for file:line in reports). */
function sanitizerEnv(clang) {
  const env = { ...process.env };
  env.ASAN_OPTIONS ??= "detect_leaks=1:strict_string_checks=1";
  env.UBSAN_OPTIONS ??= "print_stacktrace=1:halt_on_error=1";
  try {
    const symbolizer = execFileSync(clang, ["-print-prog-name=llvm-symbolizer"], { encoding: "utf8" }).trim();
    if (symbolizer.startsWith("/") && existsSync(symbolizer)) env.ASAN_SYMBOLIZER_PATH ??= symbolizer;
  } catch { /* the sanitizers find one on PATH, or print addresses */ }
  return env;
}

/** Runs `binary` with `args`, its lines printed as they come (filtered); resolves to its exit status and its lines. */
function runFuzzer(binary, args, env, verbose) {
  return new Promise((resolve) => {
    const child = spawn(binary, args, { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
    const lines = [];
    const found = {};
    let dictionary = false;
    const onLine = (line) => {
      lines.push(line);
      // What is kept past the lines' window: the seeds' coverage, and where a crash's input went.
      found.seeded ??= /^#\d+\s+INITED cov: (\d+) ft: (\d+) corp: (\d+)/.exec(line) ?? undefined;
      found.artifact ??= /Test unit written to (\S+)/.exec(line)?.[1];
      if (lines.length > 4000) lines.splice(0, 2000);
      if (/^###### Recommended dictionary/.test(line)) dictionary = true;
      const noise = /^#\d+\s+(NEW|REDUCE)\s/.test(line) || dictionary;
      if (/^###### End of recommended dictionary/.test(line)) dictionary = false;
      if (verbose || !noise) console.log(line);
    };
    for (const stream of [child.stdout, child.stderr]) {
      let rest = "";
      stream.setEncoding("utf8");
      stream.on("data", (chunk) => {
        const parts = (rest + chunk).split("\n");
        rest = parts.pop();
        parts.forEach(onLine);
      });
      stream.on("end", () => rest && onLine(rest));
    }
    child.on("close", (code, signal) => resolve({ code, signal, lines, ...found }));
  });
}

/** libFuzzer's last status line: cov, ft, corpus, exec/s, runs. */
function lastStatus(lines) {
  for (let i = lines.length - 1; i >= 0; i--) {
    const m = /^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)\/(\S+)(?: lim: \d+)? exec\/s: (\d+) rss: (\S+)/.exec(
      lines[i],
    );
    if (m) {
      return { runs: +m[1], event: m[2], cov: +m[3], ft: +m[4], corpus: +m[5], size: m[6], execs: +m[7], rss: m[8] };
    }
  }
  return undefined;
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const { clang, missing } = ensureLibFuzzer({ install: options.install });
  if (!clang) {
    console.error(`fuzz_native: ${missing}`);
    process.exit(2);
  }
  const names = options.repro || options.minimize
    ? [options.harnesses.length === 1 ? options.harnesses[0] : "frames"]
    : options.harnesses;
  let binaries;
  try {
    binaries = await build(clang, names, false);
  } catch (error) {
    console.error(`fuzz_native: the build failed:\n${error.output ?? error.message}`);
    process.exit(1);
  }
  if (options.buildOnly) {
    console.log(`fuzz_native: built ${Object.values(binaries).map((path) => relative(root, path)).join(", ")}`);
    return;
  }
  const env = sanitizerEnv(clang);
  const dict = `-dict=${join(fuzzDir, "spawnpool.dict")}`;
  if (options.repro || options.minimize) {
    const name = names[0];
    const args = options.repro
      ? [dict, options.repro]
      : ["-minimize_crash=1", "-max_total_time=120", `-exact_artifact_path=${options.minimize}.min`, options.minimize];
    const { code } = await runFuzzer(binaries[name], [...args, ...options.extra], env, true);
    process.exit(code === 0 ? 0 : 1);
  }
  mkdirSync(artifacts, { recursive: true });
  const results = [];
  for (const name of names) {
    const seconds = Math.max(1, Math.round(options.seconds * (names.length === 1 ? 1 : HARNESSES[name].share)));
    const seeds = join(fuzzDir, "corpus", name);
    const work = options.corpus ? join(options.corpus, name) : mkdtempSync(join(tmpdir(), `spawnpool-fuzz-${name}-`));
    mkdirSync(work, { recursive: true });
    // New inputs go to the first directory only: the committed seeds are read, never written.
    const args = [
      `-max_total_time=${seconds}`,
      `-max_len=${HARNESSES[name].maxLen}`,
      "-timeout=20",
      "-rss_limit_mb=2560",
      "-print_final_stats=1",
      dict,
      `-artifact_prefix=${artifacts}/${name}-`,
      ...options.extra,
      work,
      seeds,
    ];
    console.log(`\n=== ${name}: ${seconds} s, ${relative(root, binaries[name])} ${args.join(" ")}`);
    const started = Date.now();
    const { code, signal, lines, seeded, artifact } = await runFuzzer(binaries[name], args, env, options.verbose);
    if (!options.corpus) rmSync(work, { recursive: true, force: true });
    const status = lastStatus(lines);
    const ok = code === 0 && status?.event === "DONE";
    results.push({ name, ok, status });
    const elapsed = Math.round((Date.now() - started) / 1000);
    if (seeded) console.log(`fuzz_native: ${name}: the seeds: cov ${seeded[1]}, ft ${seeded[2]}, ${seeded[3]} inputs`);
    if (status) {
      console.log(
        `fuzz_native: ${name}: cov ${status.cov}, ft ${status.ft}, corpus ${status.corpus} inputs (${status.size}), ` +
          `${status.execs} exec/s, ${status.runs} runs in ${elapsed} s, rss ${status.rss}` +
          (options.corpus ? `, corpus kept in ${work}` : ""),
      );
    }
    if (!ok) {
      console.log(
        `fuzz_native: ${name}: FAILED (exit ${code ?? signal})` +
          (artifact
            ? `: the input is ${artifact}; replay it with \`node tools/fuzz_native.mjs --harness=${name} ` +
              `--repro=${artifact}\`, minimize it with --minimize=${artifact}`
            : ""),
      );
    }
  }
  const failed = results.filter((result) => !result.ok).map((result) => result.name);
  console.log(failed.length ? `fuzz_native: FAILED: ${failed.join(", ")}` : "fuzz_native: no crash");
  process.exit(failed.length ? 1 : 0);
}

await main();

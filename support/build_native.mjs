// `npm run build:native`: compiles the native worker (every native/*.c into one program, C11, POSIX + epoll on Linux;
// native/worker.h lists its files) with the system's C compiler (`cc`, or $CC) into native/build/spawnpool-worker,
// warnings as errors; and for tests/native*_test.ts an ASan+UBSan build of it, native/build/spawnpool-worker-asan, and
// native/build/spawnpool-worker-poll, built with SPAWNPOOL_FORCE_POLL and SPAWNPOOL_TEST_FALLBACKS: the poll() and
// SIGCHLD loop other systems get, and the other fallbacks (below).
// Skips what is newer than its sources.
// `--copy-to-dist` also copies the release build to dist/native/spawnpool-worker-<platform>-<arch> (where a checkout's
// dist/ finds it, for the benchmarks; the npm package leaves it out). `--packages` also cross-compiles the per-platform
// packages into dist/npm/ (as `npm run build` does).
import { execFile, execFileSync } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(fileURLToPath(new URL(".", import.meta.url)), "..");
const dir = join(root, "native");
const out = join(dir, "build");
const sources = readdirSync(dir).filter((name) => name.endsWith(".c")).sort().map((name) => join(dir, name));
const headers = readdirSync(dir).filter((name) => name.endsWith(".h")).map((name) => join(dir, name));
const common = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wpedantic", "-D_GNU_SOURCE"];
export const NATIVE_WORKER = join(out, "spawnpool-worker");
export const NATIVE_WORKER_ASAN = join(out, "spawnpool-worker-asan");
export const NATIVE_WORKER_POLL = join(out, "spawnpool-worker-poll");

// Linked against the system's C library: every symbol bound at load (a vfork child then never enters the dynamic
// linker to bind one lazily), and the relocations read-only after that. GNU and LLVM linkers; Apple's has no -z.
const bindNow = process.platform === "darwin" ? [] : ["-Wl,-z,now", "-Wl,-z,relro"];
const variants = [
  { path: NATIVE_WORKER, flags: ["-O2", ...bindNow] },
  // The fallbacks too: fds marked close-on-exec one by one (as without close_range), and a vfork that copies memory
  // (as under qemu-user and valgrind), so a child's failure comes back through a pipe.
  { path: NATIVE_WORKER_POLL, flags: ["-O2", ...bindNow, "-DSPAWNPOOL_FORCE_POLL", "-DSPAWNPOOL_TEST_FALLBACKS"] },
  {
    path: NATIVE_WORKER_ASAN,
    // With the tests' hooks (SPAWNPOOL_TEST_HOOKS: native/event_loop.c), which the release builds leave out.
    flags: [
      "-O1",
      "-g",
      "-fsanitize=address,undefined",
      "-fno-sanitize-recover=all",
      "-fno-omit-frame-pointer",
      "-DSPAWNPOOL_TEST_HOOKS",
    ],
  },
];

function upToDate(target) {
  if (!existsSync(target)) return false;
  const built = statSync(target).mtimeMs;
  return [...sources, ...headers, fileURLToPath(import.meta.url)].every((file) => statSync(file).mtimeMs <= built);
}

/** Builds the native worker and its sanitized variant when their sources changed; returns the release build's path. */
export function buildNative({ quiet = false } = {}) {
  mkdirSync(out, { recursive: true });
  const cc = process.env.CC || "cc";
  for (const { path, flags } of variants) {
    if (upToDate(path)) continue;
    const args = [...common, ...flags, "-o", path, ...sources, "-lm"];
    if (!quiet) console.log(`${cc} ${args.join(" ")}`);
    execFileSync(cc, args, { cwd: root, stdio: "inherit" });
  }
  return NATIVE_WORKER;
}

/** Copies the release build to where the npm build looks for it (adapters/platform.ts). */
export function copyNativeToDist() {
  const target = join(root, "dist", "native", `spawnpool-worker-${process.platform}-${process.arch}`);
  mkdirSync(join(root, "dist", "native"), { recursive: true });
  copyFileSync(NATIVE_WORKER, target);
  return target;
}

// The per-platform npm packages (the pattern of esbuild and biome): `@spawnpool/worker-<platform>-<arch>`, each holding
// one binary cross-compiled with Zig's C compiler (`zig cc`, from PyPI's `ziglang`, pinned, installed into a venv under
// .cache/zig/), listed in spawnpool's optionalDependencies at spawnpool's version. Linux builds are static (musl).
// The macOS builds target macOS 27: native/spawn.c calls pipe2(), which Apple's SDK has from macOS 27 only; vfork()
// is deprecated there (it still works), so that warning is not an error for those targets.
export const ZIG_VERSION = "0.17.1";
const cache = join(root, ".cache", "zig");
const venv = join(cache, "venv");
const python = join(venv, "bin", "python");
const crossOut = join(out, "cross");
export const PLATFORM_TARGETS = [
  { platform: "linux", arch: "x64", target: "x86_64-linux-musl", flags: ["-static"] },
  { platform: "linux", arch: "arm64", target: "aarch64-linux-musl", flags: ["-static"] },
  { platform: "darwin", arch: "x64", target: "x86_64-macos.27.0", flags: ["-Wno-deprecated-declarations"] },
  { platform: "darwin", arch: "arm64", target: "aarch64-macos.27.0", flags: ["-Wno-deprecated-declarations"] },
];
/** The npm name of the package holding the native worker for `platform`-`arch`. */
export const workerPackageName = (platform, arch) => `@spawnpool/worker-${platform}-${arch}`;

/**
 * The optionalDependencies of the published spawnpool: every platform's worker package at `version`. Only the staged
 * package lists them (tools/stage.mjs): the checkout's package.json does not, so installing a checkout never asks the
 * registry for packages that may not be published yet, and never installs a stranger's package of that name.
 */
export function workerDependencies(version) {
  return Object.fromEntries(PLATFORM_TARGETS.map(({ platform, arch }) => [workerPackageName(platform, arch), version]));
}

const zigEnv = () => ({
  ...process.env,
  ZIG_GLOBAL_CACHE_DIR: join(cache, "global"),
  ZIG_LOCAL_CACHE_DIR: join(cache, "local"),
});

/** Installs the pinned Zig from PyPI into .cache/zig/venv when it is missing; returns the command prefix for `zig`. */
export function ensureZig({ quiet = false } = {}) {
  let version;
  try {
    version = execFileSync(python, ["-m", "ziglang", "version"], { encoding: "utf8", env: zigEnv() }).trim();
  } catch {
    version = undefined;
  }
  if (version !== ZIG_VERSION) {
    if (!quiet) console.log(`Installing Zig ${ZIG_VERSION} (PyPI: ziglang) into ${venv}...`);
    mkdirSync(cache, { recursive: true });
    if (!existsSync(python)) execFileSync("python3", ["-m", "venv", venv], { stdio: "inherit" });
    execFileSync(
      python,
      ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", `ziglang==${ZIG_VERSION}`],
      {
        stdio: "inherit",
      },
    );
  }
  return [python, "-m", "ziglang"];
}

function runAsync(cmd, args, options) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { ...options, maxBuffer: 16 * 1024 * 1024 }, (error, stdout, stderr) => {
      if (error) reject(Object.assign(error, { stdout, stderr }));
      else resolve(stdout);
    });
  });
}

/**
 * Cross-compiles the release worker for every target in PLATFORM_TARGETS, or those of `only` ("<platform>-<arch>"), (in
 * parallel; skipping what is newer than its sources) into native/build/cross/<platform>-<arch>/spawnpool-worker. Returns
 * one entry per target: its path, or the compiler's error for a target that failed to build.
 *
 * @param {{ quiet?: boolean, only?: string[] }} [options]
 */
export async function crossCompile({ quiet = false, only } = {}) {
  const zig = ensureZig({ quiet });
  const targets = PLATFORM_TARGETS.filter(({ platform, arch }) => only?.includes(`${platform}-${arch}`) ?? true);
  return await Promise.all(targets.map(async (entry) => {
    const dir = join(crossOut, `${entry.platform}-${entry.arch}`);
    const path = join(dir, "spawnpool-worker");
    mkdirSync(dir, { recursive: true });
    if (upToDate(path)) return { ...entry, path };
    const args = [
      ...zig.slice(1),
      "cc",
      "-target",
      entry.target,
      ...common,
      "-O2",
      "-s",
      ...entry.flags,
      "-o",
      path,
      ...sources,
      "-lm",
    ];
    if (!quiet) console.log(`zig cc -target ${entry.target} -> ${path}`);
    try {
      await runAsync(zig[0], args, { cwd: root, env: zigEnv() });
      return { ...entry, path };
    } catch (error) {
      rmSync(path, { force: true });
      return { ...entry, error: `${error.stderr ?? ""}${error.message}` };
    }
  }));
}

/** The entry of each worker package: its binary's path, which spawnpool's JSR build imports it for (on Deno). */
const WORKER_ENTRY =
  `// The path of spawnpool's native worker in this package. spawnpool's JSR build imports this package on Deno, which
// installs npm packages into a cache of its own, to find it there.
export const path = decodeURIComponent(new URL("./bin/spawnpool-worker", import.meta.url).pathname);
`;

/**
 * Writes the per-platform packages under dist/npm/worker-<platform>-<arch>/ (package.json with "os" and "cpu",
 * bin/spawnpool-worker, index.js exporting its path, README.md, LICENSE) at spawnpool's version, from crossCompile()'s
 * builds: every platform's, or those of `only`, under `into` instead of dist/npm/ if given. A target that failed to build
 * is reported, and its package is not written.
 *
 * @param {{ quiet?: boolean, only?: string[], into?: string }} [options]
 * @returns {Promise<Array<{ name: string, dir: string, binary: string, platform: string, arch: string }>>}
 */
export async function buildPlatformPackages({ quiet = false, only, into = join(root, "dist", "npm") } = {}) {
  const main = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const built = await crossCompile({ quiet, only });
  const packages = [];
  for (const entry of built) {
    const name = workerPackageName(entry.platform, entry.arch);
    if (entry.error !== undefined) {
      console.error(`Could not build ${name} (${entry.target}):\n${entry.error}`);
      continue;
    }
    const dir = join(into, `worker-${entry.platform}-${entry.arch}`);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(join(dir, "bin"), { recursive: true });
    copyFileSync(entry.path, join(dir, "bin", "spawnpool-worker"));
    chmodSync(join(dir, "bin", "spawnpool-worker"), 0o755);
    copyFileSync(join(root, "LICENSE"), join(dir, "LICENSE"));
    writeFileSync(join(dir, "index.js"), WORKER_ENTRY);
    const os = entry.platform === "darwin" ? "macOS 27 or later" : "Linux (static, musl)";
    writeFileSync(
      join(dir, "README.md"),
      `# ${name}\n\nThe native worker of [spawnpool](https://www.npmjs.com/package/spawnpool) for ${os} on ${entry.arch}, ` +
        `built from spawnpool's native/*.c with \`zig cc -target ${entry.target}\` (Zig ${ZIG_VERSION}).\n\n` +
        "Do not install it yourself: the published spawnpool lists it in its optionalDependencies, and npm, Bun and Deno install the " +
        "one for your platform; spawnpool from JSR imports the one for your platform on Deno (its `index.js` exports the " +
        "binary's `path`).\n",
    );
    const pkg = {
      name,
      version: main.version,
      description: `The native worker of spawnpool for ${entry.platform}-${entry.arch}`,
      license: main.license,
      repository: main.repository,
      os: [entry.platform],
      cpu: [entry.arch],
      type: "module",
      exports: { ".": "./index.js", "./package.json": "./package.json" },
      files: ["bin/spawnpool-worker", "index.js", "README.md", "LICENSE"],
      preferUnplugged: true,
    };
    writeFileSync(join(dir, "package.json"), JSON.stringify(pkg, null, 2) + "\n");
    packages.push({ name, dir, binary: join(dir, "bin", "spawnpool-worker"), ...entry });
  }
  return packages;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  buildNative();
  console.log(`Built ${NATIVE_WORKER}, ${NATIVE_WORKER_ASAN} and ${NATIVE_WORKER_POLL}`);
  if (process.argv.includes("--copy-to-dist")) console.log(`Copied to ${copyNativeToDist()}`);
  if (process.argv.includes("--packages")) {
    for (const { name, dir } of await buildPlatformPackages()) console.log(`Wrote ${name} to ${dir}`);
  }
}

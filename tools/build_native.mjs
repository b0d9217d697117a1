// `npm run build:native`: compiles the native worker (native/*.c, C11, POSIX + epoll on Linux) with the system's
// C compiler (`cc`, or $CC) into native/build/spawnpool-worker, warnings as errors; and for tests/native_test.ts an
// ASan+UBSan build of it, native/build/spawnpool-worker-asan, and native/build/spawnpool-worker-poll, built with
// SPAWNPOOL_FORCE_POLL: the poll() and SIGCHLD loop other systems get. Skips what is newer than its sources.
// `--copy-to-dist` also copies the release build to dist/native/spawnpool-worker-<platform>-<arch> (the npm build).
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from "node:fs";
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

const variants = [
  { path: NATIVE_WORKER, flags: ["-O2"] },
  { path: NATIVE_WORKER_POLL, flags: ["-O2", "-DSPAWNPOOL_FORCE_POLL"] },
  {
    path: NATIVE_WORKER_ASAN,
    flags: ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"],
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

/** Copies the release build to where the npm build looks for it (adapters/runtime.ts). */
export function copyNativeToDist() {
  const target = join(root, "dist", "native", `spawnpool-worker-${process.platform}-${process.arch}`);
  mkdirSync(join(root, "dist", "native"), { recursive: true });
  copyFileSync(NATIVE_WORKER, target);
  return target;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  buildNative();
  console.log(`Built ${NATIVE_WORKER}, ${NATIVE_WORKER_ASAN} and ${NATIVE_WORKER_POLL}`);
  if (process.argv.includes("--copy-to-dist")) console.log(`Copied to ${copyNativeToDist()}`);
}

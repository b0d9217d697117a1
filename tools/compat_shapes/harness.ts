/**
 * A stand-in for Bun's `test/harness.ts` (oven-sh/bun), for `npm run compat:shapes`
 * (tools/compat_shapes.mjs). Bun's file is large and imports modules of Bun's repository that are not here
 * (`_util/numeric.ts`, `bun:internal-for-testing`); this module provides just what
 * `test/js/bun/spawn/spawn.test.ts` and its fixture `does-not-hang.js` import from "harness", each with the
 * behaviour Bun's harness gives it. The runner installs it as `node_modules/harness` next to the cached
 * upstream test file.
 *
 * @module
 */
import { gc as bunGC, unsafe } from "bun";
import fs from "node:fs";
import os from "node:os";
import { join } from "node:path";

export const isMacOS: boolean = process.platform === "darwin";
export const isLinux: boolean = process.platform === "linux";
export const isFreeBSD: boolean = process.platform === "freebsd";
export const isPosix: boolean = isMacOS || isLinux || isFreeBSD;
export const isWindows: boolean = process.platform === "win32";
export const isDebug: boolean = Bun.version.includes("debug");
export const isCI: boolean = process.env.CI !== undefined;
/** Marks tests known broken on CI, as Bun's harness does. */
export const isBroken: boolean = isCI;

/** The environment Bun's tests give the processes they start: the test's own, quietened and pinned. */
export const bunEnv: Record<string, string | undefined> = {
  ...process.env,
  JSC_useJIT: undefined,
  GITHUB_ACTIONS: "false",
  BUN_DEBUG_QUIET_LOGS: "1",
  NO_COLOR: "1",
  FORCE_COLOR: undefined,
  TZ: "Etc/UTC",
  CI: "1",
  BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0",
  BUN_FEATURE_FLAG_INTERNAL_FOR_TESTING: "1",
  BUN_GARBAGE_COLLECTOR_LEVEL: process.env.BUN_GARBAGE_COLLECTOR_LEVEL || "0",
  BUN_FEATURE_FLAG_EXPERIMENTAL_BAKE: "1",
  BUN_DEBUG_linkerctx: "0",
  WANTS_LOUD: "0",
  AGENT: "false",
};
if (isWindows) bunEnv.SHELLOPTS = "igncr";
for (const key of Object.keys(bunEnv)) {
  if (bunEnv[key] === undefined) delete bunEnv[key];
  if (key.startsWith("BUN_DEBUG_") && key !== "BUN_DEBUG_QUIET_LOGS") delete bunEnv[key];
  if (key.startsWith("BUILDKITE")) delete bunEnv[key];
}
delete bunEnv.BUN_INSPECT_CONNECT_TO;
delete bunEnv.NODE_ENV;
if (isDebug) bunEnv.BUN_DEBUG_NO_DUMP = "1";

/** The running bun. */
export function bunExe(): string {
  if (isWindows) return process.execPath.replaceAll("\\", "/");
  return process.execPath;
}

/** The shell Bun's tests use: bash, pwsh on Windows. */
export function shellExe(): string {
  return isWindows ? "pwsh" : "bash";
}

/** A forced garbage collection, then a turn of the event loop (so finalizers run). */
export function gcTick(trace = false): Promise<void> {
  if (trace) console.trace("");
  bunGC(true);
  return Bun.sleep(0);
}

/** Runs `block` with the garbage collector's aggression level at 0 (when the build has one). */
export function withoutAggressiveGC<T>(block: () => T): T {
  if (!unsafe.gcAggressionLevel) return block();
  const level = unsafe.gcAggressionLevel();
  unsafe.gcAggressionLevel(0);
  try {
    return block();
  } finally {
    unsafe.gcAggressionLevel(level);
  }
}

/** The highest fd open in this process (from /proc/self/fd or /dev/fd; else the next free one). */
export function getMaxFD(): number {
  if (isMacOS || isLinux) {
    let max = -1;
    for (const entry of fs.readdirSync(isMacOS ? "/dev/fd" : "/proc/self/fd")) {
      const fd = parseInt(entry.trim(), 10);
      if (Number.isSafeInteger(fd) && fd >= 0) max = Math.max(max, fd);
    }
    if (max >= 0) return max;
  }
  const next = fs.openSync("/dev/null", "r");
  fs.closeSync(next);
  return next;
}

/** A new temporary directory (under the real path of the system's). */
export function tmpdirSync(pattern = "bun.test."): string {
  return fs.mkdtempSync(join(fs.realpathSync.native(os.tmpdir()), pattern));
}

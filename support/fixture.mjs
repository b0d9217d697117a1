/**
 * What every benchmark shares: the deterministic 163 KB file they `cat`, the C loop they compare with, the median and
 * percentiles they report, the loop-lag sampler, and how they read counts from the environment.
 * Plain JavaScript, so that the Node scripts under tools/ import it on any Node as well as Deno, Bun and
 * the TypeScript benchmarks.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import process from "node:process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** Size of the cat fixture in bytes. */
export const CAT_BYTES = 163 * 1024;

/**
 * The cat fixture's bytes: byte `i` is `(31 i + ⌊i / 256⌋) mod 256`, so no run of it repeats a block.
 * @returns {Uint8Array}
 */
export function catFixtureBytes() {
  return new Uint8Array(CAT_BYTES).map((_, i) => (i * 31 + (i >> 8)) & 0xff);
}

/**
 * Writes the cat fixture as `163k.bin` in `dir`.
 * @param {string} dir
 * @returns {string} the file's path
 */
export function writeCatFixture(dir) {
  const file = join(dir, "163k.bin");
  writeFileSync(file, catFixtureBytes());
  return file;
}

/**
 * Builds bench/reference/spawn_loop.c (the machine's spawn ceiling and floor) as `spawn_loop` in `dir` with the
 * system's C compiler.
 * @param {string} dir
 * @returns {string | undefined} the program's path; undefined without a working `cc`
 */
export function buildSpawnLoop(dir) {
  const exe = join(dir, "spawn_loop");
  const source = fileURLToPath(new URL("../bench/reference/spawn_loop.c", import.meta.url));
  try {
    execFileSync("cc", ["-O2", "-o", exe, source], { stdio: "ignore" });
    return exe;
  } catch {
    return undefined;
  }
}

/**
 * The median of `xs` (the upper one of an even count).
 * @param {readonly number[]} xs
 * @returns {number}
 */
export function median(xs) {
  return [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
}

/**
 * The `p` quantile (0 to 1) of `sorted`, an ascending list: the value at index ⌊length · p⌋, the last at most.
 * @param {readonly number[]} sorted
 * @param {number} p
 * @returns {number}
 */
export function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))];
}

/** Now, in ms since the epoch: one clock for every process on the machine. */
export const epochNow = () => performance.timeOrigin + performance.now();

/**
 * Runs a 1 ms timer until stopped and reports, for each firing, when it fired (ms since the epoch) and how many ms
 * later than due.
 * @param {(at: number, late: number) => void} onFired
 * @returns {() => void} stops the timer
 */
export function sampleLag(onFired) {
  let due = epochNow() + 1;
  let timer;
  const tick = () => {
    const at = epochNow();
    onFired(at, Math.max(0, at - due));
    due = at + 1;
    timer = setTimeout(tick, 1);
  };
  timer = setTimeout(tick, 1);
  return () => clearTimeout(timer);
}

/**
 * An integer count from the environment variable `name`, or `fallback` when it is unset; throws unless it is an
 * integer of at least `min` (a typo must not make a benchmark run nothing and pass).
 * @param {string} name
 * @param {number} fallback
 * @param {number} [min]
 * @returns {number}
 */
export function countOf(name, fallback, min = 1) {
  const raw = process.env[name];
  const value = raw === undefined ? fallback : Number(raw);
  if (!Number.isInteger(value) || value < min) {
    throw new Error(`${name} must be an integer of at least ${min}, not ${JSON.stringify(raw)}`);
  }
  return value;
}

/**
 * The arguments that run `script` under `runtime` from this checkout (Deno with every permission).
 * @param {"deno" | "bun" | "node"} runtime
 * @param {string} script
 * @returns {string[]}
 */
export function scriptArgs(runtime, script) {
  return runtime === "deno" ? ["run", "-A", "--quiet", script] : [script];
}

/**
 * Waits until `child` (its stdout piped) prints "ready" as its first line. Resolves with `exited`, which settles
 * when it closes (rejecting unless it exited with 0), and `stdout()`, what it printed so far. Rejects if it fails
 * to start or exits before it is ready.
 * @param {import("node:child_process").ChildProcess} child
 * @param {string} name how errors name it
 * @returns {Promise<{ exited: Promise<void>, stdout: () => string }>}
 */
export async function untilReady(child, name) {
  let output = "";
  const exited = new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => code === 0 ? resolve() : reject(new Error(`${name} exited with ${code}`)));
  });
  await new Promise((resolve, reject) => {
    child.stdout.setEncoding("utf8").on("data", (text) => {
      output += text;
      if (output.startsWith("ready\n")) resolve();
    });
    exited.then(() => reject(new Error(`${name} exited before it was ready`)), reject);
  });
  return { exited, stdout: () => output };
}

/**
 * Coverage-guided fuzzing of the native worker: a short run of tools/fuzz_native.mjs, libFuzzer on its two harnesses
 * (native/fuzz/: the frame decoder into every frame's handling, and the JSON parser with the validation of spawn
 * requests), from the committed seeds. It must end without a crash, a sanitizer report, a leak or a failed check of a
 * harness, and reach coverage in both.
 *
 * It runs once, under node --test; deno test and bun test skip it (tools/test.mjs runs every file under each). Without
 * a clang that has libFuzzer, the run installs the pinned Debian packages with apt-get as root (support/libfuzzer.mjs);
 * where it cannot, the test fails, saying what to install.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { describe, it } from "node:test";
import { HOST } from "./_helpers.ts";

/** Fuzzing time in all: 2/3 to the frame harness, 1/3 to the JSON one (and the build, the first time). */
const SECONDS = 36;
const TOOL = fileURLToPath(new URL("../tools/fuzz_native.mjs", import.meta.url).href);
const skip = HOST === "node" ? false : "the libFuzzer run is node's (tools/test.mjs runs this file under node --test)";

function runTool(args: string[]): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [TOOL, ...args], { stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()));
    child.on("close", (code) => resolve({ code, output }));
  });
}

describe(`${HOST} host, libFuzzer on the native worker`, { skip }, () => {
  it(`fuzzes the frame decoder and the JSON parser for ${SECONDS} s: no crash, coverage in both`, async () => {
    const { code, output } = await runTool([String(SECONDS), "--install"]);
    const summary = output.split("\n").filter((line) => line.startsWith("fuzz_native:"));
    console.log(summary.join("\n"));
    assert.notEqual(code, 2, output.split("\n").find((line) => line.startsWith("fuzz_native:")) ?? output);
    assert.equal(code, 0, `tools/fuzz_native.mjs exited ${code}:\n${output.split("\n").slice(-80).join("\n")}`);
    assert.match(output, /^fuzz_native: no crash$/m);
    for (const name of ["frames", "json"]) {
      const seeds = new RegExp(`^fuzz_native: ${name}: the seeds: cov (\\d+)`, "m").exec(output);
      const end = new RegExp(`^fuzz_native: ${name}: cov (\\d+), ft (\\d+), corpus (\\d+) inputs`, "m").exec(output);
      assert.ok(seeds && end, `no coverage reported for the ${name} harness:\n${summary.join("\n")}`);
      const [cov, ft, corpus] = end.slice(1).map(Number);
      assert.ok(cov > 0 && ft > 0 && corpus > 0, `${name}: cov ${cov}, ft ${ft}, corpus ${corpus}`);
      assert.ok(cov >= Number(seeds[1]), `${name}: cov ${cov} below the seeds' ${seeds[1]}`);
    }
  });
});

/**
 * The clang, with libFuzzer, that builds the native worker's fuzz harnesses (tools/fuzz_native.mjs): $CLANG when set,
 * else `clang-14` (Debian 12's), else `clang`, the first that links a `-fsanitize=fuzzer,address,undefined` program.
 *
 * Nothing is installed unless asked: ensureLibFuzzer({ install: true }) (tools/fuzz_native.mjs --install, which
 * tests/native_libfuzzer_test.ts runs) installs the pinned Debian packages, CLANG_PACKAGES, with apt-get when no clang
 * has libFuzzer, as root only; otherwise, and when that fails, libFuzzerMissing() says what to install.
 * Plain JavaScript, so that it runs under any Node (a fresh machine's own), Deno and Bun.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { aptInstall, runs } from "./apt.mjs";

/** The Debian 12 (bookworm) packages of clang 14 and its compiler-rt (libFuzzer, the sanitizers), pinned. */
export const CLANG_PACKAGES = ["clang-14=1:14.0.6-12", "libclang-rt-14-dev=1:14.0.6-12"];

/**
 * Why `clang` cannot build a libFuzzer program, or undefined when it can.
 * @param {string} clang
 * @returns {string | undefined}
 */
function probe(clang) {
  if (!runs(clang, ["--version"])) return `${clang}: not found`;
  const dir = mkdtempSync(join(tmpdir(), "spawnpool-libfuzzer-probe-"));
  try {
    const source = join(dir, "probe.c");
    writeFileSync(
      source,
      "#include <stddef.h>\n#include <stdint.h>\n" +
        "int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);\n" +
        "int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { (void)data; (void)size; return 0; }\n",
    );
    execFileSync(clang, ["-fsanitize=fuzzer,address,undefined", "-o", join(dir, "probe"), source], {
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 120_000,
    });
    return undefined;
  } catch (error) {
    // The linker's own words (a missing libclang_rt.fuzzer) rather than clang's last line.
    const lines = /** @type {{ stderr?: Buffer }} */ (error).stderr?.toString().trim().split("\n") ?? [];
    const stderr = lines.find((line) => /cannot find|No such file/.test(line)) ?? lines.pop();
    return `${clang} cannot link a libFuzzer program: ${stderr?.trim() || /** @type {Error} */ (error).message}`;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** @type {{ clang?: string, missing?: string } | undefined} */
let found;

/**
 * The first clang that builds libFuzzer programs, or why there is none.
 * @returns {{ clang?: string, missing?: string }}
 */
export function findClang() {
  if (found) return found;
  const candidates = process.env.CLANG ? [process.env.CLANG] : ["clang-14", "clang"];
  const why = [];
  for (const clang of candidates) {
    const failure = probe(clang);
    if (failure === undefined) return (found = { clang });
    why.push(failure);
  }
  return (found = { missing: libFuzzerMissing(why.join("; ")) });
}

/**
 * What to install, after `why`.
 * @param {string} why
 */
export function libFuzzerMissing(why) {
  const sudo = process.getuid?.() === 0 ? "" : "sudo ";
  return `no clang with libFuzzer (${why}). On Debian 12: \`${sudo}apt-get install ${CLANG_PACKAGES.join(" ")}\` ` +
    "(or `node tools/fuzz_native.mjs --install` as root); elsewhere install clang with its compiler-rt " +
    "(libFuzzer and the sanitizers) and set CLANG to it";
}

/**
 * findClang(), after installing CLANG_PACKAGES with apt-get when none is found and `install` is set (as root, without
 * $CLANG: a chosen clang is never replaced). Prints what it installs.
 * @param {{ install?: boolean }} [options]
 * @returns {{ clang?: string, missing?: string }}
 */
export function ensureLibFuzzer({ install = false } = {}) {
  const first = findClang();
  if (first.clang || !install || process.env.CLANG) return first;
  const refuse = (why) => (found = { missing: `${first.missing} Not installed: ${why}.` });
  const failed = aptInstall(CLANG_PACKAGES, "support/libfuzzer.mjs");
  if (failed !== undefined) return refuse(failed);
  found = undefined;
  return findClang();
}

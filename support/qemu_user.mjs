/**
 * The other Linux architecture's native worker, run under qemu-user: on an x64 machine the linux-arm64 build
 * (`qemu-aarch64`), on an arm64 one the linux-x64 build (`qemu-x86_64`), both cross-compiled by support/build_native.mjs.
 * qemu-user translates the worker's own instructions and passes its system calls to this machine's kernel, so the
 * commands it starts are this machine's programs, run natively, children of the qemu process (whose pid the wrapper
 * keeps: it `exec`s qemu).
 *
 * Nothing is installed unless asked: ensureQemu({ install: true }) (tools/test.mjs) installs the pinned Debian package,
 * QEMU_PACKAGES, with apt-get when no qemu is found, as root only; otherwise, and when that fails, qemuMissing() says
 * what to install. Plain JavaScript, so that it runs under any Node (a fresh machine's own), Deno and Bun.
 *
 * @module
 */

import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { aptInstall, runs } from "./apt.mjs";
import { fileURLToPath } from "node:url";

/** Debian 12 (bookworm)'s qemu-user (qemu 7.2: `qemu-aarch64`, `qemu-x86_64`, ...), pinned. */
export const QEMU_PACKAGES = ["qemu-user=1:7.2+dfsg-7+deb12u18+b3"];

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

/**
 * The worker build this machine emulates: the other of Linux's two targets (support/build_native.mjs
 * PLATFORM_TARGETS), its binary's path and the qemu command that runs it; undefined on any other machine.
 * @returns {{ arch: string, binary: string, qemu: string } | undefined}
 */
export function emulatedTarget() {
  if (process.platform !== "linux") return undefined;
  const other = { x64: { arch: "arm64", qemu: "qemu-aarch64" }, arm64: { arch: "x64", qemu: "qemu-x86_64" } }[
    /** @type {string} */ (process.arch)
  ];
  if (other === undefined) return undefined;
  return { ...other, binary: join(root, "native", "build", "cross", `linux-${other.arch}`, "spawnpool-worker") };
}

/**
 * The qemu command for emulatedTarget() when it runs here, or why it does not.
 * @returns {{ qemu?: string, missing?: string }}
 */
export function findQemu() {
  const target = emulatedTarget();
  if (target === undefined) {
    return { missing: `no other Linux target to emulate on ${process.platform}-${process.arch}` };
  }
  if (runs(target.qemu, ["--version"])) return { qemu: target.qemu };
  return { missing: qemuMissing(`${target.qemu}: not found`) };
}

/** Whether the emulated worker's step must run (on CI, or with SPAWNPOOL_REQUIRE_QEMU set): no qemu is a failure. */
export function qemuRequired() {
  return Boolean(process.env.CI || process.env.SPAWNPOOL_REQUIRE_QEMU);
}

/**
 * What to install, after `why`.
 * @param {string} why
 */
export function qemuMissing(why) {
  const sudo = process.getuid?.() === 0 ? "" : "sudo ";
  return `no qemu-user (${why}). On Debian 12: \`${sudo}apt-get install ${QEMU_PACKAGES.join(" ")}\`; ` +
    "elsewhere install your distribution's qemu-user (it needs no binfmt_misc)";
}

/**
 * findQemu(), after installing QEMU_PACKAGES with apt-get when none is found and `install` is set (as root, on Debian).
 * Prints what it installs.
 * @param {{ install?: boolean }} [options]
 * @returns {{ qemu?: string, missing?: string }}
 */
export function ensureQemu({ install = false } = {}) {
  const first = findQemu();
  if (first.qemu || !install || emulatedTarget() === undefined) return first;
  const refuse = (why) => ({ missing: `${first.missing} Not installed: ${why}.` });
  const failed = aptInstall(QEMU_PACKAGES, "support/qemu_user.mjs");
  if (failed !== undefined) return refuse(failed);
  return findQemu();
}

/**
 * An executable that runs emulatedTarget()'s worker under qemu, for a pool's `execPath` with `runtime: "native"`: a
 * shell script beside the binary (`spawnpool-worker-qemu`) that `exec`s qemu, so the worker's pid is qemu's (the parent
 * of its commands, as the host checks through /proc). Throws, saying what is missing, when the binary or qemu is.
 * @returns {string}
 */
export function emulatedWorker() {
  const target = emulatedTarget();
  const { qemu, missing } = findQemu();
  if (target === undefined || qemu === undefined) throw new Error(`Cannot run an emulated native worker: ${missing}`);
  if (!existsSync(target.binary)) {
    throw new Error(
      `Cannot run an emulated native worker: no ${target.binary} (\`node support/build_native.mjs --packages\` builds it)`,
    );
  }
  const quote = (s) => `'${s.replaceAll("'", `'\\''`)}'`;
  const script = `#!/bin/sh\nexec ${quote(qemu)} ${quote(target.binary)} "$@"\n`;
  const path = `${target.binary}-qemu`;
  let current;
  try {
    current = readFileSync(path, "utf8");
  } catch {
    current = undefined;
  }
  // Test files run at once: each writes its own copy and renames it over, so none runs a half-written script.
  if (current !== script) {
    const temp = `${path}.${process.pid}`;
    writeFileSync(temp, script, { mode: 0o755 });
    renameSync(temp, path);
  }
  return path;
}

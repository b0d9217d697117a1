// Running a program to its end and keeping what it wrote: what tools/test.mjs does with each test runner, and what the
// tests that run a Deno host script do with it.
import { spawn } from "node:child_process";

/**
 * Runs `cmd` with `args` (no stdin), stdout and stderr together in `out`; resolves with its exit status once it has
 * ended. A run past `ms` is killed with SIGKILL (`timedOut` then says so), and resolves at most 5 s later even if what
 * it started still holds its output open, so nothing waits on it for ever.
 *
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ cwd?: string, env?: Record<string, string | undefined>, ms: number }} options
 * @returns {Promise<{ status: number | null, out: string, timedOut: boolean, error?: string }>}
 */
export function runCollecting(cmd, args, { cwd, env, ms }) {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let error;
    let timedOut = false;
    child.stdout.setEncoding("utf8").on("data", (chunk) => (out += chunk));
    child.stderr.setEncoding("utf8").on("data", (chunk) => (out += chunk));
    let done = false;
    const finish = (status) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      resolve({ status, out, timedOut, error });
    };
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
      // A grandchild may hold the pipes: their end is not waited for past this.
      setTimeout(() => {
        child.stdout.destroy();
        child.stderr.destroy();
        finish(child.exitCode);
      }, 5000).unref();
    }, ms);
    child.on("error", (e) => (error = e.message));
    child.on("close", (status) => finish(status));
  });
}

// Runs a test process for the compatibility runners (tools/compat.mjs, tools/compat_shapes.mjs): in a process
// group of its own, killed with that group after `timeout` seconds and once it exits, keeping the tail of its output.
import { spawn } from "node:child_process";
import { basename } from "node:path";

/**
 * Runs `command` with `args`; resolves to { code, signal, output, timedOut }. It resolves on exit, not on close: a
 * process the test leaves behind can hold the pipes open. Those in the group are killed; one outside it (spawnpool
 * runs commands in process groups of their own) is reported, and its pipes are let go after 2 s.
 */
export function runGrouped(command, args, { cwd, env, timeout, keepChars }) {
  return new Promise((done) => {
    const child = spawn(command, args, { cwd, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let output = "";
    const keep = (chunk) => (output = (output + chunk).slice(-keepChars));
    child.stdout.on("data", keep);
    child.stderr.on("data", keep);
    let timedOut = false;
    const kill = () => {
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        // gone
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      kill();
    }, timeout * 1000);
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      kill();
      const finish = () => {
        clearTimeout(late);
        child.stdout.destroy();
        child.stderr.destroy();
        done({ code, signal, output, timedOut });
      };
      const late = setTimeout(() => {
        console.log(`  (${basename(command)}: a process left behind outside its group holds its output open)`);
        finish();
      }, 2000);
      child.on("close", finish);
    });
  });
}

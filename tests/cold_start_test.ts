/**
 * Cold start: a script that runs one command through the default pool exits on its own, with the command's output,
 * and leaves no process behind (its workers go with it); a pool starts workers as requests need them, not all at the
 * first. Speed is measured in bench/cold_start.mjs, not here.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { describe, it } from "node:test";
import { Pool } from "../mod.ts";
import { fixture, hostArgv, withTimeout } from "./_helpers.ts";
import { inSession } from "../support/session.mjs";

/**
 * Runs the one-command fixture in a session of its own; resolves once it exited and its output closed, with what it
 * printed and the processes of its session still alive when it had exited, and 1 s later (what is left then is killed).
 */
function runScript(
  shape: string,
  ...rest: string[]
): Promise<{ code: number | null; stdout: string; atExit: number[]; later: number[] }> {
  const [exe, ...args] = hostArgv(fixture("one_command.ts"), shape, ...rest);
  return new Promise((resolve, reject) => {
    const child = spawn(exe, args, { stdio: ["ignore", "pipe", "inherit"], detached: true });
    let stdout = "";
    let code: number | null = null;
    let atExit: number[] = [];
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.on("error", reject);
    child.on("exit", (exitCode) => {
      code = exitCode;
      atExit = inSession(child.pid!);
    });
    child.on("close", async () => {
      const deadline = performance.now() + 1000;
      while (inSession(child.pid!).length > 0 && performance.now() < deadline) {
        await new Promise((r) => setTimeout(r, 10));
      }
      const later = inSession(child.pid!);
      for (const pid of later) process.kill(pid, "SIGKILL");
      resolve({ code, stdout, atExit, later });
    });
  });
}

describe("a script that runs one command through the default pool", () => {
  for (const shape of ["command", "spawn", "node"]) {
    it(`${shape}: exits on its own with the output, and leaves no process in its session`, async () => {
      const run = await withTimeout(runScript(shape), 30_000, "the script did not exit on its own");
      assert.deepEqual({ code: run.code, stdout: run.stdout }, { code: 0, stdout: "one\n" });
      assert.deepEqual(run.later, [], `processes left in the script's session (at its exit: ${run.atExit})`);
    });

    it(`${shape}: exiting at once with a command running (Deno.exit on Deno) takes the workers and the command`, async () => {
      const run = await withTimeout(runScript(shape, "exit"), 30_000, "the script did not exit");
      assert.deepEqual({ code: run.code, stdout: run.stdout }, { code: 0, stdout: "one\n" });
      assert.deepEqual(run.later, [], `processes left in the script's session (at its exit: ${run.atExit})`);
    });
  }

  it("command: a pool closed from an exit listener, after its own exit hook, still lets the script exit", async () => {
    const run = await withTimeout(runScript("command", "close-on-exit"), 30_000, "the script did not exit");
    assert.deepEqual({ code: run.code, stdout: run.stdout }, { code: 0, stdout: "one\n" });
    assert.deepEqual(run.later, [], `processes left in the script's session (at its exit: ${run.atExit})`);
  });
});

describe("a pool starts workers as requests need them", () => {
  it("one command at a time: one worker; a burst: up to the size", async () => {
    await using pool = new Pool({ size: 3 });
    for (let i = 0; i < 3; i++) await pool.command("true").output();
    assert.equal(pool.stats().started, 1);
    await Promise.all(Array.from({ length: 6 }, () => pool.command("sleep", { args: ["0.2"] }).output()));
    // The burst asked for the other two; on a loaded machine they may finish starting after it ended.
    const deadline = performance.now() + 10_000;
    while (pool.stats().started < 3 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.equal(pool.stats().started, 3);
    assert.equal(pool.stats().workers.length, 3);
  });

  it("ready() still starts every worker", async () => {
    await using pool = new Pool({ size: 2 });
    await pool.ready();
    assert.equal(pool.stats().workers.filter((w) => w.ready).length, 2);
  });
});

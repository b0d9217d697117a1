/**
 * Pools of native workers through the real host, against real commands: the ASan+UBSan build (a sanitizer report or
 * a leak fails the test) and the poll() and SIGCHLD build, the loop other systems get.
 *
 * @module
 */

import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { Pool, SpawnError, SpawnPoolError } from "../mod.ts";
import { HOST } from "./_helpers.ts";
import { ASAN_WORKER, POLL_WORKER, SANITIZER_ENV, text } from "./_native.ts";

/** What a pool of native workers must do, against real commands; `scratch` is a directory to write a script in. */
async function poolScenarios(pool: InstanceType<typeof Pool>, scratch: string): Promise<void> {
  await pool.ready();
  assert.equal(pool.stats().runtime, "native");
  const echo = await pool.command("echo", { args: ["hi", "ünï😀"] }).output();
  assert.equal(text(echo.stdout), "hi ünï😀\n");
  const input = new Uint8Array(3 * 1024 * 1024).map((_, i) => (i * 13) & 0xff);
  const cat = pool.spawn(["cat"], { stdin: input });
  assert.deepEqual(new Uint8Array(await new Response(cat.stdout).arrayBuffer()), input);
  const env = await pool.command("/usr/bin/env", { clearEnv: true, env: { ONLY: "this" } }).output();
  assert.equal(text(env.stdout), "ONLY=this\n");
  const streamed = pool.spawn(["head", "-c", "20000000", "/dev/zero"]);
  assert.equal((await new Response(streamed.stdout).arrayBuffer()).byteLength, 20_000_000);
  await assert.rejects(
    pool.command("sleep", { args: ["30"], timeout: 50 }).output(),
    (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_TIMEOUT",
  );
  await assert.rejects(
    pool.command("yes", { maxBuffer: 10_000 }).output(),
    (e: unknown) => e instanceof SpawnPoolError && e.code === "ERR_MAX_BUFFER",
  );
  // Relative programs and cwds: the host's own check leaves them to the worker, whose failures these are.
  for (
    const [cmd, cwd, code] of [["./spawnpool-no-such-program", undefined, "ENOENT"], [
      "pwd",
      "spawnpool-no-such-dir",
      "ENOENT",
    ], ["passwd/x", "/etc", "ENOTDIR"]] as const
  ) {
    const error = await pool.spawn([cmd], { cwd }).exited.then(() => null, (e) => e);
    assert.ok(error instanceof SpawnError && error.code === code, `${cmd}: ${error}`);
  }
  // A script without "#!" runs in the shell, as with Node's spawn (execvp).
  const script = join(scratch, "no-shebang");
  writeFileSync(script, "echo from a script without a shebang\n", { mode: 0o755 });
  assert.equal(text((await pool.command(script).output()).stdout), "from a script without a shebang\n");
  const killed = pool.spawn(["sleep", "30"]);
  await killed.spawned;
  killed.kill("SIGKILL");
  assert.equal(await killed.exited, 137);
  // Many children at once, each reaped.
  const many = await Promise.all(
    Array.from({ length: 40 }, (_, i) => pool.command("echo", { args: [`${i}`] }).output()),
  );
  assert.deepEqual(many.map((out) => text(out.stdout)), Array.from({ length: 40 }, (_, i) => `${i}\n`));
  // A grandchild holding stdout does not hold the request (the 200 ms grace).
  const held = await pool.command("sh", { args: ["-c", "sleep 30 & echo $!"] }).output();
  process.kill(Number(text(held.stdout).trim()), "SIGKILL");
}

describe(`${HOST} host, pools of native workers (ASan and UBSan, and poll() builds)`, () => {
  it("runs pool scenarios without a sanitizer report or a leak", async () => {
    const logs = mkdtempSync(join(tmpdir(), "spawnpool-asan-"));
    const saved = { ASAN_OPTIONS: process.env.ASAN_OPTIONS, UBSAN_OPTIONS: process.env.UBSAN_OPTIONS };
    // The workers inherit the host's environment: reports go to files named after the worker's pid.
    process.env.ASAN_OPTIONS = `${SANITIZER_ENV.ASAN_OPTIONS}:log_path=${join(logs, "asan")}`;
    process.env.UBSAN_OPTIONS = `${SANITIZER_ENV.UBSAN_OPTIONS}:log_path=${join(logs, "ubsan")}`;
    const pool = new Pool({ size: 2, runtime: "native", execPath: ASAN_WORKER });
    try {
      await poolScenarios(pool, logs);
    } finally {
      process.env.ASAN_OPTIONS = saved.ASAN_OPTIONS ?? "";
      process.env.UBSAN_OPTIONS = saved.UBSAN_OPTIONS ?? "";
      await pool.close();
    }
    const reports = readdirSync(logs).filter((name) => name !== "no-shebang").map((name) =>
      readFileSync(join(logs, name), "utf8")
    );
    rmSync(logs, { recursive: true, force: true });
    assert.deepEqual(reports, [], "sanitizer reports");
  });

  it("the poll() and SIGCHLD build (what systems without epoll and pidfd run) passes the same scenarios", async () => {
    assert.ok(existsSync(POLL_WORKER), `${POLL_WORKER} exists (npm run build:native)`);
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-poll-"));
    const pool = new Pool({ size: 2, runtime: "native", execPath: POLL_WORKER });
    try {
      await poolScenarios(pool, scratch);
    } finally {
      await pool.close();
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

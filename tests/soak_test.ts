/**
 * A short soak on real processes: 2,000 mixed spawns (echo, 163 KB cat, missing program, failing exit,
 * killed sleep, cancelled yes) at 64 in flight through one pool. Every result must be right, and afterwards the host's
 * open fds and child processes must be what they were. `bench/soak.ts` runs the same for 100,000.
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Pool } from "../mod.ts";
import { HOST } from "./_helpers.ts";
import { soak } from "../support/soak.ts";

describe("soak", () => {
  it("2,000 mixed spawns at 64 in flight: all correct, no fd or process left behind", async () => {
    const pool = new Pool({ runtime: HOST }); // the host's own workers, as when they were the default
    const report = await soak(pool, 2000, 64, mkdtempSync(join(tmpdir(), "spawnpool-soak-")));
    assert.deepEqual(report.wrong, []);
    assert.equal(report.fds.after, report.fds.before, "open fds");
    assert.equal(report.children.after, report.children.before, "child processes (the workers)");
    await pool.close();
  });
});

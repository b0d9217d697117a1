/**
 * Soaks on real processes: mixed spawns at 64 in flight through one pool (echo, 163 KB cat collected and streamed,
 * missing program, failing exit, killed sleep, cancelled yes, and `yes` killed, timed out or left with its output
 * unread): 10,000 on native workers (under Node), 2,000 on the host's own (under each host). Every result and every output read must be right, and
 * afterwards the host's open fds and child processes, and the workers' fds and children, must be what they were.
 * `bench/soak.ts` runs the same for 100,000.
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { Pool, type WorkerRuntime } from "../mod.ts";
import { HOST } from "./_helpers.ts";
import { soak } from "../support/soak.ts";

describe("soak", () => {
  // The long native soak once, under node --test (tools/test.mjs runs every file under each host); the host's own
  // workers under each.
  const runs: Array<[WorkerRuntime, number]> = HOST === "node" ? [["native", 10_000], [HOST, 2_000]] : [[HOST, 2_000]];
  for (const [runtime, spawns] of runs) {
    it(`${spawns.toLocaleString("en")} mixed spawns on ${runtime} workers at 64 in flight: all correct, nothing left behind`, async () => {
      const pool = new Pool({ runtime });
      const report = await soak(pool, spawns, 64, mkdtempSync(join(tmpdir(), "spawnpool-soak-")));
      assert.deepEqual(report.wrong, []);
      assert.equal(report.fds.after, report.fds.before, "open fds");
      assert.equal(report.children.after, report.children.before, "child processes (the workers)");
      assert.equal(report.workers.children.after, 0, "the workers' children (commands, zombies)");
      // A Deno worker opens and closes a few fds of its own now and then; a leak per command would be thousands.
      assert.ok(report.workers.fds.after <= report.workers.fds.before + 4, JSON.stringify(report.workers.fds));
      await pool.close();
    });
  }
});

/**
 * Soaks on real processes (support/soak.ts): mixed spawns at 64 in flight through one pool (echo, 163 KB cat collected
 * and streamed, missing program, failing exit, killed sleep, cancelled yes, and `yes` killed, timed out or left with its
 * output unread): 10,000 on native workers (under Node), 2,000 on the host's own (under each host). Every result and
 * every output read must be right, and afterwards the host's open fds and child processes, and the workers' fds and
 * children, must be what they were. `bench/soak.ts` runs the same for 100,000.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { WorkerRuntime } from "../mod.ts";
import { HOST } from "./_helpers.ts";
import { runSoak } from "../support/soak.ts";

describe("soak", () => {
  // The long native soak once, under node --test (tools/test.mjs runs every file under each host); the host's own
  // workers under each.
  const runs: Array<[WorkerRuntime, number]> = HOST === "node" ? [["native", 10_000], [HOST, 2_000]] : [[HOST, 2_000]];
  for (const [runtime, spawns] of runs) {
    it(`${spawns.toLocaleString("en")} mixed spawns on ${runtime} workers at 64 in flight: all correct, nothing left behind`, async () => {
      const { problems } = await runSoak(runtime, spawns);
      assert.deepEqual(problems, []);
    });
  }
});

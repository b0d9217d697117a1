/**
 * The differential suite of the `./node` drop-in: every scenario runs once through the runtime's own
 * `node:child_process` and once through `spawnpool/node`, and what a program can observe (events and
 * their order, exit codes and signals, output bytes, error fields, thrown errors) must be equal.
 * Runs under `node --test`, `bun test` and `deno test`.
 *
 * Where the runtime's own `node:child_process` departs from Node's (Bun and Deno in a few places), the
 * scenario names the fields it does not compare on that runtime and why; the pooled side is then held to
 * Node's behaviour by `expectPooled`.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { HOST } from "./_helpers.ts";
import {
  COMPAT_WORKERS,
  EVERY_SCENARIO_DIFFERS,
  IN_HOST,
  inScenarioPool,
  isObject,
  MODULES,
  omit,
  type Scenario,
  stateful,
} from "./_node_compat.ts";
import { spawnScenarios } from "./_node_compat_spawn.ts";
import { execScenarios } from "./_node_compat_exec.ts";
import { socketScenarios } from "./_node_compat_sockets.ts";

const scenarios: Scenario[] = [...spawnScenarios, ...socketScenarios, ...execScenarios];

describe(`node:child_process vs spawnpool/node (${HOST})`, () => {
  it(`has at least 60 scenarios (${scenarios.length})`, () => {
    assert.ok(scenarios.length >= 60);
    assert.equal(new Set(scenarios.map((s) => s.name)).size, scenarios.length, "scenario names are unique");
  });

  for (const scenario of scenarios) {
    it(scenario.name, async () => {
      const results: Record<string, unknown> = {};
      for (const [which, cp] of MODULES) {
        const state = stateful[scenario.name];
        state?.before();
        try {
          const result = which === "pooled" ? await inScenarioPool(() => scenario.run(cp)) : await scenario.run(cp);
          results[which] = scenario.normalize ? scenario.normalize(result as Record<string, unknown>) : result;
        } finally {
          state?.after();
        }
      }
      const differs = scenario.nativeDiffers?.[HOST];
      const fields = [
        ...differs?.fields ?? [],
        ...scenario.poolDiffers?.fields ?? [],
        ...scenario.spawnerDiffers?.[IN_HOST ? HOST : COMPAT_WORKERS ?? HOST]?.fields ?? [],
        ...scenario.spawnerDiffers?.[HOST]?.fields ?? [],
        ...(IN_HOST ? scenario.spawnerDiffers?.["in-host"]?.fields ?? [] : []),
        ...EVERY_SCENARIO_DIFFERS[HOST]?.fields ?? [],
      ];
      if (isObject(results.pooled) && "connected" in results.pooled && !scenario.runsNatively) {
        assert.equal(results.pooled.connected, false);
      }
      assert.deepEqual(omit(results.pooled, fields), omit(results.native, fields));
      scenario.expectPooled?.(results.pooled as Record<string, unknown>);
    });
  }
});

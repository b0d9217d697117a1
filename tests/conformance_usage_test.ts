/**
 * What a command used, on every shape: the Bun shape's `resourceUsage()` (Bun's), the Deno shape's `output()` result
 * and child, and the drop-in's ChildProcess. Native and Bun workers tell; Node and Deno workers cannot (their runtimes
 * give no per-child usage), and say undefined.
 */

import assert from "node:assert/strict";
import { it } from "node:test";
import { type ChildProcess, childProcessFor } from "../node.ts";
import type { ResourceUsage } from "../mod.ts";
import { forEachWorker } from "./_conformance.ts";

/** 300 ms of CPU in user space, then exit. */
const BUSY = ["python3", "-c", "import resource\nwhile resource.getrusage(resource.RUSAGE_SELF).ru_utime < 0.3: pass"];
/** 100 MB allocated and touched. */
const BIG = ["python3", "-c", "b = bytearray(100 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1"];

function checkShape(usage: ResourceUsage): void {
  assert.equal(typeof usage.cpuTime.user, "bigint");
  assert.equal(usage.cpuTime.total, usage.cpuTime.user + usage.cpuTime.system);
  for (const count of [usage.maxRSS, usage.contextSwitches.voluntary, usage.ops.in, usage.signalCount]) {
    assert.ok(Number.isSafeInteger(count) && count >= 0, String(count));
  }
}

await forEachWorker("what a command used (resourceUsage)", (pool, runtime) => {
  const tells = runtime === "native" || runtime === "bun";

  it(`a 300 ms busy loop reports at least 200 ms of user CPU on every shape${tells ? "" : " (undefined here)"}`, async () => {
    const proc = pool.spawn(BUSY);
    assert.equal(proc.resourceUsage(), undefined, "nothing before the exit");
    assert.equal(await proc.exited, 0);
    const bun = proc.resourceUsage();
    const output = await pool.command(BUSY[0], { args: BUSY.slice(1) }).output();
    const child = pool.command(BUSY[0], { args: BUSY.slice(1), stdout: "piped" }).spawn();
    await child.output();
    const dropIn = childProcessFor(pool).spawn(BUSY[0], BUSY.slice(1));
    await new Promise((resolve) => dropIn.on("close", resolve));
    const all = {
      bun,
      output: output.resourceUsage,
      child: child.resourceUsage(),
      dropIn: (dropIn as unknown as ChildProcess).resourceUsage(),
    };
    for (const [shape, usage] of Object.entries(all)) {
      if (!tells) {
        assert.equal(usage, undefined, shape);
        continue;
      }
      assert.ok(usage, `${shape}: no usage`);
      checkShape(usage);
      assert.ok(usage.cpuTime.user >= 200_000n, `${shape}: user CPU ${usage.cpuTime.user} µs`);
    }
  });

  it(`a 100 MB allocation reports a maxRSS of at least 100 MB${tells ? "" : " (undefined here)"}`, async () => {
    const output = await pool.command(BIG[0], { args: BIG.slice(1) }).output();
    assert.equal(output.code, 0);
    if (!tells) return assert.equal(output.resourceUsage, undefined);
    assert.ok(output.resourceUsage, "no usage");
    assert.ok(output.resourceUsage.maxRSS >= 100 * 1024 * 1024, `maxRSS ${output.resourceUsage.maxRSS}`);
  });
});

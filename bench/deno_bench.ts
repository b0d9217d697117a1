/**
 * `deno bench bench/deno_bench.ts -A`: `Deno.Command` against the pool (Deno workers, and Bun workers
 * when bun is on PATH), one command at a time and 30 at once, for `echo hi` and `cat` of a 163 KB file.
 * `Deno.Command` is each group's baseline.
 */

import { Pool } from "../mod.ts";
import { writeCatFixture } from "../support/fixture.mjs";

const catFile = writeCatFixture(Deno.makeTempDirSync());
const workloads = { "echo": ["echo", "hi"], "cat 163 KB": ["cat", catFile] } as const;

const pools: Array<[string, Pool]> = [["pool (deno workers)", new Pool({ runtime: "deno" })]];
const bun = new Deno.Command("sh", { args: ["-c", "command -v bun"], stdout: "null" }).outputSync();
if (bun.success) pools.push(["pool (bun workers)", new Pool({ runtime: "bun" })]);
await Promise.all(pools.map(([, pool]) => pool.ready()));

type Run = (cmd: string, args: string[]) => Promise<{ stdout: Uint8Array }>;
const nativeRun: Run = (cmd, args) => new Deno.Command(cmd, { args, stdout: "piped", stderr: "null" }).output();

for (const [workload, [cmd, ...args]] of Object.entries(workloads)) {
  for (const inFlight of [1, 30]) {
    const group = `${workload}, ${inFlight} in flight`;
    const runners: Array<[string, Run, boolean]> = [["Deno.Command", nativeRun, true]];
    for (const [name, pool] of pools) {
      runners.push([name, (c, a) => pool.command(c, { args: a, stderr: "null" }).output(), false]);
    }
    for (const [name, run, baseline] of runners) {
      Deno.bench({
        name,
        group,
        baseline,
        n: inFlight === 1 ? 200 : 20,
        async fn() {
          await Promise.all(Array.from({ length: inFlight }, () => run(cmd, args)));
        },
      });
    }
  }
}

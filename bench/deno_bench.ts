/**
 * `deno bench -A bench/deno_bench.ts`: `Deno.Command` against spawnpool's `Command` on its default pool, as a user gets
 * it (native workers, where the binary is present: in a checkout, `npm run build:native` builds it), for `echo hi` and
 * `cat` of a 163 KB file, 1 and 30 commands in flight. Each group is one workload at one in-flight count, with
 * `Deno.Command` as its baseline. Extra rows, labelled as such: pools of JavaScript workers (Deno's, and Bun's when bun
 * is on PATH), which a user gets only by asking (`runtime`).
 *
 * One iteration at 30 in flight starts 30 commands at once and awaits them all: its time over 30 is the time per
 * command. Every pool is started (`ready()`) before the first iteration, and each runs the default size.
 *
 * @module
 */

import { Command, Pool } from "../mod.ts";
import { defaultPool } from "../pool.ts";
import { writeCatFixture } from "../support/fixture.mjs";

const catFile = writeCatFixture(Deno.makeTempDirSync());
const workloads = { "echo hi": ["echo", "hi"], "cat 163 KB": ["cat", catFile] } as const;

type Run = (cmd: string, args: string[]) => Promise<{ stdout: Uint8Array }>;

// The default pool behind `Command`: native workers unless the binary is missing (then the host's, and the row says so).
const shared = defaultPool();
await shared.ready();
const sharedRuntime = shared.stats().runtime;
if (sharedRuntime !== "native") {
  console.error(`The default pool runs ${sharedRuntime} workers here: no native worker (npm run build:native)`);
}
const runners: Array<[string, Run]> = [
  ["Deno.Command", (cmd, args) => new Deno.Command(cmd, { args, stdout: "piped", stderr: "null" }).output()],
  [
    `spawnpool Command, default pool (${sharedRuntime} workers)`,
    (cmd, args) => new Command(cmd, { args, stdout: "piped", stderr: "null" }).output(),
  ],
];
// The extra rows: pools of JavaScript workers.
const jsRuntimes: Array<"deno" | "bun"> = ["deno"];
const bun = new Deno.Command("sh", { args: ["-c", "command -v bun"], stdout: "null" }).outputSync();
if (bun.success) jsRuntimes.push("bun");
for (const runtime of jsRuntimes) {
  const pool = new Pool({ runtime });
  await pool.ready();
  runners.push([
    `extra: pool of ${runtime} workers (JS)`,
    (cmd, args) => pool.command(cmd, { args, stdout: "piped", stderr: "null" }).output(),
  ]);
}

for (const [workload, [cmd, ...args]] of Object.entries(workloads)) {
  for (const inFlight of [1, 30]) {
    const group = `${workload}, ${inFlight} in flight`;
    for (const [name, run] of runners) {
      Deno.bench({
        name: `${name}, ${inFlight} in flight`,
        group,
        baseline: name === "Deno.Command",
        warmup: inFlight === 1 ? 50 : 5,
        n: inFlight === 1 ? 500 : 60,
        async fn() {
          await Promise.all(Array.from({ length: inFlight }, () => run(cmd, args)));
        },
      });
    }
  }
}

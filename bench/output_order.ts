// Two commands started in one turn: how often does the second one's first output arrive first? zx's
// `disables piping` test expects the first one's line first; this measures how often Node itself and the drop-in
// (the default pool: native workers where built) give the other order. Rounds alternate between the two.
//
//   node bench/output_order.ts [rounds]        (default 100; also runs under deno run -A and bun)
import * as native from "node:child_process";
import process from "node:process";
import * as pooled from "../node.ts";

type Spawn = typeof native.spawn;

/** Starts `sh -c 'echo first'` and `sh -c 'echo second'` one after the other; which wrote to the host first. */
async function round(spawn: Spawn): Promise<"first" | "second"> {
  const order: string[] = [];
  const children = ["first", "second"].map((name) => {
    const child = spawn("sh", ["-c", `echo ${name}`], { stdio: ["ignore", "pipe", "ignore"] });
    child.stdout!.once("data", () => order.push(name));
    return new Promise((resolve) => child.on("close", resolve));
  });
  await Promise.all(children);
  return order[0] as "first" | "second";
}

const rounds = Number(process.argv[2] ?? 100);
const flipped = { "node:child_process": 0, "spawnpool/node": 0 };
await round(pooled.spawn as unknown as Spawn); // starts the pool's first worker
for (let i = 0; i < rounds; i++) {
  if (await round(native.spawn) === "second") flipped["node:child_process"]++;
  if (await round(pooled.spawn as unknown as Spawn) === "second") flipped["spawnpool/node"]++;
}
for (const [name, count] of Object.entries(flipped)) {
  console.log(`${name}: the second command's output came first in ${count} of ${rounds} rounds`);
}
process.exit(0); // the default pool's idle workers do not keep the host alive; this only skips waiting for them

// Why Node's native spawn slows as a process grows: child_process.spawn forks, and the fork copies the
// parent's page tables. Spawns `echo hi` 300 times at 30 in flight, first in a small process, then with
// 200 MB of live Buffers; prints spawns/s, host CPU per spawn and RSS for each. `node bench/node_spawn_rss.mjs`
import { spawn } from "node:child_process";

const one = () =>
  new Promise((resolve) => {
    const child = spawn("echo", ["hi"], { stdio: ["ignore", "pipe", "ignore"] });
    child.stdout.resume();
    child.on("close", resolve);
  });

async function measure(label) {
  const spawns = 300;
  let next = 0;
  const cpu = process.cpuUsage();
  const start = performance.now();
  await Promise.all(Array.from({ length: 30 }, async () => {
    while (next++ < spawns) await one();
  }));
  const used = process.cpuUsage(cpu);
  console.log(
    `${label}: ${Math.round(spawns / ((performance.now() - start) / 1000))} spawns/s, ` +
      `${Math.round((used.user + used.system) / spawns)} µs CPU per spawn, ` +
      `RSS ${Math.round(process.memoryUsage().rss / 2 ** 20)} MB`,
  );
}

await measure("small process");
const ballast = Array.from({ length: 200 }, () => Buffer.alloc(2 ** 20, 1));
await measure("with 200 MB of live Buffers");
ballast.length = 0;

// Summarises a V8 .cpuprofile (`node --cpu-prof`, `bun --cpu-prof`): wall time profiled, the share of it the thread
// was idle, and the functions with the most self time, each with its share of the busy (non-idle) time; and the busy
// time by where the code lives (this project's dist/ or sources, the runtime's own modules, native, GC).
// `node bench/_cpuprofile_top.mjs <file.cpuprofile> [count, default 15]`.
import { readFileSync } from "node:fs";

const [file, count = "15"] = process.argv.slice(2);
const profile = JSON.parse(readFileSync(file, "utf8"));
const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
const self = new Map();
let total = 0;
profile.samples.forEach((id, i) => {
  const us = profile.timeDeltas[i] ?? 0;
  self.set(id, (self.get(id) ?? 0) + us);
  total += us;
});

const byFunction = new Map();
const byPlace = new Map();
let idle = 0;
for (const [id, us] of self) {
  const { functionName, url, lineNumber } = nodes.get(id).callFrame;
  if (functionName === "(idle)") {
    idle += us;
    continue;
  }
  const where = url ? `${url.replace(/^file:\/\/.*?\/(dist|bench|core|adapters)\//, "$1/")}:${lineNumber + 1}` : "";
  const key = `${functionName || "(anonymous)"} ${where}`.trim();
  byFunction.set(key, (byFunction.get(key) ?? 0) + us);
  const place = functionName === "(garbage collector)"
    ? "garbage collector"
    : /\/(dist|core|adapters)\//.test(url)
    ? "spawnpool"
    : /\/bench\//.test(url)
    ? "the benchmark's server"
    : url.startsWith("node:") || url === ""
    ? "runtime (node: modules, native code, program)"
    : "other JavaScript";
  byPlace.set(place, (byPlace.get(place) ?? 0) + us);
}
const busy = total - idle;
const pct = (us) => `${(100 * us / busy).toFixed(1)}%`;
console.log(
  `${(total / 1e6).toFixed(2)} s profiled, ${(100 * idle / total).toFixed(1)}% idle, ${(busy / 1e6).toFixed(2)} s busy`,
);
console.log("\n| where | share of busy |\n|---|---|");
for (const [place, us] of [...byPlace].sort((a, b) => b[1] - a[1])) console.log(`| ${place} | ${pct(us)} |`);
console.log("\n| function (self time) | share of busy |\n|---|---|");
for (const [key, us] of [...byFunction].sort((a, b) => b[1] - a[1]).slice(0, Number(count))) {
  console.log(`| ${key} | ${pct(us)} |`);
}

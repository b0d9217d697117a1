/**
 * An idle process's loop lag: it does nothing but run a 1 ms timer and note how late each one fires. That is
 * how late this machine lets any timer run (the scheduler, the other processes, a virtual machine's host), so
 * beside a benchmark it tells the lag the machine adds from the lag the measured process causes itself.
 * bench/compare.ts runs one beside each benchmark. Plain JavaScript; runs under Deno (no permissions), Bun and
 * Node.
 *
 * Prints `ready` once its timer runs, then reads JSON from stdin until it ends: time windows `[[from, to], ...]`
 * in ms since the epoch. Prints one line of JSON, the p99 lateness in ms of the timers that fired in each
 * window, and exits.
 *
 * @module
 */

import process from "node:process";
import { percentile, sampleLag } from "../support/fixture.mjs";

/** When each timer fired (ms since the epoch) and how late it was (ms), in firing order. */
const fired = [];
const lateness = [];
const stop = sampleLag((at, late) => {
  if (fired.length === 0) process.stdout.write("ready\n");
  fired.push(at);
  lateness.push(late);
});

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (text) => (input += text));
process.stdin.on("end", () => {
  stop();
  if (input.trim() === "") return; // the benchmark ended without asking (it failed): nothing to report
  const windows = JSON.parse(input);
  const p99s = windows.map(([from, to]) => {
    const inside = lateness.filter((_, i) => fired[i] >= from && fired[i] <= to).sort((a, b) => a - b);
    return inside.length > 0 ? Number(percentile(inside, 0.99).toFixed(2)) : null;
  });
  process.stdout.write(`${JSON.stringify(p99s)}\n`);
});

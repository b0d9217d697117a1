// The speed targets the native worker is held to, checked against one `npm start` run: pool/native ratios of the
// native-worker rows per host, the native worker's own CPU per echo and its peak memory, and the best pooled row
// against the C spawn loop measured in the same run. Each line says met or missed, and by how much.

/** Pool/native at least `ratio` for `host`'s native-worker rows of `workload` (a name prefix) at `inFlight`. */
const TARGETS = [
  ...["deno", "bun"].flatMap((host) => [
    { host, workload: "echo", inFlight: 30, ratio: 1.3 },
    { host, workload: "cat", inFlight: 30, ratio: 1.15 },
    { host, workload: "echo", inFlight: 1, ratio: 1.0 },
    { host, workload: "cat", inFlight: 1, ratio: 1.0 },
  ]),
  { host: "node", workload: "echo", inFlight: 30, ratio: 3.0 },
  { host: "node", workload: "cat", inFlight: 30, ratio: 2.5 },
];
/** The best pooled configuration's share of the C loop's spawns/s (one thread, 30 in flight). */
const CEILING_SHARE = 0.9;
/** A native worker's own CPU per echo at 30 in flight, µs (at most), and its peak resident memory, KB (at most). */
const WORKER_CPU_US = 80;
const WORKER_RSS_KB = 4096;

const verdict = (value, target) => value >= target ? "met" : `missed by ${((1 - value / target) * 100).toFixed(0)} %`;

/**
 * Lines of Markdown: one per target. `groups` are start.mjs's row groups (`label`, `cases`), `results` its runs
 * (`host`, `paths`), `ceiling` the C loop's rows or undefined.
 */
export function targetLines(results, groups, ceiling) {
  const lines = ["| target | measured | verdict |", "|---|---|---|"];
  /** The native-worker cases of `host`'s run (its `output()` path), or undefined where it did not run. */
  const nativeCases = (host) =>
    results.find((r) => r.host === host)?.paths.find((path) => path.workers === "native" && path.api !== "execFile")
      ?.cases;
  for (const t of TARGETS) {
    const c = nativeCases(t.host)?.find((x) => x.workload.startsWith(t.workload) && x.inFlight === t.inFlight);
    const name = `${t.host} host, native workers, ${t.workload} at ${t.inFlight} in flight: ≥ ${t.ratio}x native`;
    lines.push(c ? `| ${name} | ${c.ratio.toFixed(2)}x | ${verdict(c.ratio, t.ratio)} |` : `| ${name} | not run | — |`);
  }
  // The worker's own cost, on each host's native rows (its CPU split and /proc readings: Linux only).
  for (const { host } of results) {
    const cases = nativeCases(host)?.filter((x) => x.pool.cpu !== null) ?? [];
    const echo = cases.find((x) => x.workload.startsWith("echo") && x.inFlight === 30);
    if (echo) {
      const us = echo.pool.cpu.workersUs;
      lines.push(
        `| ${host} host: native worker CPU per echo at 30 in flight ≤ ${WORKER_CPU_US} µs | ${us} µs | ` +
          `${us <= WORKER_CPU_US ? "met" : `missed by ${us - WORKER_CPU_US} µs`} |`,
      );
    }
    // Through echo: the worker's own memory. The cat's peak adds the outputs in flight (15 of 163 KB per worker).
    const kb = echo?.pool.cpu.workerPeakRssKb;
    if (kb != null) {
      lines.push(
        `| ${host} host: a native worker's peak RSS through echo ≤ ${WORKER_RSS_KB / 1024} MB | ` +
          `${(kb / 1024).toFixed(1)} MB | ` +
          `${kb <= WORKER_RSS_KB ? "met" : `missed by ${((kb - WORKER_RSS_KB) / 1024).toFixed(1)} MB`} |`,
      );
    }
  }
  // Against the loop with output to /dev/null: the target. Against the loop that reads the output: how much of the
  // gap is the pipe every spawner that returns output pays, and how much the pool's own way.
  for (const c of ceiling ?? []) {
    let best;
    for (const g of groups) {
      const row = g.cases.find((x) => x.workload === c.workload && x.inFlight === 30);
      if (row && (!best || row.pool.perSec > best.perSec)) best = { label: g.label, perSec: row.pool.perSec };
    }
    if (!best) continue;
    const share = best.perSec / c.perSec;
    const measured = `${best.perSec}/s (${best.label}) = ${(share * 100).toFixed(0)} %`;
    lines.push(
      c.output === "collected"
        ? `| (no target) best pooled ${c.workload} at 30 in flight against the C loop that reads the output, ` +
          `${c.perSec}/s | ${measured} | — |`
        : `| best pooled ${c.workload} at 30 in flight ≥ ${CEILING_SHARE * 100} % of the C loop's ${c.perSec}/s | ` +
          `${measured} | ${verdict(share, CEILING_SHARE)} |`,
    );
  }
  return lines;
}

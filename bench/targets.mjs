// The speed targets the native worker is held to, checked against one `npm start` run: pool/native ratios of the
// native-worker rows per host, and the best pooled row against the C spawn loop measured in the same run. Each line
// says met or missed, and by how much.

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

const verdict = (value, target) => value >= target ? "met" : `missed by ${((1 - value / target) * 100).toFixed(0)} %`;

/**
 * Lines of Markdown: one per target. `groups` are start.mjs's row groups (`label`, `cases`), `results` its runs
 * (`host`, `paths`), `ceiling` the C loop's rows or undefined.
 */
export function targetLines(results, groups, ceiling) {
  const lines = ["| target | measured | verdict |", "|---|---|---|"];
  for (const t of TARGETS) {
    const run = results.find((r) => r.host === t.host);
    const index = run?.paths.findIndex((path) => path.workers === "native" && path.api !== "execFile") ?? -1;
    const c = index < 0
      ? undefined
      : run.paths[index].cases.find((x) => x.workload.startsWith(t.workload) && x.inFlight === t.inFlight);
    const name = `${t.host} host, native workers, ${t.workload} at ${t.inFlight} in flight: ≥ ${t.ratio}x native`;
    lines.push(c ? `| ${name} | ${c.ratio.toFixed(2)}x | ${verdict(c.ratio, t.ratio)} |` : `| ${name} | not run | — |`);
  }
  for (const c of ceiling ?? []) {
    let best;
    for (const g of groups) {
      const row = g.cases.find((x) => x.workload === c.workload && x.inFlight === 30);
      if (row && (!best || row.pool.perSec > best.perSec)) best = { label: g.label, perSec: row.pool.perSec };
    }
    if (!best) continue;
    const share = best.perSec / c.perSec;
    lines.push(
      `| best pooled ${c.workload} at 30 in flight ≥ ${CEILING_SHARE * 100} % of the C loop's ${c.perSec}/s | ` +
        `${best.perSec}/s (${best.label}) = ${(share * 100).toFixed(0)} % | ${verdict(share, CEILING_SHARE)} |`,
    );
  }
  return lines;
}

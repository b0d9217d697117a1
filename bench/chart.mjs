// The chart of `npm start`'s table: spawns/s at 30 in flight, native spawning against each pooled path, per host and
// workload, with the machine's spawn ceiling (bench/reference/spawn_loop.c, every core busy) as a dashed line.
// No dependencies: an SVG string with generic fonts only.
//
//   node bench/chart.mjs --from <latest.json | results.md> [--run "Run 23"] --out <file.svg>
//
// reads a result `npm start` wrote (bench/results/latest.json, or its Markdown table, optionally one `## ` section of
// a file that holds several runs) and writes the chart; bench/start.mjs calls writeChart() after every run.
import { readFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { pathToFileURL } from "node:url";

const WIDTH = 700;
const FONT = "Helvetica, Arial, sans-serif";
const PANEL_HEIGHT = 190;
const COLORS = { native: "#9a9a9a", same: "#3d6fb4", bun: "#e08a1e", c: "#3a9a5b", execFile: "#8a5bb0" };
const KINDS = [
  ["native", "native spawning"],
  ["same", "pool: the host's runtime as workers"],
  ["bun", "pool: Bun workers"],
  ["c", "pool: native (C) workers"],
  ["execFile", "pool: ./node execFile (Node workers)"],
];

/** What a row group's label says: the host, and the kind of pooling (see pathLabel in bench/start.mjs). */
function pathOf(label) {
  const host = label.split(/[ ,]/)[0];
  const workers = /(\w+) workers/.exec(label)?.[1] ?? host;
  if (label.includes("./node execFile")) return { host, kind: "execFile" };
  return { host, kind: workers === "native" ? "c" : workers === host ? "same" : "bun" };
}

const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
const fmt = (n) => Math.round(n).toLocaleString("en-US");

/** A round axis maximum and step for values up to `max`. */
function axis(max) {
  const rough = max / 5;
  const pow = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * pow).find((s) => s >= rough);
  return { step, top: Math.ceil(max / step) * step };
}

/**
 * The chart as an SVG string.
 * @param groups `npm start`'s row groups: `{ label, cases: [{ workload, inFlight, native: { perSec }, pool: { perSec } }] }`
 * @param ceiling the spawn ceiling rows, `{ workload, allCoresPerSec }`, or undefined
 * @param note a line under the title (machine, versions, date)
 */
export function chartSvg(groups, ceiling = [], note = "") {
  const workloads = [...new Set(groups.flatMap((g) => g.cases.map((c) => c.workload)))];
  const hosts = [...new Set(groups.map((g) => pathOf(g.label).host))];
  const at30 = (g, w) => g.cases.find((c) => c.workload === w && c.inFlight === 30);
  // The loop with output to /dev/null (npm start's rows read through a pipe are for its tables).
  const ceilingOf = (w) => ceiling?.find((c) => c.workload === w && c.output !== "collected")?.allCoresPerSec;
  const values = workloads.flatMap((w) => [
    ...groups.flatMap((g) => at30(g, w) ? [at30(g, w).native.perSec, at30(g, w).pool.perSec] : []),
    ceilingOf(w) ?? 0,
  ]);
  const { step, top } = axis(Math.max(1, ...values));

  const left = 58;
  const right = WIDTH - 12;
  const out = [];
  const text = (x, y, s, attrs = "") => {
    const line = `<text x="${x}" y="${y}" ${attrs}>${esc(s)}</text>`;
    // Past 120 columns (indent included), `deno fmt` moves the last attribute to a line of its own: do the same.
    const last = line.lastIndexOf(" ", line.indexOf(">"));
    out.push(line.length + 2 > 120 ? `${line.slice(0, last)}\n    ${line.slice(last + 1)}` : line);
  };

  text(
    left,
    22,
    "Spawns per second at 30 in flight: native spawning and through the pool",
    'font-size="15" font-weight="bold"',
  );
  if (note) text(left, 40, note, 'font-size="11" fill="#555"');
  // Legend: two rows of swatches.
  const legend = [...KINDS.filter(([k]) => k === "native" || groups.some((g) => pathOf(g.label).kind === k))];
  legend.push(["ceiling", "ceiling: a C spawn loop, every core busy"]);
  // Flowed left to right; 6.2 px per character is generous for 11 px sans-serif.
  let lx = left;
  let ly = 58;
  legend.forEach(([kind, name]) => {
    const w = 17 + name.length * 6.2 + 14;
    if (lx + w > right + 10) [lx, ly] = [left, ly + 16];
    const [x, y] = [lx, ly];
    lx += w;
    if (kind === "ceiling") {
      out.push(
        `<line x1="${x}" y1="${y - 4}" x2="${x + 12}" y2="${
          y - 4
        }" stroke="#c0392b" stroke-width="2" stroke-dasharray="4 2"/>`,
      );
    } else out.push(`<rect x="${x}" y="${y - 9}" width="12" height="10" fill="${COLORS[kind]}"/>`);
    text(x + 17, y, name, 'font-size="11"');
  });
  let y0 = ly + 10;
  for (const w of workloads) {
    const plotTop = y0 + 22;
    const plotBottom = plotTop + PANEL_HEIGHT;
    const yOf = (v) => plotBottom - (v / top) * PANEL_HEIGHT;
    text(left, y0 + 12, w, 'font-size="13" font-weight="bold"');
    for (let v = 0; v <= top + 1e-9; v += step) {
      const y = yOf(v).toFixed(1);
      out.push(`<line x1="${left}" y1="${y}" x2="${right}" y2="${y}" stroke="${v === 0 ? "#333" : "#e3e3e3"}"/>`);
      text(left - 6, Number(y) + 4, fmt(v), 'font-size="11" text-anchor="end" fill="#333"');
    }
    out.push(
      `<text x="14" y="${(plotTop + plotBottom) / 2}" font-size="11" fill="#333" text-anchor="middle" ` +
        `transform="rotate(-90 14 ${(plotTop + plotBottom) / 2})">spawns/s</text>`,
    );
    // One group of bars per host: its native spawning once, then each pooled path.
    const bars = hosts.map((host) => {
      const own = groups.filter((g) => pathOf(g.label).host === host && at30(g, w));
      if (own.length === 0) return { host, items: [] };
      const native = { kind: "native", value: at30(own[0], w).native.perSec };
      const pooled = own.map((g) => ({
        kind: pathOf(g.label).kind,
        value: at30(g, w).pool.perSec,
        ratio: at30(g, w).pool.perSec / at30(g, w).native.perSec,
      }));
      return { host, items: [native, ...pooled] };
    });
    const slots = bars.reduce((n, b) => n + b.items.length, 0) + (bars.length - 1) * 0.8;
    const slot = (right - left - 10) / slots;
    const barWidth = Math.min(34, slot * 0.78);
    let x = left + 5;
    for (const { host, items } of bars) {
      const start = x;
      for (const item of items) {
        const bx = x + (slot - barWidth) / 2;
        const by = yOf(item.value);
        out.push(
          `<rect x="${bx.toFixed(1)}" y="${by.toFixed(1)}" width="${barWidth.toFixed(1)}" ` +
            `height="${(plotBottom - by).toFixed(1)}" fill="${COLORS[item.kind]}"/>`,
        );
        const label = item.ratio === undefined ? fmt(item.value) : `${item.ratio.toFixed(2)}x`;
        text(x + slot / 2, by - 4, label, `font-size="10" text-anchor="middle" fill="#222"`);
        x += slot;
      }
      if (items.length > 0) {
        text((start + x) / 2, plotBottom + 15, `${host} host`, 'font-size="12" text-anchor="middle"');
      }
      x += slot * 0.8;
    }
    const c = ceilingOf(w);
    if (c) {
      const y = yOf(c).toFixed(1);
      out.push(
        `<line x1="${left}" y1="${y}" x2="${right}" y2="${y}" stroke="#c0392b" stroke-width="1.5" stroke-dasharray="6 3"/>`,
      );
      text(right, Number(y) - 4, `ceiling ${fmt(c)}/s`, 'font-size="10" text-anchor="end" fill="#c0392b"');
    }
    y0 = plotBottom + 26;
  }
  text(
    left,
    y0 + 6,
    "Native bars are labelled with spawns/s, pooled bars with pool / native of the same host and run.",
    'font-size="11" fill="#555"',
  );
  const height = y0 + 16;
  // One element a line, indented, numbers to one decimal: the form `deno fmt` leaves as it is (lines stay short).
  const tidy = (el) => `  ${el.replace(/="(\d+\.\d)\d+"/g, '="$1"').replace(/"\/>$/, '" />')}`;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" font-family="${FONT}">`,
    ...[`<rect width="${WIDTH}" height="${height}" fill="#fff"/>`, ...out].map(tidy),
    "</svg>",
    "",
  ].join("\n");
}

/** Writes the chart of one `npm start` result to `file`. */
export function writeChart(file, groups, ceiling, note) {
  writeFileSync(file, chartSvg(groups, ceiling, note));
}

/** Row groups and ceiling from `npm start`'s Markdown table (bench/results/latest.md or a kept copy of it). */
export function parseTable(md) {
  const groups = [];
  const ceiling = [];
  const cells = (line) => line.split("|").slice(1, -1).map((s) => s.trim());
  let table;
  for (const line of md.split("\n")) {
    if (!line.startsWith("|")) {
      table = undefined;
      continue;
    }
    const row = cells(line);
    if (table === undefined) {
      table = row[0] === "host (workers)" && row[3] === "native/s" ? "main" : row[0] === "workload" &&
          row[1]?.startsWith("spawns/s")
        ? "ceiling"
        : "other";
      continue;
    }
    if (/^-+$/.test(row[0])) continue;
    if (table === "main") {
      const [label, workload, inFlight, native, pool] = row;
      let group = groups.find((g) => g.label === label);
      if (!group) groups.push(group = { label, cases: [] });
      group.cases.push({
        workload,
        inFlight: Number(inFlight),
        native: { perSec: Number(native.replace(/,/g, "")) },
        pool: { perSec: Number(pool.replace(/,/g, "")) },
      });
    } else if (table === "ceiling") {
      ceiling.push({ workload: row[0], allCoresPerSec: Number(row[3].replace(/,/g, "")) });
    }
  }
  return { groups, ceiling };
}

/** The Markdown between `## <heading>` and the next `## `. */
function section(md, heading) {
  const start = md.indexOf(`\n## ${heading}\n`);
  if (start < 0) throw new Error(`no section "## ${heading}"`);
  const end = md.indexOf("\n## ", start + 1);
  return md.slice(start, end < 0 ? undefined : end);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const arg = (name) => {
    const i = process.argv.indexOf(name);
    return i < 0 ? undefined : process.argv[i + 1];
  };
  const from = arg("--from");
  const outFile = arg("--out");
  if (!from || !outFile) {
    console.error('usage: node bench/chart.mjs --from <latest.json | results.md> [--run "Run 23"] --out <file.svg>');
    process.exit(2);
  }
  const source = readFileSync(from, "utf8");
  let groups, ceiling, note;
  if (from.endsWith(".json")) {
    const json = JSON.parse(source);
    const labels = (r) => r.paths.map((p) => label(r.host, p));
    groups = json.results.flatMap((r) => r.paths.map((p, i) => ({ label: labels(r)[i], cases: p.cases })));
    ceiling = json.ceiling;
    note = `${json.machine}; ${json.results.map((r) => `${r.host} ${r.version}`).join(", ")}`;
  } else {
    const run = arg("--run");
    ({ groups, ceiling } = parseTable(run ? section(source, run) : source));
    note = arg("--note") ?? "";
  }
  writeChart(outFile, groups, ceiling, note);
  console.log(`Wrote ${outFile}`);
}

/** bench/start.mjs's pathLabel, for a latest.json. */
function label(host, { workers, api }) {
  const others = workers === host ? "" : `${api === "execFile" ? ", " : " host, "}${workers} workers`;
  return api === "execFile" ? `${host}, ./node execFile${others}` : `${host}${others}`;
}

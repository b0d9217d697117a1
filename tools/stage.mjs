// The package as it is published: `node tools/stage.mjs <dir>` builds (dist/ and the per-platform worker packages in
// dist/npm/) and writes into <dir> what `npm publish <dir>` publishes: dist/ without the native builds, README.md,
// CHANGELOG.md, LICENSE, and a package.json that lists the worker packages as optionalDependencies and has no scripts
// or devDependencies. The checkout's own package.json lists no worker packages (support/build_native.mjs,
// workerDependencies), so publish the staged directory, the worker packages first (npm publish dist/npm/worker-*).
// `--refuse` is the checkout's prepublishOnly: publishing the checkout itself stops with this advice.
//
// The JSR package likewise: `node tools/stage.mjs --jsr <dir>` writes what `deno publish` publishes from <dir>: the same
// bundled build (built into <dir>, the checkout's dist/ untouched), its entries typed by their .d.ts
// (`@ts-self-types`), a deno.json whose exports are those entries, README.md, CHANGELOG.md and LICENSE. Deno loads the
// sources' 42 modules in about 6 ms, the bundle in about 1.5 (bench/results/2026-11-26-cold-start-3.md). It holds no
// binary: on Deno it imports this platform's worker package from npm (`npm:@spawnpool/worker-<platform>-<arch>@<version>`,
// the npm package's optionalDependencies, named in the bundle; adapters/_npm_worker.ts), so publish those to npm first.
// `node tools/stage.mjs --jsr-dry-run` stages into a scratch directory and runs `deno publish --dry-run` there.
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { isAbsolute, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { workerDependencies } from "../support/build_native.mjs";
import { bin, buildDist, buildPackages, root } from "../support/setup.mjs";

/** What both packages carry beside their code. */
const PACKAGE_DOCS = ["README.md", "CHANGELOG.md", "LICENSE"];

/** Refuses a destination that emptying would take the checkout with: the checkout itself or a folder above it. */
function checkDest(dest) {
  const rel = relative(resolve(dest), root);
  if (rel === "" || (!rel.startsWith("..") && !isAbsolute(rel))) {
    throw new Error(`${dest}: the staged package goes into a folder of its own, not the checkout or one above it`);
  }
}

/** Writes the publishable package into `dest` from what `npm run build` built; returns its package.json. */
export function stage(dest) {
  checkDest(dest);
  const main = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  cpSync(join(root, "dist"), join(dest, "dist"), {
    recursive: true,
    filter: (path) => !/[/\\]dist[/\\](native|npm)([/\\]|$)/.test(path),
  });
  for (const file of PACKAGE_DOCS) cpSync(join(root, file), join(dest, file));
  const { scripts: _scripts, devDependencies: _devDependencies, ...published } = main;
  published.optionalDependencies = workerDependencies(main.version);
  writeFileSync(join(dest, "package.json"), `${JSON.stringify(published, null, 2)}\n`);
  return published;
}

/** The JSR package's entries: its exports, each a bundle of dist/ typed by the .d.ts beside it. */
const JSR_ENTRIES = {
  ".": "./dist/mod.js",
  "./node": "./dist/node.js",
  "./pty": "./dist/pty.js",
  "./worker": "./dist/worker/main.js",
  "./agent": "./dist/remote/cli.js",
};

/** Writes the JSR package into `dest` (see the top of this file); returns its deno.json. */
export function stageJsr(dest) {
  checkDest(dest);
  const source = JSON.parse(readFileSync(join(root, "deno.json"), "utf8"));
  const main = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  rmSync(dest, { recursive: true, force: true });
  // Its native worker is the npm one's, from the same worker packages at the npm package's version.
  buildDist(join(dest, "dist"), { npmWorkers: workerDependencies(main.version) });
  for (const entry of Object.values(JSR_ENTRIES)) {
    const file = join(dest, entry);
    const types = `./${entry.split("/").pop().replace(/\.js$/, ".d.ts")}`;
    const text = readFileSync(file, "utf8");
    // After a shebang, which must stay the first line.
    const shebang = text.startsWith("#!") ? text.slice(0, text.indexOf("\n") + 1) : "";
    writeFileSync(file, `${shebang}/* @ts-self-types="${types}" */\n${text.slice(shebang.length)}`);
  }
  // tsc keeps the sources' `.ts` specifiers in the declarations; Deno resolves them literally, so they name the .d.ts.
  for (const entry of readdirSync(join(dest, "dist"), { recursive: true })) {
    if (!entry.endsWith(".d.ts")) continue;
    const file = join(dest, "dist", entry);
    const text = readFileSync(file, "utf8");
    writeFileSync(file, text.replace(/(["'])(\.{1,2}\/[^"']*?)(?<!\.d)\.ts\1/g, "$1$2.d.ts$1"));
  }
  for (const file of PACKAGE_DOCS) cpSync(join(root, file), join(dest, file));
  const published = { name: source.name, version: source.version, license: source.license, exports: JSR_ENTRIES };
  writeFileSync(join(dest, "deno.json"), `${JSON.stringify(published, null, 2)}\n`);
  return published;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [arg, dir] = process.argv.slice(2);
  if (arg === "--jsr" && dir === undefined) {
    console.error("Usage: node tools/stage.mjs --jsr <dir>");
    process.exit(2);
  }
  if (arg === "--jsr") {
    const published = stageJsr(resolve(dir));
    console.log(`Staged ${published.name}@${published.version} for JSR in ${resolve(dir)}: \`deno publish\` there`);
    process.exit(0);
  }
  if (arg === "--jsr-dry-run") {
    const scratch = mkdtempSync(join(tmpdir(), "spawnpool-jsr-"));
    try {
      stageJsr(scratch);
      const run = spawnSync(join(bin, "deno"), ["publish", "--dry-run", "--allow-dirty"], {
        cwd: scratch,
        stdio: "inherit",
      });
      process.exitCode = run.status ?? 1;
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
    process.exit();
  }
  if (arg === "--refuse" || arg === undefined || arg.startsWith("--")) {
    console.error(
      "Publish the staged package, not the checkout: `node tools/stage.mjs <dir>`, then `npm publish` each " +
        "dist/npm/worker-* and `npm publish <dir>`",
    );
    process.exit(1);
  }
  await buildPackages();
  const published = stage(resolve(arg));
  console.log(`Staged ${published.name}@${published.version} in ${resolve(arg)}`);
}

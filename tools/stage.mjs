// The package as it is published: `node tools/stage.mjs <dir>` builds (dist/ and the per-platform worker packages in
// dist/npm/) and writes into <dir> what `npm publish <dir>` publishes: dist/ without the native builds, README.md,
// CHANGELOG.md, LICENSE, and a package.json that lists the worker packages as optionalDependencies and has no scripts
// or devDependencies. The checkout's own package.json lists no worker packages (support/build_native.mjs,
// workerDependencies), so publish the staged directory, the worker packages first (npm publish dist/npm/worker-*).
// `--refuse` is the checkout's prepublishOnly: publishing the checkout itself stops with this advice.
import { cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { workerDependencies } from "../support/build_native.mjs";
import { buildPackages, root } from "../support/setup.mjs";

/** Writes the publishable package into `dest` from what `npm run build` built; returns its package.json. */
export function stage(dest) {
  const main = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  rmSync(dest, { recursive: true, force: true });
  mkdirSync(dest, { recursive: true });
  cpSync(join(root, "dist"), join(dest, "dist"), {
    recursive: true,
    filter: (path) => !/[/\\]dist[/\\](native|npm)([/\\]|$)/.test(path),
  });
  for (const file of ["README.md", "CHANGELOG.md", "LICENSE"]) cpSync(join(root, file), join(dest, file));
  const { scripts: _scripts, devDependencies: _devDependencies, ...published } = main;
  published.optionalDependencies = workerDependencies(main.version);
  writeFileSync(join(dest, "package.json"), `${JSON.stringify(published, null, 2)}\n`);
  return published;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [arg] = process.argv.slice(2);
  if (arg === "--refuse" || arg === undefined) {
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

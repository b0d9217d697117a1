// `npm run build` (and `npm pack`, through prepack): compiles spawnpool to dist/ for Node and Bun apps that
// install it from npm, and cross-compiles the native worker's per-platform packages (@spawnpool/worker-<platform>-<arch>,
// spawnpool's optionalDependencies) into dist/npm/ with Zig (support/build_native.mjs).
//
// It ends by saying, on stderr (so `npm pack --json` stays JSON), that a checkout's `npm pack` leaves the native worker
// out: the checkout's package.json lists no worker packages (tools/stage.mjs), so an app that installs that tarball
// alone silently runs JavaScript workers. It prints the command that packs this machine's worker package and the one
// that installs both tarballs together, as tools/pack_test.mjs does (and checks, running what this prints).
import { readFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { workerPackageName } from "../support/build_native.mjs";
import { buildPackages, root } from "../support/setup.mjs";

const packages = await buildPackages();
console.log(`Built dist/ and ${packages.map(({ name }) => name).join(", ")} in dist/npm/`);
console.error(nativeWorkerAdvice(packages));

/** A path as a POSIX shell word. */
function shellWord(path) {
  return /^[\w@%+=:,./-]+$/.test(path) ? path : `'${path.replaceAll("'", `'\\''`)}'`;
}

/** `text` in lines of at most 100 characters, broken at spaces. */
function wrap(text) {
  return text.replace(/(.{1,100})(?: |$)/g, "$1\n").trimEnd();
}

/** What `npm pack` names the tarball of package `name` at `version`. */
function tarballName(name, version) {
  return `${name.replace(/^@/, "").replace("/", "-")}-${version}.tgz`;
}

/** The advice printed at the end of the build: where the native worker is and how to pack and install it. */
function nativeWorkerAdvice(packages) {
  const { name, version } = JSON.parse(readFileSync(resolve(root, "package.json"), "utf8"));
  const workerName = workerPackageName(process.platform, process.arch);
  const worker = packages.find((pkg) => pkg.name === workerName);
  const missing = `the ${name} tarball that \`npm pack\` makes in this checkout does not hold it`;
  const fallback = "an app that installs that tarball alone runs JavaScript workers (Node's, Bun's or Deno's), " +
    "not native ones";
  if (worker === undefined) {
    return wrap(
      `Native worker: ${missing}, and no ${workerName} was built (none exists for this platform, or its build ` +
        `failed above), so ${fallback}.`,
    );
  }
  // Where `npm pack` puts its tarball: --pack-destination, from the directory npm was run in (prepack runs in the
  // checkout with INIT_CWD set to that directory); the checkout itself for `npm run build`.
  const invokedIn = process.env.npm_command === "pack" ? (process.env.INIT_CWD ?? root) : root;
  const destination = resolve(invokedIn, process.env.npm_config_pack_destination ?? ".");
  const packWorker = `npm pack ${shellWord(relative(root, worker.dir))}` +
    (destination === root ? "" : ` --pack-destination ${shellWord(destination)}`);
  const both = [tarballName(name, version), tarballName(worker.name, version)]
    .map((file) => shellWord(resolve(destination, file)))
    .join(" ");
  return [
    wrap(
      `Native worker: ${missing}, so ${fallback}. It is the separate package ${worker.name}, built into ` +
        `${relative(root, worker.dir)}/. To pack it, in ${root}:`,
    ),
    `  ${packWorker}`,
    "and install both tarballs together, in one command, in the app (npm, or Bun):",
    `  npm install ${both}`,
    `  bun add ${both}`,
  ].join("\n");
}

// The npm package as users get it: `npm pack` (which builds dist/ and the per-platform packages of the native worker,
// tools/build.mjs), and `npm pack` of this platform's @spawnpool/worker-<platform>-<arch> (dist/npm/; they are not
// published, so the scratch apps install both tarballs, as a registry install would through spawnpool's
// optionalDependencies). Installs them into a scratch Node app (npm) and a scratch Bun app (`bun add`), runs real
// commands through the pool in each (Node host with node workers, with bun workers, with native workers, and the
// node:child_process drop-in; Bun host with bun and native workers; Deno host on the Node app's package.json and
// node_modules, with deno, bun and native workers), checks that native workers run the optional package's binary
// (their /proc/<pid>/exe), and type-checks both apps against the shipped .d.ts. Checks that the public classes keep
// their names in the bundle (`name`, `constructor.name`, the start of an error's stack), and that a checkout's own
// `npm pack` (no worker packages listed) says how to pack and install the native worker, and that doing what it says
// gives native workers. Prints "pack test: N passed, M failed".
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bin, ensureInstalled, root } from "../support/setup.mjs";
import { stage } from "./stage.mjs";

ensureInstalled();
const env = { ...process.env, PATH: `${bin}:${process.env.PATH}`, NO_COLOR: "1" };
const scratch = mkdtempSync(join(tmpdir(), "spawnpool-pack-"));
// npm is the machine's own; the runtimes and tsc are the pinned ones in node_modules/.bin.
const run = (cmd, args, cwd) =>
  execFileSync(cmd === "npm" ? "npm" : join(bin, cmd), args, {
    cwd,
    env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });

let passed = 0;
let failed = 0;
function check(name, fn) {
  try {
    fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (error) {
    failed++;
    console.log(`FAIL ${name}\n${error.stdout ?? ""}${error.stderr ?? ""}${error.message}`);
  }
}

// The app both runtimes run: every API shape, and the worker runtime from argv.
const app = `import { Command, Pool, spawn } from "spawnpool";
import { execFile } from "spawnpool/node";
import { promisify } from "node:util";
import process from "node:process";
import { readlinkSync } from "node:fs";

const [runtime, execPath] = process.argv.slice(2) as ["deno" | "bun" | "node" | "native", string | undefined];
await using pool = new Pool({ size: 2, runtime, execPath });
const out = await pool.command("echo", { args: ["deno shape"] }).output();
const proc = pool.spawn(["sh", "-c", "echo bun shape; exit 3"]);
const text = await new Response(proc.stdout).text();
const code: number = await proc.exited;
const { stdout } = await promisify(execFile)("echo", ["node shape"]);
const viaDefault = new TextDecoder().decode((await new Command("echo", { args: ["default"] }).output()).stdout);
const fromSpawn = await new Response(spawn(["echo", "spawn"]).stdout).text();
// Workers start as requests need them (here one at a time); ready() starts the pool's full size.
await pool.ready();
const workers = pool.stats().workers.length;
console.log(JSON.stringify([new TextDecoder().decode(out.stdout), text, code, stdout, viaDefault, fromSpawn, workers]));
// What the pool runs: its worker runtime, and the executable of its first worker.
const exe = process.platform === "linux" ? readlinkSync(\`/proc/\${pool.stats().workers[0].pid}/exe\`) : "";
console.log(JSON.stringify([pool.stats().runtime, exe]));
`;
const expected = JSON.stringify(["deno shape\n", "bun shape\n", 3, "node shape\n", "default\n", "spawn\n", 2]);
const tsconfig = (types) =>
  JSON.stringify({
    compilerOptions: {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      lib: ["ES2022", "DOM", "ESNext.Disposable"],
      strict: true,
      noEmit: true,
      allowImportingTsExtensions: true,
      typeRoots: [join(root, "node_modules", "@types"), join(root, "node_modules")],
      types,
    },
    files: ["app.ts"],
  });

const workerPackage = `@spawnpool/worker-${process.platform}-${process.arch}`;
let tarball;
let workerTarball;
check("npm pack builds and packs dist/ with types, and the native worker's packages", () => {
  // What is published: the staged package (tools/stage.mjs), from a fresh build.
  run("node", [join(root, "tools", "build.mjs")], root);
  const staged = join(scratch, "staged");
  const main = stage(staged);
  const output = run("npm", ["pack", "--pack-destination", scratch, "--json", staged], root);
  const [info] = JSON.parse(output.slice(output.indexOf("[")));
  tarball = join(scratch, info.filename);
  const files = info.files.map((f) => f.path);
  for (const needed of ["dist/mod.js", "dist/mod.d.ts", "dist/node.js", "dist/node.d.ts", "dist/worker/main.js"]) {
    if (!files.includes(needed)) throw new Error(`${needed} is not in the package`);
  }
  const stray = files.filter((f) =>
    /^(tests|bench|tools|\.ci|native|dist\/native|dist\/npm)\/|\.ts$/.test(f) && !f.endsWith(".d.ts")
  );
  if (stray.length) throw new Error(`not for the package: ${stray.join(", ")}`);
  // The binaries come from the per-platform packages, one each, at spawnpool's version.
  for (const [name, version] of Object.entries(main.optionalDependencies)) {
    const [, platform, arch] = /^@spawnpool\/worker-(linux|darwin)-(x64|arm64)$/.exec(name) ?? [];
    if (platform === undefined || version !== main.version) {
      throw new Error(`unexpected optional dependency ${name}@${version}`);
    }
    const dir = join(root, "dist", "npm", `worker-${platform}-${arch}`);
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    if (pkg.name !== name || pkg.version !== main.version || pkg.os[0] !== platform || pkg.cpu[0] !== arch) {
      throw new Error(`${dir}/package.json does not describe ${name}@${main.version} for ${platform}-${arch}`);
    }
    const packed = run("npm", ["pack", "--dry-run", "--json", dir], root);
    const packedFiles = JSON.parse(packed.slice(packed.indexOf("[")))[0].files;
    const binary = packedFiles.find((f) => f.path === "bin/spawnpool-worker");
    if (binary === undefined || (binary.mode & 0o111) !== 0o111) throw new Error(`${name} has no executable binary`);
    // Only this platform's binary runs here: the others are checked for their format and machine.
    const head = readFileSync(join(dir, "bin", "spawnpool-worker")).subarray(0, 20);
    const machine = platform === "linux"
      ? head.readUInt32BE(0) === 0x7f454c46 && head.readUInt16LE(18) // ELF, e_machine
      : head.readUInt32LE(0) === 0xfeedfacf && head.readUInt32LE(4); // Mach-O 64, cputype
    const wanted = { "linux-x64": 0x3e, "linux-arm64": 0xb7, "darwin-x64": 0x01000007, "darwin-arm64": 0x0100000c };
    if (machine !== wanted[`${platform}-${arch}`]) throw new Error(`${name}'s binary is not for ${platform}-${arch}`);
    if (name === workerPackage) {
      const workerOutput = run("npm", ["pack", "--pack-destination", scratch, "--json", dir], root);
      workerTarball = join(scratch, JSON.parse(workerOutput.slice(workerOutput.indexOf("[")))[0].filename);
    }
  }
  if (workerTarball === undefined) throw new Error(`spawnpool lists no ${workerPackage}`);
});

/** A scratch app in `dir` that installs the tarball with `install`, holding the app and its tsconfig. */
function scratchApp(name, types, install) {
  const dir = join(scratch, name);
  check(`a ${name} installs the tarball with ${install[0]}`, () => {
    mkdirSync(dir);
    writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, type: "module" }));
    run(install[0], [...install.slice(1), tarball, workerTarball], dir);
    if (!readdirSync(join(dir, "node_modules", "spawnpool", "dist")).includes("mod.js")) {
      throw new Error("spawnpool/dist/mod.js is missing");
    }
    writeFileSync(join(dir, "app.ts"), app);
    writeFileSync(join(dir, "tsconfig.json"), tsconfig(types));
  });
  check(`the ${name} type-checks against the shipped .d.ts`, () => run("tsc", ["-p", "."], dir));
  return dir;
}

/**
 * Runs the app under `host` with `workers` workers ("default": no runtime option, which picks the native worker from
 * the optional package) and checks what it printed. `what` names the installed tarballs in the check's name.
 */
function runs(dir, host, workers, what = "") {
  check(`${host} host, ${workers} workers${what}`, () => {
    const script = host === "deno" ? ["run", "-A", "--quiet", "app.ts"] : ["app.ts"];
    // The native worker is the optional package's; the runtimes are the pinned ones.
    const args = workers === "default" ? [] : workers === "native" ? [workers] : [workers, join(bin, workers)];
    const out = run(host, [...script, ...args], dir).trim();
    const [result, what] = out.split("\n");
    if (result !== expected) throw new Error(`got ${out}`);
    const [runtime, exe] = JSON.parse(what);
    const native = workers === "native" || workers === "default";
    if (runtime !== (native ? "native" : workers)) throw new Error(`the pool ran ${runtime} workers`);
    const binary = realpathSync(join(dir, "node_modules", workerPackage, "bin", "spawnpool-worker"));
    if (process.platform === "linux" && native && exe !== binary) {
      throw new Error(`the native worker is ${exe}, not ${binary} from ${workerPackage}`);
    }
  });
}

/**
 * The package's `spawnpool` bin under `host`: `--help` prints the agent's usage, and an agent started without the
 * NATS client installed (an optional peer dependency the scratch apps leave out) fails saying how to get it.
 */
function agentBin(dir, host) {
  check(`the spawnpool bin under ${host}: --help, and a clear error without the NATS client`, () => {
    const cli = join(dir, "node_modules", ".bin", "spawnpool");
    if (!run(host, [cli, "--help"], dir).startsWith("Usage: spawnpool agent")) throw new Error("no usage from --help");
    let output = "";
    try {
      run(host, [cli, "agent", "--servers", "nats://127.0.0.1:9", "--insecure"], dir);
    } catch (error) {
      output = `${error.stdout}${error.stderr}`;
    }
    if (!/needs the NATS client: install @nats-io\/transport-node/.test(output)) throw new Error(`got ${output}`);
  });
}

// The public classes and functions as users see them: `bun build --splitting` once printed the ones shared between
// chunks numbered (`class SpawnPoolError2`, `Pool2`), which showed in `constructor.name`, Node's console.log of an
// error and stack frames (support/setup.mjs, bundleSplit).
const names = `import { Command, configureDefaultPool, Pool, spawn, SpawnError, SpawnPoolError } from "spawnpool";
import { AbortError, ChildProcess, spawn as spawnChild } from "spawnpool/node";

const caught = async (fn) => {
  try {
    await fn();
  } catch (error) {
    return error;
  }
  throw new Error("no error");
};
const pool = new Pool({ size: 1 });
await pool.close();
const closed = await caught(() => pool.command("true").output());
const missing = await caught(() => spawn(["no-such-program-xyz"]).exited);
const badArgs = await caught(() => pool.spawn(123));
const child = spawnChild("true");
await new Promise((resolve) => child.on("close", resolve));
const stacks = [closed, missing, badArgs].map((error) => String(error.stack));
console.log(JSON.stringify({
  classes: [Pool, Command, SpawnPoolError, SpawnError, ChildProcess, AbortError].map((c) => c.name),
  functions: [spawn, configureDefaultPool].map((f) => f.name),
  instances: [pool, closed, missing, child].map((o) => o.constructor.name),
  stacks: stacks.slice(0, 2).map((stack) => stack.slice(0, stack.indexOf(":"))),
  numbered: stacks.join("\\n").match(/\\b(?:Pool|Command|SpawnPoolError|SpawnError|ChildProcess)\\d+\\b/g) ?? [],
}));
`;
const namesExpected = JSON.stringify({
  classes: ["Pool", "Command", "SpawnPoolError", "SpawnError", "ChildProcess", "AbortError"],
  functions: ["spawn", "configureDefaultPool"],
  instances: ["Pool", "SpawnPoolError", "SpawnError", "ChildProcess"],
  stacks: ["SpawnPoolError", "SpawnError"],
  numbered: [],
});

/** Runs the names script under `host` in the scratch app `dir`. */
function keepsNames(dir, host) {
  check(`${host} host: the public classes keep their names (name, constructor.name, error stacks)`, () => {
    writeFileSync(join(dir, "names.mjs"), names);
    const out = run(host, host === "deno" ? ["run", "-A", "--quiet", "names.mjs"] : ["names.mjs"], dir).trim();
    if (out !== namesExpected) throw new Error(`got ${out}\nwanted ${namesExpected}`);
  });
}

/**
 * A checkout's own `npm pack` (prepack: tools/build.mjs) packs spawnpool without the native worker, and ends by
 * printing the command that packs this machine's worker package and the commands that install both tarballs together.
 * Runs them as printed (the install with the flags that keep it offline) in a scratch Node app and a scratch Bun app;
 * each then gets native workers from the worker package. Returns the apps' directories.
 */
function checkoutPack() {
  const dest = join(scratch, "checkout-pack");
  const apps = { node: join(scratch, "checkout-node-app"), bun: join(scratch, "checkout-bun-app") };
  let printed;
  check("a checkout's npm pack says how to pack and install the native worker beside it", () => {
    mkdirSync(dest);
    const packed = spawnSync("npm", ["pack", "--pack-destination", dest], { cwd: root, env, encoding: "utf8" });
    if (packed.status !== 0) throw new Error(`npm pack failed:\n${packed.stdout}${packed.stderr}`);
    const line = (command) => {
      const found = new RegExp(`^  (${command} .*)$`, "m").exec(packed.stderr);
      if (found === null) throw new Error(`npm pack printed no "${command}" line:\n${packed.stderr}`);
      return found[1].split(" ");
    };
    printed = { pack: line("npm pack"), npm: line("npm install"), bun: line("bun add") };
    const main = JSON.parse(
      execFileSync("tar", ["-xOzf", printed.npm[2], "package/package.json"], { encoding: "utf8" }),
    );
    if (main.optionalDependencies !== undefined) throw new Error("the checkout's tarball lists worker packages");
    run("npm", printed.pack.slice(1), root);
    for (const file of printed.npm.slice(2)) readFileSync(file); // both tarballs are where the advice says
  });
  check("the checkout's tarball and the worker's, installed as npm pack said, in a Node app and a Bun app", () => {
    for (const [host, dir] of Object.entries(apps)) {
      mkdirSync(dir);
      writeFileSync(
        join(dir, "package.json"),
        JSON.stringify({ name: `checkout-${host}-app`, private: true, type: "module" }),
      );
      const [command, ...args] = host === "node" ? printed.npm : printed.bun;
      const offline = command === "npm" ? ["--no-audit", "--no-fund", "--offline"] : ["--offline"];
      run(command, [...args, ...offline], dir);
      writeFileSync(join(dir, "app.ts"), app);
    }
  });
  return apps;
}

const nodeApp = scratchApp("node-app", ["node"], ["npm", "install", "--no-audit", "--no-fund", "--offline"]);
agentBin(nodeApp, "node");
runs(nodeApp, "node", "node");
runs(nodeApp, "node", "bun");
// A Deno app with a package.json uses its node_modules: the npm build, whose worker entry Bun can run (a JSR
// import's cannot, README: Pool).
runs(nodeApp, "deno", "deno");
runs(nodeApp, "deno", "bun");
runs(nodeApp, "node", "native");
runs(nodeApp, "deno", "native");
runs(nodeApp, "node", "default");
runs(nodeApp, "deno", "default");
keepsNames(nodeApp, "node");
keepsNames(nodeApp, "deno");
// Offline, as the Node app: the other platforms' worker packages are not fetched from the registry (they may not be
// published yet, and nothing of that name but our own tarball may be installed).
const bunApp = scratchApp("bun-app", ["bun-types"], ["bun", "add", "--offline"]);
runs(bunApp, "bun", "bun");
runs(bunApp, "bun", "native");
runs(bunApp, "bun", "default");
keepsNames(bunApp, "bun");
agentBin(bunApp, "bun");
const checkoutApps = checkoutPack();
runs(checkoutApps.node, "node", "default", " (the checkout's tarball and the worker's)");
runs(checkoutApps.bun, "bun", "default", " (the checkout's tarball and the worker's)");

rmSync(scratch, { recursive: true, force: true });
console.log(`pack test: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

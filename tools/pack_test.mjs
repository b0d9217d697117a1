// The npm package as users get it: `npm pack` (which builds dist/ and the per-platform packages of the native worker,
// tools/build.mjs), and `npm pack` of this platform's @spawnpool/worker-<platform>-<arch> (dist/npm/; they are not
// published, so the scratch apps install both tarballs, as a registry install would through spawnpool's
// optionalDependencies). Installs them into a scratch Node app (npm) and a scratch Bun app (`bun add`), runs real
// commands through the pool in each (Node host with node workers, with bun workers, with native workers, and the
// node:child_process drop-in; Bun host with bun and native workers; Deno host on the Node app's package.json and
// node_modules, with deno, bun and native workers), checks that native workers run the optional package's binary
// (their /proc/<pid>/exe), and type-checks both apps against the shipped .d.ts. Prints "pack test: N passed, M failed".
import { execFileSync } from "node:child_process";
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
 * the optional package) and checks what it printed.
 */
function runs(dir, host, workers) {
  check(`${host} host, ${workers} workers`, () => {
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
      run(host, [cli, "agent", "--servers", "nats://127.0.0.1:9"], dir);
    } catch (error) {
      output = `${error.stdout}${error.stderr}`;
    }
    if (!/needs the NATS client: install @nats-io\/transport-node/.test(output)) throw new Error(`got ${output}`);
  });
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
// Offline, as the Node app: the other platforms' worker packages are not fetched from the registry (they may not be
// published yet, and nothing of that name but our own tarball may be installed).
const bunApp = scratchApp("bun-app", ["bun-types"], ["bun", "add", "--offline"]);
runs(bunApp, "bun", "bun");
runs(bunApp, "bun", "native");
runs(bunApp, "bun", "default");
agentBin(bunApp, "bun");

rmSync(scratch, { recursive: true, force: true });
console.log(`pack test: ${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);

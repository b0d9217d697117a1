/**
 * spawnpool from JSR runs native workers on Deno. The JSR package as `tools/stage.mjs --jsr` writes it, imported by a
 * Deno app from a path (and from a URL, as from jsr.io), imports this platform's worker package from a local npm
 * registry (support/npm_registry.mjs, through NPM_CONFIG_REGISTRY) into an empty DENO_DIR; the package is built by
 * support/build_native.mjs and packed by `npm pack`, as published. The default pool then reports `runtime: "native"`
 * and runs commands: with `-A`, with the permissions the README names (`--allow-run --allow-net`), with a scoped
 * `--allow-run` naming the binary (and `runtime: "native"`), with a `node_modules` folder, and offline once cached.
 * Where the package cannot be had (a registry without it, no registry answering) the default runs Deno workers and
 * `runtime: "native"` fails naming the package.
 *
 * It runs once, under deno test; bun test and node --test skip it (tools/test.mjs runs every file under each): the host
 * under test is a `deno` process that every runner would start alike, and staging the packages takes seconds.
 *
 * @module
 */

import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, normalize } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { buildPlatformPackages, PLATFORM_TARGETS } from "../support/build_native.mjs";
import { npmPack, type NpmRegistry, startNpmRegistry } from "../support/npm_registry.mjs";
import { runCollecting } from "../support/run.mjs";
import { HOST } from "./_helpers.ts";

const root = fileURLToPath(new URL("..", import.meta.url).href);
const platform = `${process.platform}-${process.arch}`;
const workerPackage = `@spawnpool/worker-${platform}`;
const version: string = JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version;
const specifier = `npm:${workerPackage}@${version}`;
const skip = HOST !== "deno"
  ? "runs under deno test only (tools/test.mjs runs every file under each runner): its host is a deno child process"
  : !PLATFORM_TARGETS.some((target) => `${target.platform}-${target.arch}` === platform) &&
    `spawnpool publishes no native worker for ${platform}`;

/** What a Deno host printed: each command's stdout or error, and its pool's runtime and first worker's executable. */
interface Probe {
  results: string[];
  runtime?: string;
  exe?: string;
}

/**
 * A host that runs `commands` (each with the argument "x") on a pool of `runtime` workers (null: the default) from
 * `from`, and prints a {@linkcode Probe}. The executable is read from /proc where the host may (`-A`).
 */
const probe = (from: string, runtime: string | null, commands = ["echo"]) => `
import { Pool } from ${JSON.stringify(from)};
const pool = new Pool({ size: 1${runtime === null ? "" : `, runtime: ${JSON.stringify(runtime)}`} });
const results = [];
for (const cmd of ${JSON.stringify(commands)}) {
  try {
    results.push(new TextDecoder().decode((await pool.command(cmd, { args: ["x"] }).output()).stdout).trim());
  } catch (error) {
    results.push(\`\${error.code ?? error.name} \${error.message}\`);
  }
}
const pid = pool.stats().workers[0]?.pid;
let exe;
try {
  exe = Deno.readLinkSync(\`/proc/\${pid}/exe\`);
} catch {
  // No worker, not permitted, or not Linux.
}
console.log(JSON.stringify({ results, runtime: pool.stats().runtime, exe }));
await pool.close();
`;

describe("spawnpool from JSR on a Deno host, its native worker from npm", { skip }, () => {
  let scratch = "";
  let registry: NpmRegistry;
  let empty: NpmRegistry | undefined;
  let staticServer: Server;
  let origin = "";
  let tarball = "";
  /** The staged JSR package's entry, imported from a path. */
  let entry = "";
  /** The Deno cache the registry's package goes into (and stays in, for the offline run). */
  let denoDir = "";

  /** Runs a Deno host script in `cwd` with `flags`, against `registry` unless `env` says otherwise. */
  function deno(
    flags: string[],
    script: string,
    { cwd = join(scratch, "app"), env = {} }: { cwd?: string; env?: Record<string, string> } = {},
  ): Promise<{ status: number | null; out: string; probe?: Probe }> {
    const file = join(cwd, `host-${Math.random().toString(36).slice(2)}.ts`);
    writeFileSync(file, script);
    // The lower-case npm_config_registry that `npm test` exports would not be Deno's, but is dropped all the same.
    const { npm_config_registry: _npm, ...inherited } = process.env;
    const runEnv = { ...inherited, NO_COLOR: "1", DENO_DIR: denoDir, NPM_CONFIG_REGISTRY: registry.url, ...env };
    const args = ["run", "--quiet", "--no-lock", ...flags, file];
    return runCollecting(process.execPath, args, { cwd, env: runEnv, ms: 30_000 }).then(({ status, out }) => {
      const line = out.trim().split("\n").pop() ?? "";
      return { status, out, probe: line.startsWith("{") ? JSON.parse(line) : undefined };
    });
  }

  /** Asserts that a host's pool ran `results` on `runtime` workers, and exited 0. */
  function assertRan(run: { status: number | null; out: string; probe?: Probe }, runtime: string, results = ["x"]) {
    assert.equal(run.status, 0, run.out);
    assert.deepEqual(run.probe?.results, results, run.out);
    assert.equal(run.probe?.runtime, runtime, run.out);
  }

  before(async () => {
    scratch = mkdtempSync(join(tmpdir(), "spawnpool-jsr-native-"));
    denoDir = join(scratch, "deno-dir");
    mkdirSync(join(scratch, "app"));
    const staged = spawnSync("node", [join(root, "tools", "stage.mjs"), "--jsr", join(scratch, "jsr")], {
      encoding: "utf8",
    });
    assert.equal(staged.status, 0, `node tools/stage.mjs --jsr failed: ${staged.stdout}${staged.stderr}`);
    entry = join(scratch, "jsr", "dist", "mod.js");
    // This platform's worker package only (the others cannot run here), built as `npm run build` builds it.
    const [built] = await buildPlatformPackages({ quiet: true, only: [platform], into: join(scratch, "npm") });
    assert.ok(built !== undefined, `could not build ${workerPackage}`);
    [tarball] = npmPack([built.dir], scratch);
    registry = await startNpmRegistry([tarball]);
    // The staged package over HTTP too, as jsr.io serves it.
    staticServer = createServer((req, res) => {
      try {
        const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
        res.writeHead(200, { "content-type": "application/javascript" }).end(readFileSync(join(scratch, "jsr", path)));
      } catch {
        res.writeHead(404).end();
      }
    });
    await new Promise<void>((resolve) => staticServer.listen(0, "127.0.0.1", resolve));
    origin = `http://127.0.0.1:${(staticServer.address() as AddressInfo).port}`;
  });

  after(async () => {
    await registry?.close();
    await empty?.close();
    await new Promise<void>((resolve) => staticServer ? staticServer.close(() => resolve()) : resolve());
    if (scratch !== "") rmSync(scratch, { recursive: true, force: true });
  });

  it("with -A, the default pool runs native workers: the binary of this platform's package, executable in DENO_DIR", async () => {
    const run = await deno(["-A", "--no-config"], probe(entry, null, ["echo", "printf"]));
    assertRan(run, "native", ["x", "x"]);
    // Only this platform's package was asked for: its document and its tarball.
    assert.deepEqual(
      new Set(registry.requests),
      new Set([`/${workerPackage}`, `/${workerPackage}/-/${tarball.split("/").pop()}`]),
    );
    if (process.platform === "linux") {
      const exe = run.probe?.exe ?? "";
      assert.ok(exe.startsWith(`${denoDir}/npm/`), exe);
      assert.ok(exe.endsWith(`/${workerPackage}/${version}/bin/spawnpool-worker`), exe);
      assert.equal(statSync(exe).mode & 0o111, 0o111, "the binary is executable in Deno's npm cache");
    }
  });

  it("with --allow-run --allow-net only (the README's), the default pool runs native workers", async () => {
    assertRan(await deno(["--allow-run", "--allow-net", "--no-config"], probe(entry, null)), "native");
  });

  it("imported from a URL (as from jsr.io) with --allow-import of it, the default pool runs native workers", async () => {
    const host = new URL(origin).host;
    const run = await deno(
      [`--allow-import=${host}`, "--allow-run", "--allow-net", "--no-config"],
      probe(`${origin}/dist/mod.js`, null),
    );
    assertRan(run, "native");
  });

  it("with --allow-run scoped to the binary (its path from `deno eval`) and echo: runtime native runs echo, id is NotCapable; the default keeps Deno workers", async () => {
    // The README's way to the path: the package's entry exports it.
    const evaluated = await deno(["--no-config"], `console.log((await import("${specifier}")).path);\n`);
    const binary = evaluated.out.trim();
    assert.ok(binary.endsWith("/bin/spawnpool-worker"), evaluated.out);
    const flags = [`--allow-run=${binary},echo`, "--allow-net", "--no-config"];
    const notCapable = 'NotCapable Requires run access to "id", run again with the --allow-run flag';
    assertRan(await deno(flags, probe(entry, "native", ["echo", "id"])), "native", ["x", notCapable]);
    // The default never prompts nor fetches on a scoped --allow-run: Deno workers (whose own path it names).
    const denoWorkers = [`--allow-run=${binary},echo,${process.execPath}`, "--allow-net", "--no-config"];
    assertRan(await deno(denoWorkers, probe(entry, null)), "deno");
  });

  it("the README's lines for native workers under a scoped --allow-run run as pasted: git runs, anything else is NotCapable", async () => {
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const block = [...readme.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]).find((b) =>
      b.includes("deno eval")
    );
    assert.ok(block !== undefined, "the README's block");
    assert.ok(block.includes(`@spawnpool/worker-linux-x64@${version}`), "the README names this version's package");
    const app = join(scratch, "readme-app");
    mkdirSync(app);
    writeFileSync(
      join(app, "app.ts"),
      `import { Pool } from ${JSON.stringify(entry)};
await using pool = new Pool({ runtime: "native" });
if (!(await pool.command("git", { args: ["--version"] }).output()).success) throw new Error("git failed");
try {
  await pool.command("echo", { args: ["no"] }).output();
  throw new Error("echo was allowed");
} catch (error) {
  if (!(error instanceof Deno.errors.NotCapable)) throw error;
}
console.log("ok", pool.stats().runtime);
`,
    );
    const { npm_config_registry: _npm, ...inherited } = process.env;
    const child = spawn("sh", ["-c", block.replaceAll("worker-linux-x64@", `${workerPackage.split("/")[1]}@`)], {
      cwd: app,
      env: {
        ...inherited,
        NO_COLOR: "1",
        PATH: `${dirname(process.execPath)}:${process.env.PATH}`,
        DENO_DIR: denoDir,
        NPM_CONFIG_REGISTRY: registry.url,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (s: string) => (out += s));
    child.stderr.setEncoding("utf8").on("data", (s: string) => (out += s));
    const code = await new Promise((resolve) => child.on("close", resolve));
    assert.equal(code, 0, out);
    assert.match(out, /^ok native$/m);
  });

  it('in an app with "nodeModulesDir": "auto", the default pool runs the binary from its node_modules', async () => {
    const app = join(scratch, "auto-app");
    mkdirSync(app);
    writeFileSync(join(app, "deno.json"), JSON.stringify({ nodeModulesDir: "auto" }));
    const run = await deno(["-A"], probe(entry, null), { cwd: app });
    assertRan(run, "native");
    if (process.platform === "linux") {
      const exe = run.probe?.exe ?? "";
      assert.ok(exe.startsWith(`${app}/node_modules/.deno/`), exe);
      assert.equal(statSync(exe).mode & 0o111, 0o111, "the binary is executable in node_modules");
    }
  });

  it("without a registry package (a registry that has none, then none answering): the default runs Deno workers, runtime native fails naming the package", async () => {
    empty = await startNpmRegistry([]);
    const env = { NPM_CONFIG_REGISTRY: empty.url, DENO_DIR: join(scratch, "deno-dir-empty") };
    assertRan(await deno(["-A", "--no-config"], probe(entry, null), { env }), "deno");
    const native = await deno(["-A", "--no-config"], probe(entry, "native"), { env });
    assert.equal(native.probe?.runtime, "native", native.out);
    assert.match(
      native.probe?.results[0] ?? "",
      new RegExp(
        `^ERR_WORKER_START Could not import the native worker from npm \\(${specifier}\\): .*does not exist; ` +
          `add it to the app \\(deno add ${specifier}\\) or pass the path of a binary as the execPath option$`,
      ),
    );
    await empty.close();
    assertRan(await deno(["-A", "--no-config"], probe(entry, null), { env }), "deno");
  });

  it("offline once cached: with no registry answering, the default pool runs native workers from DENO_DIR", async () => {
    await registry.close();
    assertRan(await deno(["-A", "--no-config"], probe(entry, null)), "native");
  });
});

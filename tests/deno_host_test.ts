/**
 * A Deno host as users run it: spawnpool imported from a remote URL (as from JSR, here a local HTTP server
 * serving the JSR package as `node tools/stage.mjs --jsr` writes it, into an empty DENO_DIR), typed by its
 * declarations, with Deno workers started from that URL, native ones that fail naming the npm package when the
 * registry (this server) has none (tests/jsr_native_test.ts has one that does), and Bun workers
 * refused with an error that names the npm package; a host missing a permission, whose error names the flag
 * to add; and a host whose `--allow-run` is scoped, whose commands the pool runs only where Deno would. Runs
 * `deno` as a child of any test runtime.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join, normalize } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { runCollecting } from "../support/run.mjs";

const root = fileURLToPath(new URL("..", import.meta.url).href);
const scratch = mkdtempSync(join(tmpdir(), "spawnpool-deno-host-"));
/** The JSR package, staged as it is published (its own build: the checkout's dist/ is left alone). */
const jsr = join(scratch, "jsr");

/** Runs `deno` (from PATH) on a script and resolves with its combined output (async: this process serves it). */
function deno(
  args: string[],
  script: string,
  env: Record<string, string> = {},
): Promise<{ status: number | null; out: string }> {
  const file = join(scratch, `host-${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(file, script);
  const argv = ["run", "--quiet", "--no-config", "--no-lock", ...args, file];
  return runCollecting("deno", argv, { env: { ...process.env, NO_COLOR: "1", ...env }, ms: 60_000 })
    .then(({ status, out }) => ({ status, out }));
}

/** A host that runs echo on a pool of `runtime` workers (null: the default) and prints the pool's runtime. */
const probe = (from: string, runtime: string | null = "deno") => `
import { Pool } from "${from}";
const pool = new Pool({ size: 1${runtime === null ? "" : `, runtime: "${runtime}"`} });
try {
  const out = await pool.command("echo", { args: ["from a deno worker"] }).output();
  console.log(new TextDecoder().decode(out.stdout).trim(), pool.stats().runtime);
} catch (error) {
  console.log("ERR", error.code, error.message);
}
await pool.close();
`;

describe("a Deno host", () => {
  let server: ReturnType<typeof createServer>;
  let origin = "";
  const served: string[] = [];

  before(async () => {
    const staged = spawnSync("node", [join(root, "tools", "stage.mjs"), "--jsr", jsr], { encoding: "utf8" });
    assert.equal(staged.status, 0, `node tools/stage.mjs --jsr failed: ${staged.stdout}${staged.stderr}`);
    server = createServer((req, res) => {
      const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
      served.push(path);
      try {
        const body = readFileSync(join(jsr, path));
        const type = path.endsWith(".d.ts") ? "application/typescript" : "application/javascript";
        res.writeHead(200, { "content-type": type });
        res.end(body);
      } catch {
        res.writeHead(404);
        res.end();
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  /**
   * A host importing the URL: an empty DENO_DIR, and this server as its npm registry, which has no package (the JSR
   * build imports its native worker from npm: tests/jsr_native_test.ts), so that no run reaches a public registry.
   */
  const urlEnv = () => ({
    DENO_DIR: mkdtempSync(join(scratch, "deno-dir-")),
    NPM_CONFIG_REGISTRY: `${origin}/`,
  });

  it("imports spawnpool from a URL and runs Deno workers from that URL", async () => {
    const host = new URL(origin).host;
    const { status, out } = await deno(
      [`--allow-import=${host}`, "--allow-run", "--allow-net", "--allow-read", "--allow-env"],
      probe(`${origin}/dist/mod.js`),
      urlEnv(),
    );
    assert.equal(out.trim(), "from a deno worker deno");
    assert.equal(status, 0);
    assert.ok(served.includes("/dist/worker/main.js"), "the worker entry was fetched from the URL");
  });

  it("imports spawnpool from a URL typed by its declarations: deno check accepts a right use and flags a wrong one", async () => {
    const host = new URL(origin).host;
    const check = (script: string) => {
      const file = join(scratch, `check-${Math.random().toString(36).slice(2)}.ts`);
      writeFileSync(file, script);
      const argv = ["check", "--quiet", "--no-config", "--no-lock", `--allow-import=${host}`, file];
      const env = { ...process.env, NO_COLOR: "1", DENO_DIR: mkdtempSync(join(scratch, "deno-dir-")) };
      return runCollecting("deno", argv, { env, ms: 60_000 });
    };
    const imports = `import { Command, Pool } from "${origin}/dist/mod.js";\n` +
      `import { execFile } from "${origin}/dist/node.js";\n`;
    const right = await check(
      `${imports}const out = await new Command("echo").output();\nconst code: number = out.code;\n` +
        `const pool: Pool = new Pool({ size: 1 });\nexecFile("echo", ["x"], (error, stdout) => console.log(error, stdout));\n` +
        `console.log(code, pool);\n`,
    );
    assert.equal(right.status, 0, right.out);
    const wrong = await check(`${imports}const n: number = new Command("echo");\nconsole.log(n, Pool, execFile);\n`);
    assert.notEqual(wrong.status, 0);
    assert.match(wrong.out, /TS2322/);
  });

  it("imports spawnpool from a URL, its npm registry without the native worker's package: the default is Deno workers; native ones fail naming the package", async () => {
    const host = new URL(origin).host;
    const flags = [`--allow-import=${host}`, "--allow-run", "--allow-net", "--allow-read", "--allow-env"];
    const env = urlEnv();
    assert.equal((await deno(flags, probe(`${origin}/dist/mod.js`, null), env)).out.trim(), "from a deno worker deno");
    const { out } = await deno(flags, probe(`${origin}/dist/mod.js`, "native"), env);
    const specifier = `npm:@spawnpool/worker-${process.platform}-${process.arch}@`;
    assert.match(
      out,
      new RegExp(`^ERR ERR_WORKER_START Could not import the native worker from npm \\(${specifier}`, "m"),
    );
    assert.match(out, new RegExp(`; add it to the app \\(deno add ${specifier}.*execPath`, "m"));
    assert.ok(served.includes(`/@spawnpool/worker-${process.platform}-${process.arch}`), "the registry was asked");
  });

  it("from a checkout with -A, the default is native workers", async () => {
    const { out } = await deno(["-A"], probe(join(root, "mod.ts"), null));
    assert.equal(out.trim(), "from a deno worker native");
  });

  it("imports spawnpool from a URL: Bun workers, which cannot run a worker from a URL, fail naming the npm package", async () => {
    const host = new URL(origin).host;
    const { out } = await deno(
      [`--allow-import=${host}`, "--allow-run", "--allow-net", "--allow-read", "--allow-env"],
      probe(`${origin}/dist/mod.js`, "bun"),
      urlEnv(),
    );
    assert.match(out, /^ERR ERR_WORKER_START bun workers need spawnpool from npm .*deno add npm:spawnpool/m);
  });

  it("without --allow-run: the command fails as Deno.Command would, naming the flag", async () => {
    const { out } = await deno(["--allow-net", "--allow-read"], probe(join(root, "mod.ts")));
    assert.equal(out.trim(), 'ERR undefined Requires run access to "echo", run again with the --allow-run flag');
  });

  it("without --allow-net: the request fails with ERR_WORKER_START naming the flag", async () => {
    const { out } = await deno(["--allow-run", "--allow-read"], probe(join(root, "mod.ts")));
    assert.match(out, /^ERR ERR_WORKER_START .*--allow-net/m);
  });

  it("with --allow-run --allow-net only, Deno workers run", async () => {
    const { out } = await deno(["--allow-run", "--allow-net"], probe(join(root, "mod.ts")));
    assert.equal(out.trim(), "from a deno worker deno");
  });

  it("with --allow-run --allow-net only (no read), the default stays Deno workers, without a prompt", async () => {
    const { out } = await deno(["--allow-run", "--allow-net"], probe(join(root, "mod.ts"), null));
    assert.equal(out.trim(), "from a deno worker deno");
  });
});

/**
 * What a scoped `--allow-run` must name for a pool's `runtime` workers: the path found on PATH (what the pool runs
 * for Bun and Node workers) and its real path (a Deno host's own executable, for Deno workers); the checkout's build
 * for native workers.
 */
function workerPaths(runtime: string): string {
  if (runtime === "native") return join(root, "native", "build", "spawnpool-worker");
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const path = join(dir, runtime);
    try {
      return `${path},${realpathSync(path)}`;
    } catch {
      // not in this directory
    }
  }
  throw new Error(`${runtime} is not on PATH`);
}

/**
 * A host that tries each spawn path (the Deno shape's output() and spawn(), the Bun shape, the node drop-in's
 * spawn and execFile) with `cmd`, printing "<path> <cmd> ok <stdout>" or "<path> <cmd> <error class> <message>".
 */
const permissionProbe = (runtime: string, commands: string[], env: Record<string, string> = {}, cwd?: string) => `
import { Pool } from "${join(root, "mod.ts")}";
import { childProcessFor } from "${join(root, "node.ts")}";
import process from "node:process";
const pool = new Pool({ size: 1, runtime: "${runtime}" });
const childProcess = childProcessFor(pool);
await pool.ready();
const env = ${JSON.stringify(env)};
const cwd = ${JSON.stringify(cwd)};
const text = (bytes) => new TextDecoder().decode(bytes).trim();
const kind = (error) => error instanceof Deno.errors.NotCapable ? "NotCapable" : error?.name;
for (const cmd of ${JSON.stringify(commands)}) {
  const paths = {
    output: async () => text((await pool.command(cmd, { args: ["x"], env, cwd }).output()).stdout),
    spawn: async () => text((await pool.command(cmd, { args: ["x"], env, cwd, stdout: "piped" }).spawn().output()).stdout),
    bun: async () => (await new Response(pool.spawn([cmd, "x"], { env: { ...Deno.env.toObject(), ...env }, cwd }).stdout).text()).trim(),
    node: () => new Promise((resolve, reject) => {
      const child = childProcess.spawn(cmd, ["x"], { env: { ...process.env, ...env }, cwd });
      let out = "";
      child.stdout.on("data", (chunk) => (out += chunk));
      child.on("error", reject);
      child.on("close", () => resolve(out.trim()));
    }),
    execFile: () => new Promise((resolve, reject) => {
      childProcess.execFile(cmd, ["x"], { env: { ...process.env, ...env }, cwd }, (error, stdout) => error ? reject(error) : resolve(stdout.trim()));
    }),
  };
  for (const [path, run] of Object.entries(paths)) {
    try {
      console.log(path, cmd, "ok", await run());
    } catch (error) {
      console.log(path, cmd, kind(error), error.message);
    }
  }
}
await pool.close();
`;

describe("a Deno host's run permission binds every pooled command", () => {
  // The file's last tests: its scratch folder (scripts, Deno caches, planted programs) goes with them.
  after(() => rmSync(scratch, { recursive: true, force: true }));
  const PATHS = ["output", "spawn", "bun", "node", "execFile"];
  const WORKERS = (process.env.SPAWNPOOL_TEST_WORKERS ?? "node,bun,deno,native").split(",");
  const rest = ["--allow-net", "--allow-read", "--allow-env"];
  const notCapable = (path: string, cmd: string) =>
    `${path} ${cmd} NotCapable Requires run access to "${cmd}", run again with the --allow-run flag`;

  for (const runtime of WORKERS) {
    it(`--allow-run=<${runtime} worker>,echo: echo runs, id is NotCapable on every spawn path (${runtime} workers)`, async () => {
      const allow = `--allow-run=${workerPaths(runtime)},echo`;
      const { out } = await deno([allow, ...rest], permissionProbe(runtime, ["echo", "id"]));
      const lines = out.trim().split("\n");
      assert.deepEqual(lines, [
        ...PATHS.map((path) => `${path} echo ok x`),
        ...PATHS.map((path) => notCapable(path, "id")),
      ]);
    });

    it(`--allow-run=<${runtime} worker>,echo: an echo planted on the call's own PATH never runs (${runtime} workers)`, async () => {
      // As Deno.Command: the program is found on the call's PATH, and the file found is what the permission is
      // checked for, and what the worker runs (no second lookup).
      const planted = mkdtempSync(join(scratch, "planted-"));
      const marker = join(planted, "ran");
      writeFileSync(join(planted, "echo"), `#!/bin/sh\n: > '${marker}'\necho planted\n`, { mode: 0o755 });
      const allow = `--allow-run=${workerPaths(runtime)},echo`;
      const { out } = await deno([allow, ...rest], permissionProbe(runtime, ["echo"], { PATH: planted }));
      assert.deepEqual(out.trim().split("\n"), PATHS.map((path) => notCapable(path, "echo")));
      assert.equal(existsSync(marker), false, "the planted echo ran");
      // Relative PATH entries are the call's cwd's, as Deno finds them: "." with the planted directory as cwd.
      const relative = await deno([allow, ...rest], permissionProbe(runtime, ["echo"], { PATH: "." }, planted));
      assert.deepEqual(relative.out.trim().split("\n"), PATHS.map((path) => notCapable(path, "echo")));
      assert.equal(existsSync(marker), false, "the planted echo ran");
    });

    it(`--allow-run=<${runtime} worker>,echo without --allow-read: a call's own PATH is refused, the host's is not (${runtime} workers)`, async () => {
      // The host cannot look for the program on the call's PATH: it refuses rather than let the worker choose.
      const planted = mkdtempSync(join(scratch, "planted-"));
      const marker = join(planted, "ran");
      writeFileSync(join(planted, "echo"), `#!/bin/sh\n: > '${marker}'\necho planted\n`, { mode: 0o755 });
      const allow = `--allow-run=${workerPaths(runtime)},echo`;
      const flags = [allow, "--allow-net", "--allow-env", `--allow-read=${root}`];
      const { out } = await deno(flags, permissionProbe(runtime, ["echo"], { PATH: planted }));
      const refused = 'NotCapable Requires read access to find "echo" on the command\'s own PATH, run again with the ' +
        "--allow-read flag (or give the program's absolute path)";
      assert.deepEqual(out.trim().split("\n"), PATHS.map((path) => `${path} echo ${refused}`));
      assert.equal(existsSync(marker), false, "the planted echo ran");
      const own = await deno(flags, permissionProbe(runtime, ["echo"]));
      assert.deepEqual(own.out.trim().split("\n"), PATHS.map((path) => `${path} echo ok x`));
    });

    it(`--deny-run=id with everything else allowed: id is NotCapable (${runtime} workers)`, async () => {
      const { out } = await deno(["-A", "--deny-run=id"], permissionProbe(runtime, ["id", "echo"]));
      assert.deepEqual(out.trim().split("\n"), [
        ...PATHS.map((path) => notCapable(path, "id")),
        ...PATHS.map((path) => `${path} echo ok x`),
      ]);
    });
  }

  it("a loader variable (LD_PRELOAD) needs an unscoped --allow-run, as with Deno.Command", async () => {
    const allow = `--allow-run=${workerPaths("deno")},echo`;
    const { out } = await deno([allow, ...rest], permissionProbe("deno", ["echo"], { LD_PRELOAD: "x.so" }));
    const message = "NotCapable Requires --allow-run permissions to spawn subprocess with LD_PRELOAD environment " +
      "variable. Alternatively, spawn with the environment variable unset.";
    assert.deepEqual(out.trim().split("\n"), PATHS.map((path) => `${path} echo ${message}`));
  });

  it("an unscoped --allow-run runs any command, loader variables included", async () => {
    const { out } = await deno(
      ["--allow-run", ...rest],
      permissionProbe("deno", ["basename"], { LD_LIBRARY_PATH: "/nowhere" }),
    );
    assert.deepEqual(out.trim().split("\n"), PATHS.map((path) => `${path} basename ok x`));
  });
});

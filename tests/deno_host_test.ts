/**
 * A Deno host as users run it: spawnpool imported from a remote URL (as from JSR, here a local HTTP server
 * serving this checkout, into an empty DENO_DIR), with Deno workers started from that URL, and Bun workers
 * refused with an error that names the npm package; and a host missing a permission, whose error names the flag
 * to add. Runs `deno` as a child of any test runtime.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join, normalize } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url).href);
const scratch = mkdtempSync(join(tmpdir(), "spawnpool-deno-host-"));

/** Runs `deno` (from PATH) on a script and resolves with its combined output (async: this process serves it). */
function deno(
  args: string[],
  script: string,
  env: Record<string, string> = {},
): Promise<{ status: number | null; out: string }> {
  const file = join(scratch, `host-${Math.random().toString(36).slice(2)}.ts`);
  writeFileSync(file, script);
  const child = spawn("deno", ["run", "--quiet", "--no-config", "--no-lock", ...args, file], {
    env: { ...process.env, NO_COLOR: "1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout.setEncoding("utf8").on("data", (s: string) => (out += s));
  child.stderr.setEncoding("utf8").on("data", (s: string) => (out += s));
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  return new Promise((resolve) =>
    child.on("close", (status) => {
      clearTimeout(timer);
      resolve({ status, out });
    })
  );
}

const probe = (from: string, runtime = "deno") => `
import { Pool } from "${from}";
const pool = new Pool({ size: 1, runtime: "${runtime}" });
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
    server = createServer((req, res) => {
      const path = normalize(decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname));
      served.push(path);
      try {
        const body = readFileSync(join(root, path));
        res.writeHead(200, { "content-type": "application/typescript" });
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

  it("imports spawnpool from a URL and runs Deno workers from that URL", async () => {
    const host = new URL(origin).host;
    const { status, out } = await deno(
      [`--allow-import=${host}`, "--allow-run", "--allow-net", "--allow-read", "--allow-env"],
      probe(`${origin}/mod.ts`),
      { DENO_DIR: mkdtempSync(join(tmpdir(), "spawnpool-deno-dir-")) },
    );
    assert.equal(out.trim(), "from a deno worker deno");
    assert.equal(status, 0);
    assert.ok(served.includes("/worker/main.ts"), "the worker entry was fetched from the URL");
  });

  it("imports spawnpool from a URL: Bun workers, which cannot run a worker from a URL, fail naming the npm package", async () => {
    const host = new URL(origin).host;
    const { out } = await deno(
      [`--allow-import=${host}`, "--allow-run", "--allow-net", "--allow-read", "--allow-env"],
      probe(`${origin}/mod.ts`, "bun"),
      { DENO_DIR: mkdtempSync(join(tmpdir(), "spawnpool-deno-dir-")) },
    );
    assert.match(out, /^ERR ERR_WORKER_START bun workers need spawnpool from npm .*deno add npm:spawnpool/m);
  });

  it("without --allow-run: the request fails with ERR_WORKER_START naming the flag", async () => {
    const { out } = await deno(["--allow-net", "--allow-read"], probe(join(root, "mod.ts")));
    assert.match(out, /^ERR ERR_WORKER_START .*--allow-run/m);
  });

  it("without --allow-net: the request fails with ERR_WORKER_START naming the flag", async () => {
    const { out } = await deno(["--allow-run", "--allow-read"], probe(join(root, "mod.ts")));
    assert.match(out, /^ERR ERR_WORKER_START .*--allow-net/m);
  });

  it("with --allow-run --allow-net only, Deno workers run", async () => {
    const { out } = await deno(["--allow-run", "--allow-net"], probe(join(root, "mod.ts")));
    assert.equal(out.trim(), "from a deno worker deno");
  });
});

/**
 * A Deno user's app that imports spawnpool's sources (as a path import gives them) type-checks with the user's own
 * deno.json: one without bun-types, which the checkout's deno.json has and a user's does not. The library types a
 * foreign runtime through small local interfaces, so `deno check` passes with no other runtime's types.
 */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { HOST } from "./_helpers.ts";

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url).href);

/** A user's app: the Deno, Bun and node:child_process shapes, each imported by the entry's absolute path. */
const APP = `import { Command, Pool, spawn } from ${JSON.stringify(here("../mod.ts"))};
import { spawn as nodeSpawn } from ${JSON.stringify(here("../node.ts"))};

await using pool = new Pool({ size: 1 });
const listed: Uint8Array = (await pool.command("ls", { args: ["-l"] }).output()).stdout;
const status: number = (await new Command("true").output()).code;
const proc = spawn(["echo", "hi"], { stdout: "pipe" });
const exited: number = await proc.exited;
const child = nodeSpawn("echo", ["hi"]);
child.on("exit", (code: number | null, signal: string | null) => console.log(code, signal));
console.log(listed, status, exited);
`;

/** The user's deno.json: no bun-types, no node_modules, no lockfile. */
const USER_CONFIG = { nodeModulesDir: "none", lock: false };

describe("a Deno user's app", () => {
  it(
    "that imports mod.ts and node.ts passes deno check with a deno.json of its own (no bun-types)",
    { skip: HOST !== "deno" && "deno check is Deno's own: runs under deno test" },
    () => {
      const dir = realpathSync(mkdtempSync(join(tmpdir(), "spawnpool-typecheck-")));
      try {
        writeFileSync(join(dir, "app.ts"), APP);
        writeFileSync(join(dir, "deno.json"), `${JSON.stringify(USER_CONFIG)}\n`);
        const run = spawnSync(process.execPath, ["check", "--config", join(dir, "deno.json"), "app.ts"], {
          cwd: dir,
          env: { ...process.env, NO_COLOR: "1" },
          encoding: "utf8",
          timeout: 120_000,
        });
        assert.equal(run.error, undefined, `deno check did not run: ${run.error}`);
        assert.equal(run.status, 0, `deno check failed:\n${run.stdout}${run.stderr}`);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

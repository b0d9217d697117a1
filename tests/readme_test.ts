/**
 * The README's examples run as pasted, under the runtime running this file: each TypeScript block (its imports of the
 * published names pointed at the checkout, as an install would; the remote one against a token-protected nats-server
 * and an agent started here), and the Deno permissions line (with `deno` on PATH as the symlink npm installs). Each
 * must exit 0 on its own: an example that needs a step the README does not give, or that keeps its process alive,
 * fails. A new shell block must be classified below.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { type NatsServer, startNatsServer } from "../support/nats_server.mjs";
import { HOST, hostArgv } from "./_helpers.ts";
import { type AgentProcess, skipWithout, startAgent } from "./_remote.ts";

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url).href);
const readme = readFileSync(here("../README.md"), "utf8");
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "spawnpool-readme-")));

/** The README's fenced blocks of `lang`, in order. */
function blocks(lang: string): string[] {
  return [...readme.matchAll(new RegExp("^```" + lang + "\\n([\\s\\S]*?)^```$", "gm"))].map((m) => m[1]);
}

/** The published names, pointed at the checkout's entries. */
const ENTRIES: Record<string, string> = {
  "spawnpool": "../mod.ts",
  "@spawnpool/spawnpool": "../mod.ts",
  "spawnpool/node": "../node.ts",
  "@spawnpool/spawnpool/node": "../node.ts",
  "spawnpool/pty": "../pty.ts",
  "@spawnpool/spawnpool/pty": "../pty.ts",
};

function installed(source: string): string {
  return source.replace(/from "([^"]+)"/g, (whole, name: string) => {
    const entry = ENTRIES[name];
    return entry === undefined ? whole : `from ${JSON.stringify(pathToFileURL(here(entry)).href)}`;
  });
}

/** Runs `argv` in the scratch directory; resolves with its exit code and output, or rejects after `ms`. */
function run(
  argv: string[],
  env: Record<string, string | undefined> = {},
  ms = 60_000,
): Promise<{ code: number | null; out: string }> {
  const child = spawn(argv[0], argv.slice(1), { cwd: scratch, env: { ...process.env, ...env }, stdio: "pipe" });
  let out = "";
  child.stdout.on("data", (chunk) => (out += chunk));
  child.stderr.on("data", (chunk) => (out += chunk));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`did not exit within ${ms} ms (an example must end on its own):\n${out}`));
    }, ms);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/** The shell blocks, each run below or left out for the reason given. */
const SHELL_BLOCKS: Array<[match: RegExp, how: string]> = [
  [/deno eval .*npm:@spawnpool\/worker-/, "tests/jsr_native_test.ts runs it, the worker package from a local registry"],
  [/deno run --allow-run=/, "run: the Deno permissions line"],
  [/nats-server -a 127\.0\.0\.1/, "its server and agent are started by this file, for the remote example"],
  [/^npm start/m, "npm start and npm test are the project's own commands (CI runs npm test)"],
];

describe(`the README's examples (${HOST} host)`, () => {
  const examples = blocks("ts");

  it("has the examples this file runs, and no shell block it does not know", () => {
    assert.ok(examples.length >= 4, `${examples.length} TypeScript blocks`);
    for (const block of blocks("sh")) {
      assert.ok(SHELL_BLOCKS.some(([match]) => match.test(block)), `an unclassified shell block:\n${block}`);
    }
  });

  const remote = examples.filter((source) => source.includes("remote:"));
  for (const [i, source] of examples.entries()) {
    if (remote.includes(source)) continue;
    const title = source.split("\n").find((line) => line.startsWith("import"))?.slice(0, 70) ?? `block ${i}`;
    it(`example ${i + 1} runs as pasted and exits on its own: ${title}`, async () => {
      const file = join(scratch, `example_${i + 1}.ts`);
      writeFileSync(file, installed(source));
      const { code, out } = await run(hostArgv(file));
      assert.equal(code, 0, out);
    });
  }

  describe("the remote example", { skip: skipWithout("tests/readme_test.ts") }, () => {
    const token = randomBytes(16).toString("hex");
    let server: NatsServer | undefined;
    let agent: AgentProcess | undefined;
    before(async () => {
      server = await startNatsServer({ token });
      // The agent as the README starts it: default subject, the token from its environment.
      agent = await startAgent(server.url, "spawnpool", [], { SPAWNPOOL_NATS_TOKEN: token });
    });
    after(async () => {
      await agent?.stop();
      await server?.stop();
    });
    for (const source of remote) {
      it("runs against a token-protected server and an agent, and exits on its own", async () => {
        const file = join(scratch, "example_remote.ts");
        writeFileSync(file, installed(source).replace("nats://127.0.0.1:4222", server!.url));
        const { code, out } = await run(hostArgv(file), { SPAWNPOOL_NATS_TOKEN: token });
        assert.equal(code, 0, out);
      });
    }
  });

  it("the Deno permissions line runs git and refuses anything else, with deno on PATH as a symlink", async () => {
    const line = blocks("sh").filter((block) => !block.includes("deno eval"))
      .map((block) => block.split("\n").find((l) => l.startsWith("deno run --allow-run=")))
      .find((found) => found !== undefined);
    assert.ok(line, "the line");
    const app = join(scratch, "app.ts");
    writeFileSync(
      app,
      `import { Pool } from ${JSON.stringify(pathToFileURL(here("../mod.ts")).href)};
await using pool = new Pool({ runtime: "deno" });
const git = await pool.command("git", { args: ["--version"] }).output();
if (!git.success) throw new Error("git failed");
try {
  await pool.command("echo", { args: ["no"] }).output();
  throw new Error("echo was allowed");
} catch (error) {
  if (!(error instanceof Deno.errors.NotCapable)) throw error;
}
console.log("ok");
`,
    );
    // node_modules/.bin/deno, a symlink, first on PATH: `which deno` is what npm and Homebrew installs give.
    const bin = here("../node_modules/.bin");
    const { code, out } = await run(["sh", "-c", line.replace(/\s+#.*$/, "")], {
      PATH: `${bin}:${process.env.PATH}`,
    });
    assert.equal(code, 0, out);
    assert.match(out, /^ok$/m);
  });
});

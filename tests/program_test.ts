/**
 * A real program moved onto the pool by changing only its import: tests/fixtures/spawn_server.mjs (an
 * HTTP server that spawns per request, written against node:child_process) runs as is, then with its
 * `node:child_process` import replaced by spawnpool's `./node`, under the runtime running this file.
 * Both must answer the same requests identically.
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { writeCatFixture } from "../support/fixture.mjs";
import { fixture, HOST, hostArgv } from "./_helpers.ts";

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url).href);
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "spawnpool-program-")));
const catFile = writeCatFixture(scratch);

const original = readFileSync(fixture("spawn_server.mjs"), "utf8");
const converted = original.replace(
  'from "node:child_process";',
  `from ${JSON.stringify(here("../node.ts"))};`,
);
const convertedPath = join(scratch, "spawn_server.mjs");
writeFileSync(convertedPath, converted);

async function startServer(script: string): Promise<{ port: number; stop: () => Promise<void> }> {
  const [exe, ...args] = hostArgv(script, catFile);
  const child = spawn(exe, args, { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise<number>((resolve, reject) => {
    let seen = "";
    child.stdout.on("data", (chunk) => {
      seen += chunk;
      const match = /listening (\d+)/.exec(seen);
      if (match) resolve(Number(match[1]));
    });
    child.on("exit", (code) => reject(new Error(`server exited with ${code} before listening`)));
  });
  const exited = new Promise<void>((resolve) => child.on("exit", () => resolve()));
  return {
    port,
    stop: async () => {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

async function request(port: number, path: string, body?: string): Promise<string> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`, body === undefined ? {} : { method: "POST", body });
  const bytes = Buffer.from(await response.arrayBuffer());
  const sha = createHash("sha256").update(bytes).digest("hex").slice(0, 16);
  return `${response.status} ${bytes.length} ${sha} ${JSON.stringify(bytes.subarray(0, 80).toString("latin1"))}`;
}

/** The same requests for both servers: 30 concurrent echos, 10 concurrent cats, stdin, execFile, ENOENT. */
async function exercise(port: number): Promise<string[]> {
  return [
    ...await Promise.all(Array.from({ length: 30 }, (_, i) => request(port, `/echo?say=hello-${i}`))),
    ...await Promise.all(Array.from({ length: 10 }, () => request(port, "/cat"))),
    await request(port, "/upper", "make me loud ".repeat(20_000)),
    await request(port, "/exec"),
    await request(port, "/missing"),
    await request(port, "/nowhere"),
  ];
}

describe(`a program converted by its import line (${HOST})`, () => {
  it("differs from the original in exactly one line, the import", () => {
    const before = original.split("\n");
    const after = converted.split("\n");
    assert.equal(after.length, before.length);
    const changed = before.flatMap((line, i) => (line === after[i] ? [] : [[line, after[i]]]));
    assert.equal(changed.length, 1);
    assert.match(changed[0][0], /^import \{ execFile, spawn \} from "node:child_process";$/);
    assert.match(changed[0][1], /^import \{ execFile, spawn \} from ".*\/node\.ts";$/);
  });

  it("answers every request exactly as the original does", async () => {
    const results: string[][] = [];
    for (const script of [fixture("spawn_server.mjs"), convertedPath]) {
      const server = await startServer(script);
      try {
        results.push(await exercise(server.port));
      } finally {
        await server.stop();
      }
    }
    assert.equal(results[0].length, 44);
    assert.match(results[0][0], /^200 8 [0-9a-f]+ "hello-0\\n"$/); // the original really ran
    assert.match(results[0][30], new RegExp(`^200 ${163 * 1024} `));
    assert.deepEqual(results[1], results[0]);
  });
});

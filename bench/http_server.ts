/**
 * The write-up's experiment: an HTTP server that runs a process per request, with this runtime's own
 * server and spawn API (`native`) or through the pool (`pool`). `GET /echo` runs `echo hi`; `GET /cat`
 * runs `cat` on the file named by BENCH_CAT_FILE. Prints "listening <port>" once ready.
 *
 * `deno run -A bench/http_server.ts native|pool`, `bun bench/http_server.ts ...`, `node bench/http_server.ts ...`;
 * BENCH_WORKERS picks the pool's worker runtime (default the host's). Driven by `node bench/http.mjs`.
 */

import { createServer } from "node:http";
import process from "node:process";
import type { RuntimeName } from "../mod.ts";
import { HOST, loadSpawnpool, nativeOutput } from "./_spawners.ts";

const { Pool } = await loadSpawnpool();
const mode = process.argv[2] === "pool" ? "pool" : "native";
const catFile = process.env.BENCH_CAT_FILE ?? "/etc/hostname";
const commands: Record<string, [string, string[]]> = { "/echo": ["echo", ["hi"]], "/cat": ["cat", [catFile]] };

const pool = mode === "pool" ? new Pool({ runtime: (process.env.BENCH_WORKERS ?? HOST) as RuntimeName }) : undefined;
await pool?.ready();

/** Runs a command and resolves with its stdout, natively or through the pool. */
function run(cmd: string, args: string[]): Promise<Uint8Array> {
  if (pool) return pool.command(cmd, { args, stderr: "null" }).output().then((out) => out.stdout);
  return nativeOutput(cmd, args);
}

async function respond(path: string): Promise<Response> {
  const command = commands[path];
  if (command === undefined) return new Response("not found", { status: 404 });
  return new Response((await run(...command)) as Uint8Array<ArrayBuffer>);
}

const ready = (port: number) => console.log(`listening ${port}`);
if (HOST === "deno") {
  Deno.serve(
    { port: 0, hostname: "127.0.0.1", onListen: ({ port }) => ready(port) },
    (req) => respond(new URL(req.url).pathname),
  );
} else if (HOST === "bun") {
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (req) => respond(new URL(req.url).pathname) });
  ready(server.port!);
} else {
  const server = createServer(async (req, res) => {
    const response = await respond(req.url ?? "/");
    res.writeHead(response.status);
    res.end(new Uint8Array(await response.arrayBuffer()));
  });
  server.listen(0, "127.0.0.1", () => ready((server.address() as { port: number }).port));
}

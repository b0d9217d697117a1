/**
 * The write-up's experiment: an HTTP server that runs a process per request. `GET /echo` runs `echo hi`; `GET /cat`
 * runs `cat` on the file named by BENCH_CAT_FILE. Prints "listening <port> <how it spawns>" once ready. Modes:
 *
 * - `native`: this runtime's own server and spawn API, in one process;
 * - `pool`: the same server, spawning through the pool; BENCH_WORKERS picks the workers' runtime (unset: the pool's
 *   default, the native C worker where it is built, else the host's runtime);
 * - `cluster` (Node only): `node:cluster`, one server process per core, each spawning with `node:child_process`;
 * - `threads` (Node only): one server thread handing each command to one of N `worker_threads` (one per core), each
 *   spawning with `node:child_process` (bench/_http_spawn_thread.ts).
 *
 * `deno run -A bench/http_server.ts native|pool`, `bun bench/http_server.ts ...`,
 * `node bench/http_server.ts native|pool|cluster|threads`. Driven by `node bench/http.mjs`.
 */

import cluster from "node:cluster";
import { createServer } from "node:http";
import { availableParallelism } from "node:os";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { WorkerRuntime } from "../mod.ts";
import { HOST, loadSpawnpool, nativeOutput } from "./_spawners.ts";

const MODES = ["native", "pool", "cluster", "threads"] as const;
const mode = process.argv[2] as typeof MODES[number];
if (!MODES.includes(mode)) throw new TypeError(`Mode must be one of ${MODES.join(", ")}, got "${process.argv[2]}"`);
if ((mode === "cluster" || mode === "threads") && HOST !== "node") throw new TypeError(`"${mode}" is Node's mode`);
const catFile = process.env.BENCH_CAT_FILE ?? "/etc/hostname";
const commands: Record<string, [string, string[]]> = { "/echo": ["echo", ["hi"]], "/cat": ["cat", [catFile]] };
const spreadOver = availableParallelism();

/** The primary of `cluster` mode: forks one server per core, reports once all listen, and takes them down with it. */
async function clusterPrimary(): Promise<void> {
  const workers = Array.from({ length: spreadOver }, () => cluster.fork());
  const ports = await Promise.all(
    workers.map((worker) =>
      new Promise<number>((resolve) => worker.once("listening", (address) => resolve(address.port)))
    ),
  );
  console.log(`listening ${ports[0]} cluster of ${spreadOver}`);
  process.once("SIGTERM", async () => {
    await Promise.all(workers.map((worker) => new Promise((done) => (worker.once("exit", done), worker.kill()))));
    process.exit(0);
  });
}

/** How this process runs a command and collects its stdout; undefined in a cluster primary (it serves nothing). */
async function spawner(): Promise<((cmd: string, args: string[]) => Promise<Uint8Array>) | undefined> {
  if (mode === "cluster" && cluster.isPrimary) return undefined;
  if (mode === "native" || mode === "cluster") return nativeOutput;
  if (mode === "threads") return threadSpawner();
  const { Pool } = await loadSpawnpool();
  const runtime = process.env.BENCH_WORKERS as WorkerRuntime | undefined;
  const pool = new Pool(runtime === undefined ? {} : { runtime });
  await pool.ready();
  workers = `pool of ${pool.stats().workers.length} ${pool.stats().runtime}`;
  return (cmd, args) => pool.command(cmd, { args, stderr: "null" }).output().then((out) => out.stdout);
}

/** `threads` mode: each command goes to the worker thread with the fewest in flight. */
function threadSpawner(): (cmd: string, args: string[]) => Promise<Uint8Array> {
  const threads = Array.from({ length: spreadOver }, () => {
    const thread = new Worker(fileURLToPath(new URL("./_http_spawn_thread.ts", import.meta.url).href));
    const pending = new Map<number, (stdout: Uint8Array) => void>();
    thread.on("message", ({ id, stdout }: { id: number; stdout: Uint8Array }) => {
      pending.get(id)!(stdout);
      pending.delete(id);
    });
    thread.on("error", (error) => {
      console.error(error);
      process.exit(1);
    });
    return { thread, pending };
  });
  workers = `${spreadOver} worker_threads`;
  let next = 0;
  return (cmd, args) => {
    const { thread, pending } = threads.reduce((a, b) => (b.pending.size < a.pending.size ? b : a));
    const id = next++;
    return new Promise((resolve) => {
      pending.set(id, resolve);
      thread.postMessage({ id, cmd, args });
    });
  };
}

let workers = mode === "cluster" ? "cluster worker" : "own spawn";
const run = await spawner();
if (run === undefined) {
  await clusterPrimary();
} else {
  // Exits on SIGTERM (bench/http.mjs stops a server so), rather than being killed by it: a runtime's CPU profiler
  // (`node --cpu-prof`, `bun --cpu-prof`) writes its profile only on exit.
  process.once("SIGTERM", () => process.exit(0));
  /** The status and body of a response to `path`. */
  const answer = async (path: string): Promise<[number, Uint8Array<ArrayBuffer>]> => {
    const command = commands[path];
    if (command === undefined) return [404, new TextEncoder().encode("not found")];
    return [200, (await run(...command)) as Uint8Array<ArrayBuffer>];
  };
  const respond = async (path: string): Promise<Response> => {
    const [status, body] = await answer(path);
    return new Response(body, { status });
  };
  const ready = (port: number) => console.log(`listening ${port} ${workers}`);
  if (HOST === "deno") {
    Deno.serve(
      { port: 0, hostname: "127.0.0.1", onListen: ({ port }) => ready(port) },
      (req) => respond(new URL(req.url).pathname),
    );
  } else if (HOST === "bun") {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (req) => respond(new URL(req.url).pathname) });
    ready(server.port!);
  } else {
    // node:http's own way, as its users write it: no web Response (undici's would copy the body twice more).
    const server = createServer(async (req, res) => {
      const [status, body] = await answer(req.url ?? "/");
      res.writeHead(status);
      res.end(body);
    });
    // A cluster worker's listen(0) gets the port its primary shares among all of them.
    server.listen(0, "127.0.0.1", () => mode !== "cluster" && ready((server.address() as { port: number }).port));
  }
}

/**
 * What the benchmarks that run under every runtime share: the host's name, spawnpool as that runtime's
 * users get it, the runtime's own fastest way to run a command and collect its output, and a process's CPU
 * time.
 *
 * @module
 */

import { Buffer } from "node:buffer";
import { spawn as nodeSpawn } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { RuntimeName } from "../mod.ts";

/**
 * The runtime running this benchmark. (Not `detectRuntime()` from adapters/platform.ts: importing it would load
 * the TypeScript sources into a Bun or Node host that measures dist/, and make the host larger.)
 */
export const HOST: RuntimeName = "Deno" in globalThis ? "deno" : "Bun" in globalThis ? "bun" : "node";

/** Newest modification time among the TypeScript sources dist/ is built from, in ms. */
function newestSource(): number {
  let newest = 0;
  for (const dir of ["", "adapters", "core", "shapes", "shapes/child_process", "worker"]) {
    const path = fileURLToPath(new URL(`../${dir}`, import.meta.url).href);
    for (const name of readdirSync(path)) {
      if (name.endsWith(".ts")) newest = Math.max(newest, statSync(`${path}/${name}`).mtimeMs);
    }
  }
  return newest;
}

/**
 * spawnpool as this runtime's users get it: Deno apps import the TypeScript source (JSR); Bun and Node apps
 * install the npm build in dist/, whose workers run compiled JavaScript. A Node worker started from the
 * TypeScript source strips types as it loads, which leaves it larger, and Node's spawn forks, copying the
 * worker's page tables each time: such workers spawn markedly slower than the ones npm users run. So Bun
 * and Node measure dist/: `npm start` builds it first; run `npm run build` before running a benchmark by
 * hand.
 */
export async function loadSpawnpool(): Promise<typeof import("../mod.ts")> {
  return HOST === "deno" ? await import("../mod.ts") : await import(distEntry("mod.js"));
}

/** The `./node` drop-in, from the same place as {@linkcode loadSpawnpool}'s module. */
export async function loadSpawnpoolNode(): Promise<typeof import("../node.ts")> {
  return HOST === "deno" ? await import("../node.ts") : await import(distEntry("node.js"));
}

/** The URL of a dist/ entry; throws if dist/ is missing or older than the sources. */
function distEntry(name: string): string {
  const build = new URL(`../dist/${name}`, import.meta.url);
  const built = statSync(fileURLToPath(build.href), { throwIfNoEntry: false })?.mtimeMs;
  if (built === undefined || built < newestSource()) {
    throw new Error("dist/ is missing or older than the sources: run `npm run build` first (`npm start` does)");
  }
  return build.href;
}

/** Runs `cmd` with this runtime's own spawn API and resolves with its stdout once it exited. */
export function nativeOutput(cmd: string, args: readonly string[]): Promise<Uint8Array> {
  if (HOST === "deno") {
    return new Deno.Command(cmd, { args: [...args], stdout: "piped", stderr: "null" }).output()
      .then((out) => out.stdout);
  }
  if (HOST === "bun") {
    const proc = Bun.spawn([cmd, ...args], { stdout: "pipe", stderr: "ignore" });
    return new Response(proc.stdout).bytes().then(async (bytes) => (await proc.exited, bytes));
  }
  return new Promise((resolve, reject) => {
    const child = nodeSpawn(cmd, args, { stdio: ["ignore", "pipe", "ignore"] });
    const chunks: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => chunks.push(chunk));
    child.on("error", reject).on("close", () => resolve(Buffer.concat(chunks)));
  });
}

/** A kB field of /proc/<pid>/status (VmRSS, VmHWM, ...); throws where there is none (not Linux, a process gone). */
export function statusKb(pid: number, field: string): number {
  const line = readFileSync(`/proc/${pid}/status`, "utf8").split("\n").find((l) => l.startsWith(`${field}:`));
  if (line === undefined) throw new Error(`/proc/${pid}/status has no ${field}`);
  return Number(line.split(/\s+/)[1]);
}

/** CPU time in µs of a process itself and of its reaped children, from /proc (Linux; USER_HZ is 100). */
export function processCpu(pid: number | "self"): { self: number; children: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    return { self: (fields[11] + fields[12]) * 1e4, children: (fields[13] + fields[14]) * 1e4 };
  } catch {
    return null;
  }
}

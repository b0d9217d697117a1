/**
 * Helpers shared by the test files (not a test file itself).
 *
 * @module
 */

import process from "node:process";
import { fileURLToPath } from "node:url";
import { detectRuntime } from "../adapters/platform.ts";
import { encodeHeader, type FrameType } from "../core/frame.ts";

export { alive, childPids, descendants, markedProcesses, openFds, rssAnonBytes, rssBytes } from "../support/proc.ts";
import { alive } from "../support/proc.ts";

/** The runtime running the tests. */
export const HOST: "deno" | "bun" | "node" = detectRuntime();

/** The path of a file in tests/fixtures/. */
export function fixture(name: string): string {
  return fileURLToPath(new URL(`./fixtures/${name}`, import.meta.url).href);
}

/** The argv that runs a script (TypeScript or JavaScript) with `args` under the host's runtime. */
export function hostArgv(script: string, ...args: string[]): [string, ...string[]] {
  if (HOST === "deno") return [process.execPath, "run", "-A", "--quiet", script, ...args];
  return [process.execPath, script, ...args];
}

/**
 * Waits until every process in `pids` is gone or `ms` passed; returns those still alive (none, when all went).
 * What kills them (a worker on its way out, a signal) may act a moment after the step a test awaited.
 */
export async function survivors(pids: readonly number[], ms = 5000): Promise<number[]> {
  const deadline = performance.now() + ms;
  while (pids.some(alive) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  return pids.filter(alive);
}

/** `promise`, or a rejection with `failure` if it has not settled after `ms`: a test that would hang fails. */
export function withTimeout<T>(promise: Promise<T>, ms: number, failure: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(failure)), ms))),
  ]).finally(() => clearTimeout(timer));
}

/** One whole frame as bytes, header and payload, as a worker or an attacker would write it. */
export function frame(type: number, id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.byteLength);
  out.set(encodeHeader(type as FrameType, id, payload.byteLength));
  out.set(payload, 9);
  return out;
}

/**
 * What the conformance files share: the worker runtimes to test, one describe block per runtime with its own pool,
 * and small helpers.
 *
 * Worker runtimes come from SPAWNPOOL_TEST_WORKERS (comma-separated), default all three and the native worker; one
 * that is missing fails the suite rather than being skipped.
 *
 * @module
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Pool, type WorkerRuntime } from "../mod.ts";
import { childPids, HOST } from "./_helpers.ts";

/** The worker runtimes under test. */
export const WORKERS = (process.env.SPAWNPOOL_TEST_WORKERS ?? "node,bun,deno,native").split(",") as WorkerRuntime[];
/** Bytes as UTF-8 text. */
export const text = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);
/** Text as UTF-8 bytes. */
export const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
/** A scratch directory for this process's tests. */
export const scratch: string = mkdtempSync(join(tmpdir(), "spawnpool-test-"));
/** The checkout. */
export const root: string = fileURLToPath(new URL("..", import.meta.url).href);

/** A process's descendants, from /proc. */
export function descendants(pid: number): number[] {
  return childPids(pid).flatMap((child) => [child, ...descendants(child)]);
}

/** A piped stream's whole content as text. */
export async function readAll(stream: ReadableStream<Uint8Array> | undefined): Promise<string> {
  assert.ok(stream, "stream is piped");
  return await new Response(stream).text();
}

/**
 * One describe block per worker runtime, named for the host, the runtime and `title`, with a pool of two workers of
 * that runtime for its tests; with `closePool`, a last test closes it (otherwise one of the tests does).
 */
export function forEachWorker(
  title: string,
  body: (pool: Pool, runtime: WorkerRuntime) => void,
  options: { closePool?: boolean } = {},
): void {
  for (const runtime of WORKERS) {
    describe(`${HOST} host, ${runtime} workers: ${title}`, () => {
      const pool = new Pool({ size: 2, runtime });
      body(pool, runtime);
      if (options.closePool) {
        it("closes its pool", async () => {
          await pool.close();
          assert.equal(pool.stats().workers.length, 0);
        });
      }
    });
  }
}

/**
 * A command a server walks away from, as tests/conformance_abandon_test.ts and bench/walk_away.ts make it: `yes`, ended
 * with its output never read.
 *
 * @module
 */

import type { Pool } from "../mod.ts";
import { childProcessFor } from "../node.ts";

/**
 * One `yes` ended with its output unread, the i-th way of four: the Bun shape's timeout, the Deno shape's kill, the
 * drop-in's kill (no 'data' listener), the Bun shape's maxBuffer. Resolves once the command's exit was reported.
 */
export function abandonedYes(pool: Pool, i: number): Promise<unknown> {
  switch (i % 4) {
    case 0:
      return pool.spawn(["yes"], { timeout: 30 }).exited;
    case 1: {
      const child = pool.command("yes", { stdout: "piped" }).spawn();
      void child.spawned.then(() => setTimeout(() => child.kill("SIGKILL"), 10));
      return child.status;
    }
    case 2: {
      const child = childProcessFor(pool).spawn("yes");
      child.once("spawn", () => setTimeout(() => child.kill(), 10));
      return new Promise((resolve, reject) => {
        child.once("exit", resolve);
        child.once("error", reject);
      });
    }
    default:
      return pool.spawn(["yes"], { maxBuffer: 200_000 }).exited;
  }
}

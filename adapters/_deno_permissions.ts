/**
 * Deno's run permission, enforced on the host for every pooled command. A Deno host's workers run with
 * `--allow-run` (they must spawn whatever they are asked to), so the host applies the rules `Deno.Command`
 * would have applied to the command itself, before the request leaves it: a program started with
 * `--allow-run=git` can run `git` through the pool and nothing else, as without it.
 *
 * @module
 */

import type { SpawnRequest } from "../core/frame.ts";

/**
 * The variables Deno lets only an unscoped `--allow-run` pass to a command (they change what the command
 * loads): names starting with `LD_` or `DYLD_`, in any case, with a non-empty value; sorted as Deno lists them.
 */
function loaderVariables(env: Record<string, string> | undefined): string[] {
  if (env === undefined) return [];
  return Object.keys(env).filter((name) => /^\s*(?:ld_|dyld_)/i.test(name) && env[name] !== "").sort();
}

/**
 * Throws `Deno.errors.NotCapable`, with Deno's own message, if this Deno process may not start `request`
 * itself: a loader variable (`LD_*`, `DYLD_*`) without unscoped `--allow-run`, or a program outside the run
 * permission. A program whose permission is "prompt" is asked for, as `Deno.Command` asks (interactively, or
 * denied under `--no-prompt`).
 *
 * Only the variables the request sets are checked: the rest of a command's environment is its worker's, which
 * Deno checked when the host started that worker with `Deno.Command`.
 */
export function admitRun(request: SpawnRequest): void {
  const permissions = Deno.permissions;
  // Unscoped: granted, and not partly (`--deny-run=...` beside `--allow-run` or `-A` is granted but partial).
  const all = permissions.querySync({ name: "run" });
  if (all.state === "granted" && !all.partial) return;
  const loaders = loaderVariables(request.env);
  if (loaders.length > 0) {
    const [these, s] = loaders.length === 1 ? ["the", ""] : ["these", "s"];
    throw new Deno.errors.NotCapable(
      `Requires --allow-run permissions to spawn subprocess with ${loaders.join(", ")} environment variable${s}. ` +
        `Alternatively, spawn with ${these} environment variable${s} unset.`,
    );
  }
  const command = request.cmd;
  let state = permissions.querySync({ name: "run", command }).state;
  if (state === "prompt") state = permissions.requestSync({ name: "run", command }).state;
  if (state !== "granted") {
    throw new Deno.errors.NotCapable(`Requires run access to "${command}", run again with the --allow-run flag`);
  }
}

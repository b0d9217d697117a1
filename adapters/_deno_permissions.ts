/**
 * Deno's run permission, enforced on the host for every pooled command. A Deno host's workers run with
 * `--allow-run` (they must spawn whatever they are asked to), so the host applies the rules `Deno.Command`
 * would have applied to the command itself, before the request leaves it: a program started with
 * `--allow-run=git` can run `git` through the pool and nothing else, as without it.
 *
 * @module
 */

import type { SpawnRequest } from "../core/frame.ts";
import { isAbsolutePath, joinPath, PATH_DELIMITER } from "./_system.ts";

/**
 * The variables Deno lets only an unscoped `--allow-run` pass to a command (they change what the command
 * loads): names starting with `LD_` or `DYLD_`, in any case, with a non-empty value; sorted as Deno lists them.
 */
function loaderVariables(env: Record<string, string> | undefined): string[] {
  if (env === undefined) return [];
  return Object.keys(env).filter((name) => /^\s*(?:ld_|dyld_)/i.test(name) && env[name] !== "").sort();
}

/** Resolutions made, by PATH, cwd and name: a program is looked for once (what was checked is what is sent). */
const resolved = new Map<string, string>();
/** Entries kept in `resolved` before it starts again. */
const MAX_RESOLVED = 1024;

/** Deno's error for a program that could not be resolved on a call's PATH. */
function notCapableToResolve(command: string): Error {
  return new Deno.errors.NotCapable(
    `Requires read access to find "${command}" on the command's own PATH, run again with the --allow-read flag ` +
      `(or give the program's absolute path)`,
  );
}

/** This process's PATH, or undefined where it may not be read without asking. */
function hostPath(): string | undefined {
  if (Deno.permissions.querySync({ name: "env", variable: "PATH" }).state !== "granted") return undefined;
  return Deno.env.get("PATH");
}

/** This process's working directory, or undefined where it may not be read without asking. */
function hostCwd(): string | undefined {
  try {
    return Deno.cwd();
  } catch {
    return undefined;
  }
}

/** Whether `path` is an executable file; undefined where that cannot be told (no read permission for it). */
function executable(path: string): boolean | undefined {
  try {
    const stat = Deno.statSync(path);
    return stat.isFile && ((stat.mode ?? 0o111) & 0o111) !== 0;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound || error instanceof Deno.errors.NotADirectory) return false;
    if (error instanceof Deno.errors.PermissionDenied) return false;
    return undefined;
  }
}

/** `path` against `cwd` when relative (undefined if it is and `cwd` is unknown). */
function absolute(path: string, cwd: string | undefined): string | undefined {
  if (isAbsolutePath(path)) return path;
  return cwd === undefined ? undefined : joinPath(cwd, path);
}

/**
 * The program `Deno.Command` would run for `request`, found as it finds it: a name with a slash against the command's
 * cwd; a bare name on the command's own PATH (its `env.PATH`, else this process's), relative entries against its cwd,
 * the first executable file. Undefined where that cannot be told (no read permission for what must be looked at).
 * Throws `Deno.errors.NotFound`, as `Deno.Command` does, for a name that is nowhere on that PATH.
 */
function resolveProgram(request: SpawnRequest): string | undefined {
  const { cmd, env } = request;
  const cwd = request.cwd !== undefined ? absolute(request.cwd, hostCwd()) : hostCwd();
  if (cmd.includes("/")) return absolute(cmd, cwd);
  const own = env !== undefined && Object.hasOwn(env, "PATH");
  const path = own ? env.PATH : hostPath();
  if (path === undefined) return undefined;
  const key = `${path}\0${cwd}\0${cmd}`;
  const known = resolved.get(key);
  if (known !== undefined) return known;
  for (const entry of path.split(PATH_DELIMITER)) {
    const dir = absolute(entry === "" ? "." : entry, cwd);
    if (dir === undefined) return undefined;
    const candidate = joinPath(dir, cmd);
    const found = executable(candidate);
    if (found === undefined) return undefined;
    if (found) {
      if (resolved.size >= MAX_RESOLVED) resolved.clear();
      resolved.set(key, candidate);
      return candidate;
    }
  }
  throw Object.assign(new Deno.errors.NotFound(`Failed to spawn '${cmd}': entity not found`), { code: "ENOENT" });
}

/**
 * Throws `Deno.errors.NotCapable`, with Deno's own message, if this Deno process may not start `request`
 * itself: a loader variable (`LD_*`, `DYLD_*`) without unscoped `--allow-run`, or a program outside the run
 * permission. A program whose permission is "prompt" is asked for, as `Deno.Command` asks (interactively, or
 * denied under `--no-prompt`).
 *
 * Under a scoped run permission the program is found on the host as `Deno.Command` finds it (the command's own
 * PATH and cwd), the permission is checked for the file found, and the request is sent with that absolute path as its
 * program (`argv[0]` is that path, as `Deno.Command` gives it): no second lookup in a worker can choose another
 * binary (a planted `echo` on a PATH the call passes). Where the host may not look (no read permission), only a call
 * that searches this process's own PATH of absolute directories is admitted by the name's permission, and any other
 * is refused. With `resolve` false (a remote pool: the program is found on the agent's machine), the name as given is
 * checked.
 *
 * Only the variables the request sets are checked: the rest of a command's environment is its worker's, which
 * Deno checked when the host started that worker with `Deno.Command`.
 */
export function admitRun(request: SpawnRequest, resolve = true): void {
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
  const name = request.cmd;
  let command = name;
  if (resolve) {
    const program = resolveProgram(request);
    if (program !== undefined) {
      command = program;
    } else if (!name.includes("/")) {
      // Not found here: admitted by its name only if the worker searches what Deno searched for that name.
      const own = request.env !== undefined && Object.hasOwn(request.env, "PATH") ? request.env.PATH : undefined;
      const path = own ?? hostPath();
      const searchesOwnPath = (own === undefined || own === hostPath()) &&
        (path === undefined || path.split(PATH_DELIMITER).every(isAbsolutePath));
      if (!searchesOwnPath) throw notCapableToResolve(name);
    }
  }
  let state = permissions.querySync({ name: "run", command }).state;
  if (state === "prompt") state = permissions.requestSync({ name: "run", command }).state;
  if (state !== "granted") {
    throw new Deno.errors.NotCapable(`Requires run access to "${name}", run again with the --allow-run flag`);
  }
  request.cmd = command;
}

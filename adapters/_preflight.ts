/**
 * What the host can tell, cheaply and for certain, about a command that could not start: a program that is not
 * on PATH or not executable, a cwd that is missing or not a directory. `Deno.Command` and `Bun.spawn` throw
 * those at the call; their shapes here do the same with this check, before the request leaves the host. Where
 * the host cannot see what the worker will see, it says nothing and the worker reports the failure as it comes.
 *
 * @module
 */

import type { SpawnRequest, WireSpawnFailure } from "../core/frame.ts";
import { isAbsolutePath, joinPath, PATH_DELIMITER, system } from "./_system.ts";

interface DenoPermissions {
  permissions: { querySync(descriptor: { name: string; variable?: string }): { state: string; partial?: boolean } };
}

/**
 * Whether this process may look at files (`read`) or at PATH (`path`) without asking: always outside Deno; in Deno
 * with an unscoped read permission, and for PATH with access to that variable too (a check must never prompt, nor
 * fail for a permission the spawn itself does not need).
 */
function mayLook(): { read: boolean; path: boolean } {
  const deno = (globalThis as { Deno?: DenoPermissions }).Deno;
  if (deno === undefined) return { read: true, path: true };
  const read = deno.permissions.querySync({ name: "read" });
  const files = read.state === "granted" && !read.partial;
  return {
    read: files,
    path: files && deno.permissions.querySync({ name: "env", variable: "PATH" }).state === "granted",
  };
}

/**
 * What `path` is: "missing", "notdir" (a component is a file), "dir", "exec" (a file with an execute bit) or "file"
 * (one with none, which nobody may execute), or undefined if it cannot be told.
 */
function kind(path: string): "missing" | "notdir" | "dir" | "exec" | "file" | undefined {
  try {
    const stat = system.stat(path);
    return stat.directory ? "dir" : (stat.mode & 0o111) !== 0 ? "exec" : "file";
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    return code === "ENOENT" ? "missing" : code === "ENOTDIR" ? "notdir" : undefined;
  }
}

/** Programs found on PATH, by PATH and name: a found program is looked up once (a lost one fails in its worker). */
const found = new Map<string, true>();
/** Entries kept in `found` before it starts again: a host running many different programs stays small. */
const MAX_FOUND = 1024;

/**
 * The failure a spawn of `request` is certain to meet, or undefined when it may start (or the host cannot tell).
 * Relative programs and cwds are left to the worker, whose working directory may not be the host's current one.
 */
export function preflight(request: SpawnRequest): WireSpawnFailure | undefined {
  const { cmd, cwd } = request;
  const checksCwd = cwd !== undefined && isAbsolutePath(cwd);
  const checksCmd = cmd.includes("/") ? isAbsolutePath(cmd) : true;
  if (!(checksCwd || checksCmd)) return undefined;
  const may = mayLook();
  if (!may.read) return undefined;
  if (checksCwd) {
    const what = kind(cwd);
    if (what === "missing") return { code: "ENOENT", errno: -2, message: `No such cwd '${cwd}'` };
    if (what === "exec" || what === "file") {
      return { code: "ENOTDIR", errno: -20, message: `cwd is not a directory '${cwd}'` };
    }
  }
  if (!checksCmd) return undefined;
  if (cmd.includes("/")) {
    const what = kind(cmd);
    if (what === "missing") return { code: "ENOENT", errno: -2, message: "No such file or directory" };
    if (what === "notdir") return { code: "ENOTDIR", errno: -20, message: "Not a directory" };
    if (what === "dir" || what === "file") return { code: "EACCES", errno: -13, message: "Permission denied" };
    return undefined;
  }
  // The worker's PATH: the request's, or (as the host's environment was when its worker started) the host's.
  const env = request.env;
  const own = env !== undefined && Object.hasOwn(env, "PATH");
  if (!own && !may.path) return undefined;
  const path = own ? env.PATH : request.clearEnv ? undefined : system.getEnv("PATH");
  if (path === undefined) return undefined; // the runtime's default search path: left to the worker
  const key = `${path}\0${cmd}`;
  if (found.has(key)) return undefined;
  // Found by the runtime's own lookup: the search below would not fail either (it finds it, or stops with no verdict).
  if (system.which?.(cmd, path) !== undefined) return remember(key);
  // The verdict does not depend on the order: ENOENT needs every entry to be missing, and any other answer is none. So
  // the entries are tried from the last: the system directories, where most programs a server starts live, end a
  // PATH, and each entry that misses costs a thrown error (in Deno the first one about 0.5 ms: bench/first_use.mjs).
  for (const dir of path.split(PATH_DELIMITER).reverse()) {
    // A relative entry is the worker's to resolve, and an entry that cannot be read may hold it: no verdict.
    if (dir === "" || !isAbsolutePath(dir)) return undefined;
    const candidate = joinPath(dir, cmd);
    const what = kind(candidate);
    // A file nobody may execute makes the search end in EACCES rather than ENOENT: left to the worker.
    if (what === undefined || what === "file") return undefined;
    if (what === "exec") return remember(key);
  }
  return { code: "ENOENT", errno: -2, message: "entity not found" };
}

/** Notes a program found on a PATH; no failure. */
function remember(key: string): undefined {
  if (found.size >= MAX_FOUND) found.clear();
  found.set(key, true);
  return undefined;
}

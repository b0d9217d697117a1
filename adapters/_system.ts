/**
 * The process and its files, as the adapters need them: through Deno's own APIs on Deno, and through `node:process`
 * and `node:fs` on Node and Bun. Deno loads its `node:` modules slowly (each of `node:fs`, `node:process`,
 * `node:module`, `node:net` costs a script 10-20 ms: bench/results/2026-11-25-cold-start.md), so no module on a Deno
 * host's path imports one; Node and Bun reach theirs through the `process` global (`process.getBuiltinModule`),
 * which a Deno process never touches here. Paths are POSIX: spawnpool runs on Linux and macOS.
 *
 * @module
 */

import type * as NodeFs from "node:fs";
import type * as NodeOs from "node:os";

/** A termination signal a process listens for. */
export type TerminationSignal = "SIGINT" | "SIGTERM" | "SIGHUP";

/** What {@linkcode System.stat} tells of a path. */
export interface PathStat {
  /** Whether it is a directory. */
  directory: boolean;
  /** Its permission bits. */
  mode: number;
}

/** The process and its files. */
export interface System {
  /** Node's name for the platform: "linux", "darwin", ... */
  readonly platform: string;
  /** Node's name for the architecture: "x64", "arm64", ... */
  readonly arch: string;
  /** This process's id. */
  readonly pid: number;
  /** This process's executable. */
  execPath(): string;
  /** The working directory. */
  cwd(): string;
  /** An environment variable. */
  getEnv(name: string): string | undefined;
  /** The environment: Node's and Bun's own `process.env` (no copy), a copy on Deno. */
  environment(): Record<string, string | undefined>;
  /** Removes an environment variable. */
  deleteEnv(name: string): void;
  /** What `path` is (symlinks followed); throws an error whose `code` is `ENOENT`, `ENOTDIR`, ... */
  stat(path: string): PathStat;
  /** A file's text. */
  readText(path: string): string;
  /** The names in a directory. */
  readDir(path: string): string[];
  /** Writes `text` to an existing file (a cgroup's control file). */
  writeText(path: string, text: string): void;
  /** Removes an empty directory (a cgroup). */
  removeEmptyDir(path: string): void;
  /**
   * Where `name` is found as an executable on `path` (a PATH value), by the runtime's own lookup, where it has one
   * (Bun's `Bun.which`): cheaper than a `stat` per entry, which on Bun would load `node:fs` (about 2 ms).
   */
  which?(name: string, path: string): string | undefined;
  /** Sends `signal` to a process, or to a process group for a negative `pid`; throws if there is none. */
  kill(pid: number, signal: string): void;
  /** Calls `handler` on each `signal` this process receives. */
  onSignal(signal: TerminationSignal, handler: () => void): void;
  /** Calls `handler` when the process exits (not when it dies of an uncaught error); returns what removes it. */
  onExit(handler: () => void): () => void;
  /** Exits the process. */
  exit(code: number): never;
  /** A new directory only this user may enter (0700), named after `prefix`, in the temporary directory. */
  makePrivateDir(prefix: string): string;
  /** Removes a directory and what it holds; no error if it is gone. */
  removeDir(path: string): void;
  /** `length` random bytes. */
  randomBytes(length: number): Uint8Array;
}

/** The separator of PATH's entries. */
export const PATH_DELIMITER = ":";

/** `dir` and `name` joined by one slash. */
export function joinPath(dir: string, ...names: string[]): string {
  let path = dir;
  for (const name of names) path = path.endsWith("/") ? `${path}${name}` : `${path}/${name}`;
  return path;
}

/** The directory part of `path`, as Node's `path.dirname` gives it for a POSIX path. */
export function dirnameOf(path: string): string {
  const trimmed = path.length > 1 ? path.replace(/\/+$/, "") : path;
  const slash = trimmed.lastIndexOf("/");
  if (slash < 0) return ".";
  return slash === 0 ? "/" : trimmed.slice(0, slash);
}

/** Whether `path` is absolute. */
export function isAbsolutePath(path: string): boolean {
  return path.startsWith("/");
}

/** The path of a `file:` URL. */
export function fileUrlToPath(url: string): string {
  return decodeURIComponent(new URL(url).pathname);
}

/** Deno's names of platforms and architectures, in Node's words. */
const NODE_NAMES: Record<string, string> = { x86_64: "x64", aarch64: "arm64", windows: "win32" };

function denoSystem(deno: typeof Deno): System {
  return {
    platform: NODE_NAMES[deno.build.os] ?? deno.build.os,
    arch: NODE_NAMES[deno.build.arch] ?? deno.build.arch,
    pid: deno.pid,
    execPath: () => deno.execPath(),
    cwd: () => deno.cwd(),
    getEnv: (name) => deno.env.get(name),
    environment: () => deno.env.toObject(),
    deleteEnv: (name) => deno.env.delete(name),
    stat(path) {
      const stat = deno.statSync(path);
      return { directory: stat.isDirectory, mode: stat.mode ?? 0 };
    },
    readText: (path) => deno.readTextFileSync(path),
    readDir: (path) => Array.from(deno.readDirSync(path), (entry) => entry.name),
    writeText: (path, text) => deno.writeTextFileSync(path, text, { create: false }),
    removeEmptyDir: (path) => deno.removeSync(path),
    kill: (pid, signal) => deno.kill(pid, signal as Deno.Signal),
    onSignal: (signal, handler) => deno.addSignalListener(signal, handler),
    onExit(handler) {
      // "unload" is dispatched on a normal end and on Deno.exit() (also through node:process's exit()); the "exit"
      // event of Deno's node:process misses Deno.exit().
      globalThis.addEventListener("unload", handler);
      return () => globalThis.removeEventListener("unload", handler);
    },
    exit: (code) => deno.exit(code),
    makePrivateDir: (prefix) => deno.makeTempDirSync({ prefix }), // created 0700
    removeDir(path) {
      try {
        deno.removeSync(path, { recursive: true });
      } catch (error) {
        if (!(error instanceof deno.errors.NotFound)) throw error;
      }
    },
    randomBytes: (length) => crypto.getRandomValues(new Uint8Array(length)),
  };
}

function nodeSystem(process: NodeJS.Process): System {
  // Loaded on first use: Bun takes about 2 ms to load its node:fs (Node has it loaded already).
  let fsModule: typeof NodeFs | undefined;
  const fs = () => (fsModule ??= process.getBuiltinModule("node:fs") as typeof NodeFs);
  const bun = (globalThis as { Bun?: { which(name: string, options: { PATH: string }): string | null } }).Bun;
  const isBun = bun !== undefined;
  return {
    platform: process.platform,
    arch: process.arch,
    pid: process.pid,
    execPath: () => process.execPath,
    cwd: () => process.cwd(),
    getEnv: (name) => process.env[name],
    environment: () => process.env,
    deleteEnv: (name) => void delete process.env[name],
    stat(path) {
      const stat = fs().statSync(path);
      return { directory: stat.isDirectory(), mode: stat.mode };
    },
    readText: (path) => fs().readFileSync(path, "utf8"),
    readDir: (path) => fs().readdirSync(path),
    writeText: (path, text) => fs().writeFileSync(path, text, { flag: "r+" }),
    removeEmptyDir: (path) => fs().rmdirSync(path),
    which: bun && ((name, path) => bun.which(name, { PATH: path }) ?? undefined),
    kill: (pid, signal) => void process.kill(pid, signal),
    onSignal: (signal, handler) => void process.on(signal, handler),
    onExit(handler) {
      process.on("exit", handler);
      return () => void process.off("exit", handler);
    },
    exit: (code) => process.exit(code),
    makePrivateDir(prefix) {
      const os = process.getBuiltinModule("node:os") as typeof NodeOs;
      return fs().mkdtempSync(joinPath(os.tmpdir(), prefix)); // created 0700
    },
    removeDir: (path) => fs().rmSync(path, { recursive: true, force: true }),
    randomBytes(length) {
      // Node's first crypto.getRandomValues loads all of its Web Crypto (tens of ms, a cost every script that
      // starts a worker would pay: bench/cold_start.mjs); /dev/urandom costs nothing. Bun's Web Crypto costs nothing.
      const bytes = new Uint8Array(length);
      if (!isBun) {
        try {
          const fd = fs().openSync("/dev/urandom", "r");
          try {
            if (fs().readSync(fd, bytes) === length) return bytes;
          } finally {
            fs().closeSync(fd);
          }
        } catch {
          // no /dev/urandom: Web Crypto
        }
      }
      return crypto.getRandomValues(bytes);
    },
  };
}

/** The current process's {@linkcode System}. */
export const system: System = "Deno" in globalThis
  ? denoSystem((globalThis as unknown as { Deno: typeof Deno }).Deno)
  : nodeSystem((globalThis as unknown as { process: NodeJS.Process }).process);

/**
 * spawnpool runs child processes through a pool of long-lived worker processes, so the host's main
 * thread never pays for fork/exec. It offers the `Deno.Command` shape (`new Command`, `pool.command`),
 * the `Bun.spawn` shape (`spawn`, `pool.spawn`), and works in Deno, Bun and Node. With `new Pool({ remote })`, the
 * same calls run their commands on agents on other machines, through NATS.
 *
 * @example Quick start
 * ```ts
 * import { Command, Pool } from "@spawnpool/spawnpool";
 *
 * // Drop-in for Deno.Command, on a default pool that starts itself:
 * const { stdout } = await new Command("echo", { args: ["hi"] }).output();
 *
 * // An explicit pool, with Bun.spawn's shape:
 * await using pool = new Pool({ size: 2 });
 * const proc = pool.spawn(["cat"], { stdin: new TextEncoder().encode("bytes in") });
 * console.log(await new Response(proc.stdout).text());
 * ```
 *
 * @module
 */

export { Command, configureDefaultPool, Pool, spawn } from "./pool.ts";
export type {
  CommandOptions,
  LocalPoolOptions,
  PoolOptions,
  PoolStats,
  RemoteOptions,
  RemoteTlsOptions,
  SpawnOptions,
  SpawnOptionsWithCmd,
} from "./pool.ts";
export type { CommandOutput, CommandStatus, PoolCommand, PooledChildProcess } from "./shapes/command.ts";
export type { BunInput, BunOutput, PooledFileSink, PooledSubprocess } from "./shapes/subprocess.ts";
export type { RuntimeName, WorkerRuntime } from "./core/adapter.ts";
export { SpawnError, SpawnPoolError, type SpawnPoolErrorCode } from "./core/errors.ts";
export type { CommonOptions } from "./core/options.ts";
export { Terminal, type TerminalOptions } from "./core/terminal.ts";
export type { OutputReadableStream } from "./core/output_stream.ts";
export type { ExceededLimit, Limits } from "./core/limits.ts";
export type { ResourceUsage } from "./core/usage.ts";
export type { StdioMode } from "./core/frame.ts";

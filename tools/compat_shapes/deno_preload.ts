/**
 * `deno test --preload` module of `npm run compat:shapes` (tools/compat_shapes.mjs): puts spawnpool's
 * `Command` where Deno's own `tests/unit/command_test.ts` finds `Deno.Command`, without editing the test.
 *
 * - The library is the checkout's `mod.ts`, imported by absolute file URL; SPAWNPOOL_COMPAT_MOD (a file
 *   URL or path of another checkout's mod.ts) measures another checkout.
 * - `Deno.Command` is an accessor property of `Deno` (configurable), replaced with Object.defineProperty by
 *   a class whose constructor returns spawnpool's `Command`. spawnpool's Deno adapter starts its workers
 *   with the global `Deno.Command` too: a construction from the library's own `adapters/` directory (seen
 *   in the call stack) gets the native class, so only the test's commands go through the pool.
 * - The default pool is started (`ready()`: every worker up) before the first test, under `deno test -A`:
 *   a program's pool starts with the program's permissions, and no test's `permissions` narrowing should
 *   decide whether a worker can start, nor its start-up ops count as a leak of the first test using it.
 * - `outputSync()` stays spawnpool's, which throws by design; the runner leaves the tests using it out.
 */
const given = Deno.env.get("SPAWNPOOL_COMPAT_MOD");
const modUrl = given ? new URL(given, "file:///").href : new URL("../../mod.ts", import.meta.url).href;
const { Command } = await import(modUrl);
// The default pool is internal to pool.ts, next to that mod.ts.
const { defaultPool } = await import(new URL("./pool.ts", modUrl).href);

const NativeCommand = Deno.Command;
const libraryAdapters = new URL("./adapters/", modUrl).href;

function fromLibrary(): boolean {
  return (new Error().stack ?? "").includes(libraryAdapters);
}

class PooledDenoCommand {
  constructor(command: string | URL, options?: Deno.CommandOptions) {
    if (fromLibrary()) return new NativeCommand(command, options);
    return new Command(command, options);
  }
}

Object.defineProperty(Deno, "Command", {
  value: PooledDenoCommand,
  writable: true,
  enumerable: true,
  configurable: true,
});

await defaultPool().ready();

/**
 * `bun test --preload` module of `npm run compat:shapes` (tools/compat_shapes.mjs): puts spawnpool's
 * `spawn` where Bun's own `test/js/bun/spawn/spawn.test.ts` finds `Bun.spawn` (its `import { spawn } from
 * "bun"` reads the same property), without editing the test.
 *
 * - The library is the checkout's `mod.ts`, imported by absolute file URL; SPAWNPOOL_COMPAT_MOD (a file
 *   URL or path of another checkout's mod.ts) measures another checkout.
 * - `Bun.spawn` is writable but not configurable: it is assigned. spawnpool's Bun adapter starts its
 *   workers with the global `Bun.spawn`: a call from the library's own `adapters/` directory (seen in the
 *   call stack) gets the native function, so only the test's processes go through the pool.
 * - `Bun.spawnSync` stays native (a pool cannot run a command synchronously); the runner leaves the tests
 *   that only use it out of the counts.
 * - The default pool is started (`ready()`: every worker up) before the first test, so no test pays for it.
 */
const given = process.env.SPAWNPOOL_COMPAT_MOD;
const modUrl = given ? new URL(given, "file:///").href : new URL("../../mod.ts", import.meta.url).href;
const { spawn } = await import(modUrl);
// The default pool is internal to pool.ts, next to that mod.ts.
const { defaultPool } = await import(new URL("./pool.ts", modUrl).href);

const nativeSpawn = Bun.spawn;
const libraryAdapters = new URL("./adapters/", modUrl).pathname;

function pooledSpawn(...args: unknown[]): unknown {
  const stack = new Error().stack ?? "";
  if (stack.includes(libraryAdapters)) return (nativeSpawn as (...a: unknown[]) => unknown)(...args);
  return spawn(...args);
}

(Bun as { spawn: unknown }).spawn = pooledSpawn;

await defaultPool().ready();

/**
 * `deno test --preload` module of `npm run compat:shapes` (tools/compat_shapes.mjs) for the native runs of
 * Deno's `tests/unit/command_test.ts`: it only reads `Deno.Command`. Deno loads its process extension on the
 * first read of that property, and the loading iterates arrays; the runner gives each test a process of its
 * own, where `commandWithPrototypePollution` (which replaces `Array.prototype[Symbol.iterator]` before its
 * first `Deno.Command`) would otherwise fail natively for a reason a whole-file run never shows: there,
 * earlier tests have loaded it. The swapped runs' preload (deno_preload.ts) reads it too.
 */
void Deno.Command;

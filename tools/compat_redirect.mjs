// Preload for `npm run compat` (`node --import ./tools/compat_redirect.mjs test.js`): `child_process` and
// `node:child_process`, imported or required by the code under test, resolve to the drop-in (dist/node.js).
// The drop-in's own files (dist/) keep the runtime's module, which they build on. With SPAWNPOOL_COMPAT_USED set
// to a path, the file is written at exit if the default pool started (the test ran a command through the pool).
// With SPAWNPOOL_COMPAT_MUTE_FALLBACK set, the drop-in's SPAWNPOOL_NATIVE_FALLBACK warning is not emitted (for
// suites that fail on any process warning, such as execa's: their runs then show what else differs).
import { writeFileSync } from "node:fs";
import { registerHooks } from "node:module";
import process from "node:process";
import { configureDefaultPool } from "../dist/mod.js";

const dist = new URL("../dist/", import.meta.url).href;
const dropIn = new URL("node.js", dist).href;

registerHooks({
  resolve(specifier, context, nextResolve) {
    if (
      (specifier === "child_process" || specifier === "node:child_process") &&
      !(context.parentURL ?? "").startsWith(dist)
    ) {
      return { url: dropIn, format: "module", shortCircuit: true };
    }
    return nextResolve(specifier, context);
  },
});

if (process.env.SPAWNPOOL_COMPAT_MUTE_FALLBACK) {
  const emitWarning = process.emitWarning;
  process.emitWarning = function (warning, ...rest) {
    const code = typeof rest[0] === "object" ? rest[0]?.code : rest[1];
    if (code === "SPAWNPOOL_NATIVE_FALLBACK") return;
    return emitWarning.call(this, warning, ...rest);
  };
}

const marker = process.env.SPAWNPOOL_COMPAT_USED;
if (marker) {
  process.on("exit", () => {
    try {
      configureDefaultPool({}); // throws once the default pool has started; changes nothing otherwise
    } catch {
      writeFileSync(marker, "");
    }
  });
}

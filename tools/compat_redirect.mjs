// Preload for `npm run compat` (`node --import ./tools/compat_redirect.mjs test.js`): `child_process` and
// `node:child_process`, imported or required by the code under test, resolve to the drop-in (dist/node.js).
// The drop-in's own files (dist/) keep the runtime's module, which they build on. With SPAWNPOOL_COMPAT_USED set
// to a path, the file is written at exit if the default pool started (the test ran a command through the pool).
import { writeFileSync } from "node:fs";
import { registerHooks } from "node:module";
import process from "node:process";
import { configureDefaultPool } from "../dist/pool.js";

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

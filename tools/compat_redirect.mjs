// Preload for `npm run compat` (`node --import ./tools/compat_redirect.mjs test.js`): `child_process` and
// `node:child_process`, imported or required by the code under test, resolve to the drop-in (dist/node.js).
// The drop-in's own files (dist/) keep the runtime's module, which they build on.
import { registerHooks } from "node:module";

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

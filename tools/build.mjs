// `npm run build` (and `npm pack`, through prepack): compiles the TypeScript sources to ESM JavaScript
// plus .d.ts files in dist/, for Node and Bun apps that install spawnpool from npm (Node does not strip
// types inside node_modules). Declarations come from the sources' explicit types (isolatedDeclarations).
import { execFileSync } from "node:child_process";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { bin, ensureInstalled, root } from "./setup.mjs";

ensureInstalled();
rmSync(join(root, "dist"), { recursive: true, force: true });
execFileSync(join(bin, "tsc"), ["-p", "tsconfig.build.json"], { cwd: root, stdio: "inherit" });
console.log("Built dist/");

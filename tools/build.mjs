// `npm run build` (and `npm pack`, through prepack): compiles spawnpool to dist/ for Node and Bun apps that
// install it from npm, and cross-compiles the native worker's per-platform packages (@spawnpool/worker-<platform>-<arch>,
// spawnpool's optionalDependencies) into dist/npm/ with Zig (support/build_native.mjs).
import { buildPackages } from "../support/setup.mjs";

const packages = await buildPackages();
console.log(`Built dist/ and ${packages.map(({ name }) => name).join(", ")} in dist/npm/`);

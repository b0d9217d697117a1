// `npm run build` (and `npm pack`, through prepack): compiles spawnpool to dist/ for Node and Bun apps that
// install it from npm, with this platform's native worker in dist/native/.
import { buildDist } from "./setup.mjs";

buildDist();
console.log("Built dist/");

/**
 * Loaded by `bun test` before every test file (bunfig.toml): the per-test timeout the suite uses, 30 s instead of
 * bun's 5 s, since its tests start real worker processes.
 *
 * @module
 */
import { setDefaultTimeout } from "bun:test";

setDefaultTimeout(30_000);

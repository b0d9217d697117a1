/**
 * Entry of a pooled worker process. Started by a host with `SPAWNPOOL_CHANNEL` set to how it can be
 * reached; connects, says hello and serves spawn requests until the host goes away.
 *
 * @module
 */

import type { ChannelKind } from "../core/adapter.ts";
import { adapterFor, detectRuntime } from "../adapters/platform.ts";
import { serve } from "./serve.ts";

const adapter = adapterFor(detectRuntime());
const kind = adapter.getEnv("SPAWNPOOL_CHANNEL");
if (kind !== "fd3" && kind !== "unix") {
  console.error("spawnpool worker: start me through a Pool (SPAWNPOOL_CHANNEL is not set)");
  adapter.exit(2);
}
// Nothing of the worker's own plumbing reaches the commands it spawns (a unix channel's SPAWNPOOL_BOOTSTRAP is taken
// out as it is read, in connectToHost).
for (const name of ["SPAWNPOOL_CHANNEL", "NODE_CHANNEL_FD"]) adapter.deleteEnv(name);
// If the host went away (or closed the pool) while this worker started, nobody is left to tell.
const channel = await adapter.connectToHost(kind as ChannelKind).catch((): never => adapter.exit(1));
serve(adapter, channel);

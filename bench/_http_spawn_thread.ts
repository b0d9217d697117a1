/**
 * A worker thread of bench/http_server.ts's `threads` mode: runs each command it is sent with `node:child_process`
 * and posts back `{ id, stdout }`.
 *
 * @module
 */

import { parentPort } from "node:worker_threads";
import { nativeOutput } from "./_spawners.ts";

parentPort!.on("message", async ({ id, cmd, args }: { id: number; cmd: string; args: string[] }) => {
  parentPort!.postMessage({ id, stdout: await nativeOutput(cmd, args) });
});

/**
 * The worker loop's own cost, without processes or sockets: `serve()` from worker/serve.ts with an adapter
 * whose "commands" print `hi` and exit on the next timer tick, and a channel in memory. Prints the CPU and
 * wall time per request. It separates the loop's share of a pooled spawn from the runtime's spawn and pipe
 * work (compare with the worker column of `npm start`'s CPU table).
 *
 * `deno run -A bench/worker_loop.ts`, `bun bench/worker_loop.ts`, `node bench/worker_loop.ts`
 * (BENCH_REQUESTS, default 20000; 30 in flight).
 */

import process from "node:process";
import type { Adapter, ByteChannel, ChannelReceiver, ChildEvents, SpawnedChild } from "../core/adapter.ts";
import { encodeHeader, encodeJson, Frame, HEADER_BYTES } from "../core/frame.ts";
import { detectRuntime } from "../adapters/platform.ts";
import { serve } from "../worker/serve.ts";

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 20000);
const IN_FLIGHT = 30;
const HOST = detectRuntime();

const request = encodeJson({
  cmd: "echo",
  args: ["hi"],
  stdin: "null",
  stdout: "piped",
  stderr: "null",
  buffered: true,
  killSignal: "SIGTERM",
  forceKillAfterDelay: 5000,
  window: 1024 * 1024,
  group: false,
});
const spawnFrame = (id: number) => {
  const bytes = new Uint8Array(HEADER_BYTES + request.byteLength);
  bytes.set(encodeHeader(Frame.Spawn, id, request.byteLength));
  bytes.set(request, HEADER_BYTES);
  return bytes;
};

const HI = new TextEncoder().encode("hi\n");
const child: SpawnedChild = {
  pid: 1,
  write: () => Promise.resolve(true),
  closeStdin() {},
  kill() {},
  pause() {},
  resume() {},
  release() {},
};
const adapter = {
  runtime: HOST,
  pid: () => process.pid,
  exit() {},
  onTerminate() {},
  spawn(_request: unknown, events: ChildEvents) {
    setTimeout(() => {
      events.data(1, HI);
      events.end(1);
      events.exit(0, null);
    }, 0);
    return Promise.resolve(child);
  },
} as unknown as Adapter;

let receiver: ChannelReceiver | undefined;
let sent = 0;
let completed = 0;
let allDone: () => void;
const finished = new Promise<void>((resolve) => (allDone = resolve));
const channel: ByteChannel = {
  start: (r) => void (receiver = r),
  write(parts) {
    // Every request ends with one Exit frame: count them by their headers and keep 30 in flight.
    for (const part of parts) {
      if (part.byteLength === HEADER_BYTES && part[4] === Frame.Exit) completed++;
    }
    while (sent < REQUESTS && sent - completed < IN_FLIGHT) receiver!.data(spawnFrame(++sent));
    if (completed >= REQUESTS) allDone();
  },
  close() {},
  ref() {},
  unref() {},
};

serve(adapter, channel);
const cpu = process.cpuUsage();
const start = performance.now();
while (sent < IN_FLIGHT) receiver!.data(spawnFrame(++sent));
await finished;
const used = process.cpuUsage(cpu);
const wallUs = (performance.now() - start) * 1000 / REQUESTS;
console.log(
  `${HOST}: serve() ${((used.user + used.system) / REQUESTS).toFixed(1)} µs CPU and ${
    wallUs.toFixed(1)
  } µs wall per request (${REQUESTS} requests, ${IN_FLIGHT} in flight)`,
);
process.exit(0);

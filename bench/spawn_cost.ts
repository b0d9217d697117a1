/**
 * Where a worker's CPU per command goes: the spawn itself, or what the runtime does around it. Runs under Bun
 * or Deno. Each case runs `echo hi` with stdin and stderr on /dev/null and the environment passed explicitly,
 * as a worker does, and checks every output.
 *
 * Under Bun (the FFI cases call glibc's `libc.so.6` through `bun:ffi`: Linux with glibc only):
 * - `Bun.spawn`: what a Bun worker does (adapters/bun.ts), at 30 in flight, each command in a group of its
 *   own; stdout read through its `ReadableStream`, exit awaited on `exited`.
 * - `posix_spawnp, async`: glibc's `posix_spawnp` called through `bun:ffi` at 30 in flight, also in a group of
 *   its own (`POSIX_SPAWN_SETSID`, as `detached`), with the environment turned into C strings for each command
 *   (a worker gets it with each request); stdout read through `Bun.file(fd).stream()`, and the child reaped with
 *   `waitpid(pid, WNOHANG)` once its stdout ended (retried on a timer while it has not exited). This is one simple
 *   way to wait asynchronously, not the cheapest possible one.
 * - `posix_spawnp, blocking`: the same call one at a time, reaped with a blocking `waitpid` and read with a
 *   blocking `read`: the least CPU a spawn costs this process, with nothing asynchronous around it.
 *
 * It first runs the FFI path and `Bun.spawn` side by side and checks that every FFI child's exit status
 * reached this script's `waitpid`: Bun reaps only the children it spawned itself.
 *
 * Under Deno, `Deno.Command(...).spawn().output()` at 30 in flight, as a Deno worker spawns most commands, and with
 * `detached: true`, as it spawns commands that have a `timeout` or are `detached` (a process group of their
 * own; `detached` takes Deno off `posix_spawn` onto fork and exec, denoland/deno#29573).
 *
 * Prints the CPU time of this process per command (user+sys; the commands' own CPU is not included) and
 * commands per second, as medians of interleaved rounds (each round starts with the next case in turn).
 *
 * `bun bench/spawn_cost.ts`, `deno run -A bench/spawn_cost.ts` (BENCH_SPAWNS per round, default 1500;
 * BENCH_ROUNDS, default 5).
 *
 * @module
 */

import process from "node:process";
import { countOf, median } from "../support/fixture.mjs";
import { HOST } from "./_spawners.ts";
import { openFds } from "../support/proc.ts";

const SPAWNS = countOf("BENCH_SPAWNS", 1500);
const ROUNDS = countOf("BENCH_ROUNDS", 5);
const IN_FLIGHT = 30;
const HI = "hi\n";
const env = Object.fromEntries(
  Object.entries(process.env).filter((entry): entry is [string, string] => entry[1] !== undefined),
);

interface Sample {
  cpu: number;
  rate: number;
}

/** A way to run `echo hi`: resolves with its stdout once it was reaped. */
type Run = () => Promise<string>;

/** Runs `spawns` commands, `inFlight` at a time, checking each output; CPU of this process per command. */
async function measure(run: Run, spawns: number, inFlight = IN_FLIGHT): Promise<Sample> {
  let started = 0;
  const cpu = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (started < spawns) {
      started++;
      const text = await run();
      if (text !== HI) throw new Error(`expected "hi\\n", got ${JSON.stringify(text)}`);
    }
  }));
  const used = process.cpuUsage(cpu);
  return { cpu: (used.user + used.system) / spawns, rate: spawns / ((performance.now() - t0) / 1000) };
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
  }
}

/** The cases under Bun, by name; the FFI path is first checked against Bun's own reaping. */
async function bunCases(): Promise<Array<[string, () => Promise<Sample>]>> {
  const { dlopen, FFIType, ptr } = await import("bun:ffi");
  const { symbols: libc } = dlopen("libc.so.6", {
    posix_spawnp: {
      args: [FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.ptr],
      returns: FFIType.i32,
    },
    posix_spawn_file_actions_init: { args: [FFIType.ptr], returns: FFIType.i32 },
    posix_spawn_file_actions_destroy: { args: [FFIType.ptr], returns: FFIType.i32 },
    posix_spawn_file_actions_adddup2: { args: [FFIType.ptr, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
    posix_spawn_file_actions_addopen: {
      args: [FFIType.ptr, FFIType.i32, FFIType.ptr, FFIType.i32, FFIType.u32],
      returns: FFIType.i32,
    },
    posix_spawnattr_init: { args: [FFIType.ptr], returns: FFIType.i32 },
    posix_spawnattr_setflags: { args: [FFIType.ptr, FFIType.i16], returns: FFIType.i32 },
    pipe2: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    close: { args: [FFIType.i32], returns: FFIType.i32 },
    read: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
    waitpid: { args: [FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
  });
  const O_RDWR = 2;
  const O_CLOEXEC = 0o2000000;
  const WNOHANG = 1;
  const POSIX_SPAWN_SETSID = 0x80;

  const encoder = new TextEncoder();
  const cString = (text: string) => encoder.encode(`${text}\0`);
  /** A NULL-terminated array of pointers to C strings, with the strings (kept alive by the caller). */
  const cArray = (texts: string[]) => {
    const strings = texts.map(cString);
    const array = new BigUint64Array(strings.length + 1);
    strings.forEach((text, i) => (array[i] = BigInt(ptr(text))));
    return { array, strings };
  };
  const argv = cArray(["echo", "hi"]);
  const devNull = cString("/dev/null");
  // glibc's opaque posix_spawnattr_t, sized generously (336 bytes on x86_64).
  const attr = new Uint8Array(512);
  libc.posix_spawnattr_init(ptr(attr));
  libc.posix_spawnattr_setflags(ptr(attr), POSIX_SPAWN_SETSID);

  /** Starts `echo hi` with stdout on a new pipe; returns the pid and the pipe's read end. */
  const start = (): { pid: number; stdout: number } => {
    const fds = new Int32Array(2);
    if (libc.pipe2(ptr(fds), O_CLOEXEC) !== 0) throw new Error("pipe2 failed");
    const envp = cArray(Object.entries(env).map(([key, value]) => `${key}=${value}`));
    // glibc's opaque posix_spawn_file_actions_t, sized generously (80 bytes on x86_64).
    const actions = new Uint8Array(256);
    const pid = new Int32Array(1);
    libc.posix_spawn_file_actions_init(ptr(actions));
    libc.posix_spawn_file_actions_addopen(ptr(actions), 0, ptr(devNull), O_RDWR, 0);
    libc.posix_spawn_file_actions_adddup2(ptr(actions), fds[1], 1);
    libc.posix_spawn_file_actions_addopen(ptr(actions), 2, ptr(devNull), O_RDWR, 0);
    const error = libc.posix_spawnp(
      ptr(pid),
      ptr(argv.strings[0]),
      ptr(actions),
      ptr(attr),
      ptr(argv.array),
      ptr(envp.array),
    );
    libc.posix_spawn_file_actions_destroy(ptr(actions));
    libc.close(fds[1]);
    if (error !== 0) {
      libc.close(fds[0]);
      throw new Error(`posix_spawnp failed: errno ${error}`);
    }
    return { pid: pid[0], stdout: fds[0] };
  };

  /** Reaps `pid` without blocking; throws if its exit status was taken by another reaper. */
  const reap = async (pid: number): Promise<void> => {
    const status = new Int32Array(1);
    for (let attempt = 0;; attempt++) {
      const got = libc.waitpid(pid, ptr(status), WNOHANG);
      if (got === pid) return;
      if (got !== 0) throw new Error(`waitpid(${pid}) returned ${got} (was its exit status taken by another reaper?)`);
      await Bun.sleep(attempt < 2 ? 0 : 1);
    }
  };

  const ffiAsync: Run = async () => {
    const { pid, stdout } = start();
    try {
      return await new Response(Bun.file(stdout).stream()).text();
    } finally {
      libc.close(stdout);
      await reap(pid);
    }
  };

  const readBuffer = new Uint8Array(4096);
  const status = new Int32Array(1);
  const ffiBlocking: Run = () => {
    const { pid, stdout } = start();
    if (libc.waitpid(pid, ptr(status), 0) !== pid) throw new Error(`waitpid(${pid}) failed`);
    const length = Number(libc.read(stdout, ptr(readBuffer), readBuffer.byteLength));
    libc.close(stdout);
    return Promise.resolve(new TextDecoder().decode(readBuffer.subarray(0, Math.max(0, length))));
  };

  const bunSpawn: Run = async () => {
    const proc = Bun.spawn({
      cmd: ["echo", "hi"],
      env: { ...env },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "ignore",
      detached: true,
    });
    const [text] = await Promise.all([readAll(proc.stdout), proc.exited]);
    return text;
  };

  // Side by side: if Bun reaped children it did not spawn, `reap` would throw.
  await Promise.all([measure(ffiAsync, 500), measure(bunSpawn, 500)]);
  console.log("500 FFI children reaped by this script while Bun.spawn ran 500 beside them: none taken by Bun");

  return [
    ["Bun.spawn, 30 in flight", () => measure(bunSpawn, SPAWNS)],
    ["posix_spawnp via bun:ffi, async, 30 in flight", () => measure(ffiAsync, SPAWNS)],
    ["posix_spawnp via bun:ffi, blocking, 1 at a time", () => measure(ffiBlocking, SPAWNS, 1)],
  ];
}

/** The cases under Deno: a worker's usual spawn, and the one it uses for a process group of the command's own. */
function denoCases(): Array<[string, () => Promise<Sample>]> {
  // `spawn()` then `output()`, as adapters/deno.ts spawns: `Deno.Command.output()` alone ignores `detached`
  // (deno 2.9.6: the command stays in this process's group).
  const command = (detached: boolean): Run => async () => {
    const { stdout } = await new Deno.Command("echo", {
      args: ["hi"],
      env,
      clearEnv: true,
      stdin: "null",
      stdout: "piped",
      stderr: "null",
      detached,
    }).spawn().output();
    return new TextDecoder().decode(stdout);
  };
  return [
    ["Deno.Command, 30 in flight", () => measure(command(false), SPAWNS)],
    ["Deno.Command detached, 30 in flight", () => measure(command(true), SPAWNS)],
  ];
}

if (HOST === "node") throw new Error("run this under bun or deno (see its header)");
const openTargets = () => openFds().map(([, target]) => target);
const targetsBefore = new Set(openTargets());
const cases = HOST === "bun" ? await bunCases() : denoCases();
const samples = new Map<string, Sample[]>(cases.map(([name]) => [name, []]));
for (let round = 0; round < ROUNDS; round++) {
  for (let i = 0; i < cases.length; i++) {
    const [name, run] = cases[(round + i) % cases.length];
    samples.get(name)!.push(await run());
  }
  console.error(`round ${round + 1}/${ROUNDS}`);
}
// Pipes are what the cases open; a runtime may dup one it already had (stderr, once written to), and opens
// descriptors of its own on first use (Deno: a socket pair for its child-exit signal handling).
const left = openTargets().filter((target) => target.startsWith("pipe:") && !targetsBefore.has(target));
if (left.length > 0) throw new Error(`left open: ${left.join(", ")}`);

const version = HOST === "bun" ? `bun ${Bun.version}` : `deno ${Deno.version.deno}`;
console.log(`\n${version}, \`echo hi\`, ${SPAWNS} per round, medians of ${ROUNDS} interleaved rounds\n`);
console.log("| how | CPU µs/spawn, this process | spawns/s |");
console.log("| --- | --- | --- |");
for (const [name, list] of samples) {
  const cpu = Math.round(median(list.map((s) => s.cpu)));
  console.log(`| ${name} | ${cpu} | ${Math.round(median(list.map((s) => s.rate)))} |`);
}

/**
 * A mixed load through one pool: `echo`, a 163 KB `cat` (collected, and read as a stream), a missing program, a
 * failing exit code, a killed `sleep`, a streamed `yes` whose reader cancels after one chunk, and `yes` commands
 * walked away from (killed or timed out with their output never read, or read a little and then left),
 * `concurrency` at a time, every result and every output read checked. Reports the host's open fds and child
 * processes, the workers' fds, children and memory, before and after; what of that is wrong ({@linkcode soakProblems});
 * and the run of both tests/soak_test.ts and bench/soak.ts (100,000 spawns) ({@linkcode runSoak}).
 */

import { Buffer } from "node:buffer";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { catFixtureBytes, writeCatFixture } from "../support/fixture.mjs";
import { Pool, SpawnError, type WorkerRuntime } from "../mod.ts";
import { alive, childPids, openFds, rssBytes } from "./proc.ts";

/** What a soak run saw. */
export interface SoakReport {
  spawns: number;
  seconds: number;
  wrong: string[];
  fds: { before: number; after: number; opened: string[]; closed: string[] };
  children: { before: number; after: number };
  /** The workers' open fds and children (a command's zombie included), summed over the workers. */
  workers: { fds: { before: number; after: number }; children: { before: number; after: number } };
  workerRssMB: { before: number[]; after: number[] };
  /** Worker RSS (MB, per worker) after each tenth of the run: flat, or growing? */
  workerRssMBAt: Array<{ spawns: number; rss: number[] }>;
}

/** This process's open fds, as "fd -> target". */
const fdList = (): string[] => openFds().map(([fd, target]) => `${fd} -> ${target}`);
/** This process's live children (zombies excluded). */
const children = (): number => childPids(process.pid).filter(alive).length;
const rssMB = (pid: number) => Math.round(rssBytes(pid) / 2 ** 20);
/** What the workers hold: their open fds and their children, each summed over the workers. */
function workersHold(pids: number[]): { fds: number; children: number } {
  let fds = 0;
  let kids = 0;
  for (const pid of pids) {
    fds += readdirSync(`/proc/${pid}/fd`).length;
    kids += childPids(pid).length;
  }
  return { fds, children: kids };
}

/**
 * A fast writer whose reader leaves after the first chunk: the output past the window waits in the worker,
 * is dropped at the release, and `yes` gets SIGPIPE (or ECONNRESET, exit 1, on a socketpair). Resolves with
 * what went wrong, or undefined; rejects with the pool's error.
 */
export async function cancelledYes(pool: Pool): Promise<string | undefined> {
  const child = pool.command("yes", { stdout: "piped", stderr: "null" }).spawn();
  const reader = child.stdout.getReader();
  const first = await reader.read();
  await reader.cancel();
  const status = await child.status;
  if (first.done) return "no output";
  if (!(status.signal === "SIGPIPE" || status.code === 1)) return `exit ${JSON.stringify(status)}`;
  return undefined;
}

/** Runs `spawns` mixed commands through `pool`, `concurrency` at a time. */
export async function soak(pool: Pool, spawns: number, concurrency: number, scratch: string): Promise<SoakReport> {
  const catFile = writeCatFixture(scratch);
  const catBytes = Buffer.from(catFixtureBytes());
  await pool.ready();
  const workers = pool.stats().workers.map((w) => w.pid);
  const wrong: string[] = [];
  const kinds = [
    async (i: number) => {
      const out = await pool.command("echo", { args: [`n${i}`] }).output();
      if (Buffer.from(out.stdout).toString() !== `n${i}\n` || out.code !== 0) wrong.push(`echo ${i}`);
    },
    async (i: number) => {
      const out = await pool.command("cat", { args: [catFile] }).output();
      if (!catBytes.equals(Buffer.from(out.stdout)) || out.code !== 0) wrong.push(`cat ${i}`);
    },
    async (i: number) => {
      // A relative path: the host's own check leaves it to the worker, whose failure path this exercises.
      const proc = pool.spawn(["./no-such-program-for-soak"]);
      try {
        await proc.exited;
        wrong.push(`missing ${i} ran`);
      } catch (error) {
        if (!(error instanceof SpawnError && error.code === "ENOENT")) wrong.push(`missing ${i}: ${error}`);
      }
    },
    async (i: number) => {
      const out = await pool.command("sh", { args: ["-c", "echo out; echo err >&2; exit 3"] }).output();
      const ok = out.code === 3 && Buffer.from(out.stdout).toString() === "out\n" &&
        Buffer.from(out.stderr).toString() === "err\n";
      if (!ok) wrong.push(`exit ${i}`);
    },
    async (i: number) => {
      const child = pool.command("sleep", { args: ["10"] }).spawn();
      await child.spawned;
      child.kill("SIGKILL");
      const status = await child.status;
      if (status.signal !== "SIGKILL") wrong.push(`kill ${i}: ${JSON.stringify(status)}`);
    },
    async (i: number) => {
      const what = await cancelledYes(pool);
      if (what !== undefined) wrong.push(`yes ${i}: ${what}`);
    },
    async (i: number) => {
      const proc = pool.spawn(["cat", catFile]);
      const out = Buffer.from(await new Response(proc.stdout as ReadableStream<Uint8Array>).arrayBuffer());
      if (!catBytes.equals(out) || (await proc.exited) !== 0) wrong.push(`streamed cat ${i}`);
    },
    async (i: number) => {
      // Killed, its output never read: the request must complete all the same.
      const proc = pool.spawn(["yes"]);
      await proc.spawned;
      proc.kill();
      const code = await proc.exited;
      if (code !== 143) wrong.push(`unread yes ${i}: exit ${code}`);
    },
    async (i: number) => {
      // Timed out, its output never read.
      const code = await pool.spawn(["yes"], { timeout: 20 }).exited;
      if (code !== 143) wrong.push(`timed-out yes ${i}: exit ${code}`);
    },
    async (i: number) => {
      // A little read, then the reader walks away (no cancel) and the command is killed.
      const child = pool.command("yes", { stdout: "piped" }).spawn();
      const reader = child.stdout.getReader();
      const first = await reader.read();
      reader.releaseLock();
      child.kill("SIGKILL");
      const status = await child.status;
      const ok = !first.done && first.value[0] === 0x79 && status.signal === "SIGKILL";
      if (!ok) wrong.push(`left yes ${i}: ${JSON.stringify(status)}`);
    },
  ];
  // A warm-up first: runtimes open a few fds of their own early on, once. Deno opens a socketpair the
  // first time its garbage collector works under pressure (a bare script that allocates 330 MB does too),
  // so the warm-up allocates that much before the fds are counted.
  for (let i = 0; i < 2000; i++) new Uint8Array(163 * 1024).fill(i);
  let warm = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = warm++; i < 200; i = warm++) await kinds[i % kinds.length](-1 - i);
  }));
  await settled(pool);
  const before = { fds: fdList(), children: children(), rss: workers.map(rssMB), workers: workersHold(workers) };
  let next = 0;
  const checkpoints: Array<{ spawns: number; rss: number[] }> = [];
  const tenth = Math.max(1, Math.floor(spawns / 10));
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < spawns; i = next++) {
      await kinds[i % kinds.length](i);
      if ((i + 1) % tenth === 0) checkpoints.push({ spawns: i + 1, rss: workers.map(rssMB) });
    }
  }));
  const seconds = (performance.now() - start) / 1000;
  await settled(pool);
  const after = { fds: fdList(), children: children(), rss: workers.map(rssMB), workers: workersHold(workers) };
  return {
    spawns,
    seconds: Number(seconds.toFixed(1)),
    wrong,
    fds: {
      before: before.fds.length,
      after: after.fds.length,
      opened: after.fds.filter((fd) => !before.fds.includes(fd)),
      closed: before.fds.filter((fd) => !after.fds.includes(fd)),
    },
    children: { before: before.children, after: after.children },
    workers: {
      fds: { before: before.workers.fds, after: after.workers.fds },
      children: { before: before.workers.children, after: after.workers.children },
    },
    workerRssMB: { before: before.rss, after: after.rss },
    workerRssMBAt: checkpoints,
  };
}

/**
 * Waits (up to 5 s) until no request is in flight: every command above has exited when its check returns, but a
 * request completes a moment later, once the rest of its output has come (at most a 200 ms grace).
 */
async function settled(pool: Pool): Promise<void> {
  const deadline = performance.now() + 5000;
  while (pool.stats().inFlight > 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 10));
}

/**
 * What a soak left wrong or behind, one line each (none: it passed): a wrong result or output, a host fd or child
 * process more or fewer than before, a worker's child left, a worker's fds grown by more than a few (a Deno worker
 * opens and closes a few of its own now and then; a leak per command would be thousands).
 */
export function soakProblems(report: SoakReport): string[] {
  const problems = [...report.wrong];
  if (report.fds.after !== report.fds.before) {
    problems.push(`open fds: ${report.fds.before} -> ${report.fds.after} (${JSON.stringify(report.fds)})`);
  }
  if (report.children.after !== report.children.before) {
    problems.push(`child processes (the workers): ${report.children.before} -> ${report.children.after}`);
  }
  if (report.workers.children.after !== 0) {
    problems.push(`the workers' children (commands, zombies): ${report.workers.children.after} left`);
  }
  if (report.workers.fds.after > report.workers.fds.before + 4) {
    problems.push(`the workers' fds: ${report.workers.fds.before} -> ${report.workers.fds.after}`);
  }
  return problems;
}

/**
 * The soak as tests/soak_test.ts and bench/soak.ts run it: `spawns` mixed spawns at 64 in flight through a new pool of
 * `runtime` workers (the default pool's choice when undefined), judged by {@linkcode soakProblems} before the pool
 * closes.
 */
export async function runSoak(
  runtime: WorkerRuntime | undefined,
  spawns: number,
): Promise<{ report: SoakReport; problems: string[] }> {
  const pool = new Pool(runtime ? { runtime } : {});
  try {
    const report = await soak(pool, spawns, 64, mkdtempSync(join(tmpdir(), "spawnpool-soak-")));
    return { report, problems: soakProblems(report) };
  } finally {
    await pool.close();
  }
}

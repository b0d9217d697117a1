// The processes of a session or a process group, from /proc: what a script leaves behind once it has exited, what a
// killed command left running; and a script run in a session of its own, timed, with what it left. Shared by
// tests/cold_start_test.ts, tests/_remote.ts, bench/cold_start.mjs and bench/cold_floor.mjs (plain JavaScript: the
// benches run under any Node).
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";

/**
 * The live (not zombie) processes of session `sid`.
 * @param {number} sid
 * @returns {number[]}
 */
export function inSession(sid) {
  return liveWhere(3, sid);
}

/**
 * The live (not zombie) processes of process group `pgid`.
 * @param {number} pgid
 * @returns {number[]}
 */
export function inGroup(pgid) {
  return liveWhere(2, pgid);
}

/**
 * The live processes whose /proc/<pid>/stat field `index` (counted after the command name: 2 the process group, 3 the
 * session) is `id`.
 * @param {number} index
 * @param {number} id
 * @returns {number[]}
 */
function liveWhere(index, id) {
  const found = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] !== "Z" && Number(fields[index]) === id) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** How long a script's leftovers may live on after it exited before they are killed (and reported). */
const LINGER_LIMIT_MS = 3_000;

/**
 * Polls until session `sid` is empty; resolves with the ms since `since` (ms since the epoch). What is left after
 * {@link LINGER_LIMIT_MS} is killed.
 * @param {number} sid
 * @param {number} since
 * @returns {Promise<number>}
 */
async function untilGone(sid, since) {
  let waited = 0;
  while (inSession(sid).length > 0 && waited < LINGER_LIMIT_MS) {
    await new Promise((resolve) => setTimeout(resolve, 0));
    waited = performance.timeOrigin + performance.now() - since;
  }
  for (const pid of inSession(sid)) process.kill(pid, "SIGKILL");
  return waited;
}

/**
 * Runs `command` with `args` in a session of its own (stdin ignored, stdout and stderr read); resolves once it has
 * exited and both have closed (what a shell's `$(script)` waits for), with its start (ms since the epoch), its wall
 * time, when it exited (ms from its start), the processes of its session still alive at its exit (`left`), the ms
 * until none was (`gone`: what is still there after 3 s is killed) and its stderr. Rejects, once its session is empty,
 * when it does not exit 0 having printed `expected`.
 * @param {string} command
 * @param {string[]} args
 * @param {{ expected: string, label: string }} check
 * @returns {Promise<{ start: number, wall: number, exit: number, left: number[], gone: number, stderr: string }>}
 */
export function runInSession(command, args, { expected, label }) {
  return new Promise((resolve, reject) => {
    const start = performance.timeOrigin + performance.now();
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], detached: true });
    let stdout = "";
    let stderr = "";
    let exit;
    let left = [];
    /** Settles when nothing is left in the script's session: the ms from its exit, or the limit (then killed). */
    let gone = Promise.resolve(0);
    child.stdout.setEncoding("utf8").on("data", (text) => (stdout += text));
    child.stderr.setEncoding("utf8").on("data", (text) => (stderr += text));
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      exit = { at: performance.timeOrigin + performance.now(), code, signal };
      left = inSession(child.pid);
      if (left.length > 0) gone = untilGone(child.pid, exit.at);
    });
    child.on("close", async () => {
      const end = performance.timeOrigin + performance.now();
      if (exit.code !== 0 || stdout !== expected) {
        await gone;
        reject(
          new Error(
            `${label}: exit ${exit.code} ${exit.signal}, stdout ${JSON.stringify(stdout)}, stderr ${stderr}`,
          ),
        );
        return;
      }
      resolve({ start, wall: end - start, exit: exit.at - start, left, gone: await gone, stderr });
    });
  });
}

/**
 * Runs every case once to warm up (Deno compiles a script into its cache on its first run, and every runtime's files
 * get into the page cache), then `rounds` rounds of all of them in an order that rotates each round, adding each run's
 * wall time, exit time, number of processes left at its exit and the ms until they were gone to the case's `walls`,
 * `exits`, `left` and `gone`.
 * @template {{ walls: number[], exits: number[], left: number[], gone: number[] }} Case
 * @param {Case[]} cases
 * @param {number} rounds
 * @param {(item: Case) => Promise<{ wall: number, exit: number, left: number[], gone: number }>} run
 */
export async function interleavedRounds(cases, rounds, run) {
  for (const item of cases) await run(item);
  for (let round = 0; round < rounds; round++) {
    const order = cases.map((_, i) => cases[(i + round) % cases.length]);
    for (const item of order) {
      const result = await run(item);
      item.walls.push(result.wall);
      item.exits.push(result.exit);
      item.left.push(result.left.length);
      item.gone.push(result.gone);
    }
  }
}

// The processes of a session or a process group, from /proc: what a script leaves behind once it has exited, what a
// killed command left running. Shared by tests/cold_start_test.ts, tests/_remote.ts and bench/cold_start.mjs (plain
// JavaScript: the bench runs under any Node).
import { readdirSync, readFileSync } from "node:fs";

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

// The processes of a session, from /proc: what a script leaves behind once it has exited. Shared by
// tests/cold_start_test.ts and bench/cold_start.mjs (plain JavaScript: the bench runs under any Node).
import { readdirSync, readFileSync } from "node:fs";

/**
 * The live (not zombie) processes of session `sid`.
 * @param {number} sid
 * @returns {number[]}
 */
export function inSession(sid) {
  const found = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (fields[0] !== "Z" && Number(fields[3]) === sid) found.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/**
 * Helpers shared by the test files (not a test file itself).
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { encodeHeader, type FrameType } from "../core/frame.ts";

/** Whether a process exists and is not a zombie (this machine's init may not reap orphans at once). */
export function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** One whole frame as bytes, header and payload, as a worker or an attacker would write it. */
export function frame(type: number, id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(9 + payload.byteLength);
  out.set(encodeHeader(type as FrameType, id, payload.byteLength));
  out.set(payload, 9);
  return out;
}

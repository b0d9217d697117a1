/**
 * What a command used, in the shape of Bun's `Subprocess.resourceUsage()`: the same object on every API shape, from
 * the counts its worker reports (native workers: the kernel's `getrusage` of the command; Bun workers: Bun's own).
 *
 * @module
 */

import type { WireUsage } from "./frame.ts";

/** A finished command's resource usage, with Bun's `ResourceUsage` fields and units. */
export interface ResourceUsage {
  /** Voluntary and involuntary context switches. */
  contextSwitches: { voluntary: number; involuntary: number };
  /** CPU time, in microseconds: user, system, and both. */
  cpuTime: { user: bigint; system: bigint; total: bigint };
  /** The largest resident set the command had, in bytes. */
  maxRSS: number;
  /** IPC messages sent and received. */
  messages: { sent: number; received: number };
  /** File system input and output operations. */
  ops: { in: number; out: number };
  /** Shared memory size (the kernel's `ru_ixrss`; 0 on Linux). */
  shmSize: number;
  /** Signals received. */
  signalCount: number;
  /** Times swapped out. */
  swapCount: number;
}

/** A worker's report as a {@linkcode ResourceUsage}. */
export function resourceUsage(usage: WireUsage): ResourceUsage {
  return {
    contextSwitches: { voluntary: usage.vcsw, involuntary: usage.ivcsw },
    cpuTime: { user: BigInt(usage.user), system: BigInt(usage.system), total: BigInt(usage.user + usage.system) },
    maxRSS: usage.maxRSS,
    messages: { sent: usage.msgsnd, received: usage.msgrcv },
    ops: { in: usage.inblock, out: usage.oublock },
    shmSize: usage.shm,
    signalCount: usage.nsignals,
    swapCount: usage.nswap,
  };
}

/**
 * Signal names and numbers (Linux numbering; the names are what travel on the wire).
 *
 * @module
 */

import type { ExitInfo } from "./frame.ts";

const SIGNALS: Readonly<Record<string, number>> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGSTKFLT: 16,
  SIGCHLD: 17,
  SIGCONT: 18,
  SIGSTOP: 19,
  SIGTSTP: 20,
  SIGTTIN: 21,
  SIGTTOU: 22,
  SIGURG: 23,
  SIGXCPU: 24,
  SIGXFSZ: 25,
  SIGVTALRM: 26,
  SIGPROF: 27,
  SIGWINCH: 28,
  SIGIO: 29,
  SIGPWR: 30,
  SIGSYS: 31,
};

const NAMES: readonly string[] = (() => {
  const names: string[] = [];
  for (const [name, number] of Object.entries(SIGNALS)) names[number] = name;
  return names;
})();

/**
 * Normalizes a signal given by name or number to its name.
 *
 * @throws {TypeError} If `signal` is neither a string nor a number.
 * @throws {RangeError} If it names no known signal.
 */
export function signalName(signal: string | number): string {
  if (typeof signal === "number") {
    const name = NAMES[signal];
    if (name === undefined) throw new RangeError(`Unknown signal number: ${signal}`);
    return name;
  }
  if (typeof signal !== "string") {
    throw new TypeError(`Signal must be a string or a number, got ${typeof signal}`);
  }
  if (!Object.hasOwn(SIGNALS, signal)) throw new RangeError(`Unknown signal: "${signal}"`);
  return signal;
}

/** A command's exit as one number, as shells report it: its exit code, or 128 + the signal's number. */
export function exitStatusCode(info: ExitInfo): number {
  return info.signal !== null ? 128 + (signalNumber(info.signal) ?? 0) : info.code ?? 1;
}

/**
 * How a child that a signal ended is reported on the wire: by the signal's name, or, for a signal without one (a
 * real-time signal), as a shell reports it: exit code 128 + its number, no signal. The native worker does the same.
 */
export function exitBySignal(signal: number): { code: number | null; signal: string | null } {
  const name = NAMES[signal];
  return name === undefined ? { code: 128 + signal, signal: null } : { code: null, signal: name };
}

/** The number of a signal name; undefined for an unknown name. */
export function signalNumber(name: string): number | undefined {
  return Object.hasOwn(SIGNALS, name) ? SIGNALS[name] : undefined;
}

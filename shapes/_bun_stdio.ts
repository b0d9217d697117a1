/**
 * Bun's stdio values as a pool can give them to a command: the modes of stdin, stdout and stderr, what feeds stdin,
 * the host's files relayed (`Bun.file()`, a descriptor of the host's), the `stdio` array, and stdin as a `FileSink`.
 *
 * @module
 */

import { bytesOf, type StdinSource } from "../core/stdin.ts";
import type { StdioMode } from "../core/frame.ts";
import { stdioOption } from "../core/options.ts";

/** Stdio choices for stdout and stderr, as Bun names them. */
export type BunOutput = "pipe" | "inherit" | "ignore" | null | 1 | 2;

/** Stdin choices, as Bun accepts them. */
export type BunInput =
  | "pipe"
  | "inherit"
  | "ignore"
  | null
  | string
  | ArrayBufferView
  | ArrayBuffer
  | Blob
  | Response
  | Request
  | ReadableStream<Uint8Array>
  | 0;

/** A writable stdin, shaped like Bun's `FileSink`. */
export interface PooledFileSink {
  /** Queues bytes or text; returns the number of bytes queued. */
  write(chunk: string | ArrayBufferView | ArrayBuffer): number;
  /** Resolves when everything queued has been written to the command. */
  flush(): Promise<number>;
  /** Flushes and closes stdin. */
  end(): Promise<number>;
}

/** A file of the host's as Bun's `Bun.file(pathOrFd)` gives it: a Blob that can also be written. */
interface HostFile {
  stream(): ReadableStream<Uint8Array>;
  writer(): { write(chunk: Uint8Array): unknown; flush(): unknown; end(): unknown };
}

interface BunFiles {
  stdin: unknown;
  stdout: unknown;
  stderr: unknown;
  file(fd: number): HostFile;
}

/** Bun's file API, where this runs in Bun. */
function bunFiles(): BunFiles | undefined {
  return (globalThis as { Bun?: BunFiles }).Bun;
}

/**
 * Whether `value` is a file of the host's named by its path (`Bun.file(path)`): a Blob with a `writer()` and a `name`.
 * (Every Blob has a `writer()` in Bun; only a file opened by path has a name.)
 */
function isHostFile(value: unknown): value is HostFile {
  return typeof Blob !== "undefined" && value instanceof Blob &&
    typeof (value as { writer?: unknown }).writer === "function" &&
    typeof (value as { name?: unknown }).name === "string";
}

/** A stdio slot given one of the host's files: relayed through the host (see {@linkcode hostFile}). */
export interface Relayed {
  file: HostFile;
  /** The descriptor is the caller's: flushed after the command, never closed. */
  callerFd: boolean;
}

/**
 * What a stdio value that names one of the host's files becomes in a pool. The slot's own descriptor (`stdout: 1`,
 * `Bun.stdout`) is "inherit": the worker has the host's. Another descriptor, or a `Bun.file(path)`, is relayed by
 * the host, which reads it into the command's stdin, or writes the command's output to it, where it can open it
 * (Bun). Elsewhere a descriptor of the host's is a TypeError: a worker can give a command only its own stdio.
 * Undefined for values that name no file.
 */
export function hostFile(value: unknown, fd: 0 | 1 | 2, what: string): "inherit" | Relayed | undefined {
  const bun = bunFiles();
  const named = typeof value === "number"
    ? value
    : bun === undefined
    ? -1
    : [bun.stdin, bun.stdout, bun.stderr].indexOf(value);
  if (named === fd) return "inherit";
  if (named < 0 && isHostFile(value)) return { file: value, callerFd: false };
  if (named < 0) return undefined;
  if (!Number.isInteger(named) || bun === undefined) {
    throw new TypeError(
      `${what} cannot be the host's file descriptor ${named} in a pool: a worker can give a command only its own ` +
        `stdio (${fd} here); use "pipe" and forward the bytes`,
    );
  }
  return { file: bun.file(named), callerFd: true };
}

/** Writes what `stream` yields to a relayed file; ends a file it opened, flushes a caller's descriptor. */
export async function relayOut(stream: ReadableStream<Uint8Array>, to: Relayed): Promise<void> {
  const writer = to.file.writer();
  for await (const chunk of stream) await writer.write(chunk);
  await (to.callerFd ? writer.flush() : writer.end());
}

/** Stdout's or stderr's mode, and the host's file it is relayed to, if it names one (`fallback` when undefined). */
export function outputMode(
  value: unknown,
  fallback: "pipe" | "inherit",
  what: string,
  fd: 1 | 2,
): { mode: StdioMode; relay?: Relayed } {
  const file = hostFile(value, fd, what);
  if (file === "inherit") return { mode: "inherit" };
  if (file !== undefined) return { mode: "piped", relay: file };
  const mode = stdioOption(
    value === null ? "ignore" : value,
    ["pipe", "inherit", "ignore"],
    fallback,
    what,
  );
  return { mode: mode === "pipe" ? "piped" : mode === "inherit" ? "inherit" : "null" };
}

/**
 * Bun's `stdio` array as the three slots a pool can give a command, checked as Bun checks it; a slot past stderr must
 * be empty (a worker passes a command no other descriptor), and `proc.stdio` is null for each, as Bun's is for slots
 * that are not descriptors.
 */
export function stdioArray(stdio: unknown): { slots: unknown[]; extra: null[] } {
  if (!Array.isArray(stdio)) throw new TypeError("stdio must be an array");
  const slots: unknown[] = [];
  const extra: null[] = [];
  for (let i = 0; i < stdio.length; i++) {
    const value: unknown = stdio[i];
    if (value === "socket-fd" && i < 3) throw new TypeError("'socket-fd' is only supported at indices >= 3");
    if (i < 3) {
      slots[i] = value;
      continue;
    }
    const empty = value === undefined || value === null || value === "ignore" ||
      (typeof Blob !== "undefined" && value instanceof Blob && value.size === 0 && !isHostFile(value));
    if (empty) {
      extra.push(null);
      continue;
    }
    const isStream = value instanceof ReadableStream;
    if (isStream || (typeof Blob !== "undefined" && value instanceof Blob && !isHostFile(value))) {
      throw new TypeError(`${isStream ? "ReadableStream" : "Blob"} cannot be used for stdio[${i}] yet`);
    }
    if (
      (typeof Response !== "undefined" && value instanceof Response) ||
      (typeof Request !== "undefined" && value instanceof Request)
    ) {
      throw new TypeError(`Blob cannot be used for stdio[${i}] yet`);
    }
    throw new TypeError(
      `stdio[${i}] cannot be given to a command in a pool: a worker passes a command only stdin, stdout and stderr`,
    );
  }
  return { slots, extra };
}

/** Stdin's mode, and what feeds it: bytes, a string, a Blob, a Response, a stream or a file of the host's. */
export function stdinSource(value: BunInput | undefined): { mode: StdioMode; source?: StdinSource } {
  if (value === undefined || value === null || value === "ignore") return { mode: "null" };
  const file = hostFile(value, 0, "stdin");
  if (file === "inherit") return { mode: "inherit" };
  if (file !== undefined) return { mode: "piped", source: file.file.stream() };
  if (value === "pipe") return { mode: "piped" };
  if (value === "inherit") return { mode: "inherit" };
  if (typeof value === "string" || value instanceof ArrayBuffer || ArrayBuffer.isView(value)) {
    return { mode: "piped", source: bytesOf(value, "Stdin").slice() };
  }
  if (value instanceof ReadableStream) return { mode: "piped", source: value };
  if (typeof Blob !== "undefined" && value instanceof Blob) return { mode: "piped", source: value.stream() };
  if (
    (typeof Response !== "undefined" && value instanceof Response) ||
    (typeof Request !== "undefined" && value instanceof Request)
  ) {
    return { mode: "piped", source: value.body ?? new Uint8Array(0) };
  }
  throw new TypeError(`stdin must be "pipe", "inherit", "ignore", null, bytes, a string, a Blob or a stream`);
}

/** Stdin as Bun's `FileSink`: writes queued in order, `flush()` waits for them, `end()` closes stdin. */
export function fileSink(stdin: WritableStream<Uint8Array>): PooledFileSink {
  const writer = stdin.getWriter();
  let queued = Promise.resolve();
  let pending = 0;
  return {
    write(chunk) {
      const bytes = bytesOf(chunk, "Stdin").slice();
      pending += bytes.byteLength;
      queued = queued.then(() => writer.write(bytes));
      queued.catch(() => {});
      return bytes.byteLength;
    },
    async flush() {
      const bytes = pending;
      pending = 0;
      await queued;
      return bytes;
    },
    async end() {
      const bytes = await this.flush();
      await writer.close();
      return bytes;
    },
  };
}

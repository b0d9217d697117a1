/**
 * A pooled command's stdin on the host: pumping a source into it, and offering it as a web `WritableStream`.
 *
 * @module
 */

/**
 * The bytes of a string (UTF-8), an ArrayBuffer or a view of one, as a view (no copy: `.slice()` it to keep it).
 *
 * @throws {TypeError} For anything else, naming `what` ("Stdin", "Terminal.write").
 */
export function bytesOf(chunk: unknown, what: string): Uint8Array {
  if (typeof chunk === "string") return new TextEncoder().encode(chunk);
  if (chunk instanceof ArrayBuffer) return new Uint8Array(chunk);
  if (ArrayBuffer.isView(chunk)) return new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  throw new TypeError(`${what} accepts strings, ArrayBuffers and ArrayBuffer views`);
}

/** Where an execution's stdin comes from when it is not a writable stream the caller drives. */
export type StdinSource = Uint8Array | ReadableStream<Uint8Array>;

/** Where stdin bytes go: the execution, which sends them to the worker and waits for its acknowledgement. */
export interface StdinSink {
  /** Writes `chunk`; false when the child closed its stdin or the request is done. */
  write(chunk: Uint8Array): Promise<boolean>;
  /** Closes the child's stdin. */
  endStdin(): void;
}

/** Writes `source` into the child's stdin through `sink`, then closes it (also when the source fails). */
export async function pumpStdin(sink: StdinSink, source: StdinSource): Promise<void> {
  try {
    if (source instanceof Uint8Array) {
      if (source.byteLength > 0) await sink.write(source);
      return;
    }
    const reader = source.getReader();
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        if (!(await sink.write(value))) {
          await reader.cancel();
          break;
        }
      }
    } finally {
      reader.releaseLock();
    }
  } catch {
    // A failing source ends stdin, as a closed pipe would.
  } finally {
    sink.endStdin();
  }
}

/** Stdin as a web `WritableStream` over `sink`, with the errors Deno's own gives. */
export function writableStdin(sink: StdinSink): WritableStream<Uint8Array> {
  return new WritableStream<Uint8Array>({
    write: async (chunk: unknown) => {
      let bytes: Uint8Array;
      if (chunk instanceof Uint8Array) bytes = chunk;
      else if (chunk instanceof ArrayBuffer) bytes = new Uint8Array(chunk);
      else if (ArrayBuffer.isView(chunk)) bytes = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      else {
        // The stream errors, and (as with Deno's own) the command's stdin closes rather than stay open for ever.
        sink.endStdin();
        throw new TypeError("Expected ArrayBuffer or ArrayBufferView for write chunk");
      }
      if (!(await sink.write(bytes))) {
        const error = new Error("Broken pipe: the child closed its stdin") as Error & { code: string };
        error.name = "BrokenPipe";
        error.code = "EPIPE";
        throw error;
      }
    },
    close: () => sink.endStdin(),
    abort: () => sink.endStdin(),
  });
}

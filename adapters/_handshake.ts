/**
 * The unix-socket handshake used where a host cannot hand its worker a socketpair (a `Deno.Command`
 * host): the host listens on a fresh, unguessable socket name, writes the name and a one-time secret to
 * the worker's stdin (never its environment or arguments, which children could read), and accepts only
 * a connection whose first bytes are that secret. Then it stops listening.
 *
 * @module
 */

/** Bytes of the one-time secret. */
export const SECRET_BYTES = 32;

/** How long a host waits for its worker to connect and authenticate. */
export const HANDSHAKE_TIMEOUT_MS = 30_000;

/** A fresh random secret. */
export function newSecret(): Uint8Array {
  return crypto.getRandomValues(new Uint8Array(SECRET_BYTES));
}

/** Hex encoding of bytes. */
export function toHex(bytes: Uint8Array): string {
  let out = "";
  for (const byte of bytes) out += byte.toString(16).padStart(2, "0");
  return out;
}

/** Decodes hex; throws on malformed input. */
export function fromHex(text: string): Uint8Array {
  if (!/^(?:[0-9a-f]{2})*$/.test(text)) throw new TypeError("Malformed hex");
  const out = new Uint8Array(text.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(text.slice(i * 2, i * 2 + 2), 16);
  return out;
}

/** Compares two byte arrays in time independent of where they differ. */
export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  let diff = 0;
  for (let i = 0; i < a.byteLength; i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

/** The line a host writes to its worker's stdin: socket path and secret. */
export function bootstrapLine(path: string, secret: Uint8Array): string {
  return `${JSON.stringify({ path, secret: toHex(secret) })}\n`;
}

/** Parses {@linkcode bootstrapLine}'s output. */
export function parseBootstrap(line: string): { path: string; secret: Uint8Array } {
  const value = JSON.parse(line) as { path?: unknown; secret?: unknown };
  if (typeof value.path !== "string" || typeof value.secret !== "string") {
    throw new TypeError("Malformed worker bootstrap line");
  }
  return { path: value.path, secret: fromHex(value.secret) };
}

/** A socket name nobody can guess: abstract on Linux. */
export function abstractSocketName(): string {
  return `\0spawnpool-${toHex(crypto.getRandomValues(new Uint8Array(16)))}`;
}

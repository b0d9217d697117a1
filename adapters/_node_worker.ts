/**
 * Worker-side pieces that Node and Bun share: reading the bootstrap line from stdin, connecting back to
 * the host's unix socket, and terminating on signals.
 *
 * @module
 */

import { connect, type Socket } from "node:net";
import process from "node:process";
import type { ByteChannel } from "../core/adapter.ts";
import { parseBootstrap } from "./_handshake.ts";
import { socketChannel } from "./_socket_channel.ts";

/** Reads the host's bootstrap line from stdin, then lets stdin go. */
export function readBootstrapLine(): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = "";
    const onData = (chunk: Uint8Array) => {
      text += new TextDecoder().decode(chunk);
      const end = text.indexOf("\n");
      if (end < 0) return;
      process.stdin.off("data", onData);
      process.stdin.pause();
      process.stdin.unref?.();
      resolve(text.slice(0, end));
    };
    process.stdin.on("data", onData);
    process.stdin.once("end", () => reject(new Error("Host closed stdin before sending the bootstrap line")));
  });
}

/** Connects to the host's unix socket and authenticates with the secret from the bootstrap line. */
export async function connectUnixFromStdin(): Promise<ByteChannel> {
  const { path, secret } = parseBootstrap(await readBootstrapLine());
  const socket = await new Promise<Socket>((resolve, reject) => {
    const socket = connect({ path }, () => resolve(socket));
    socket.once("error", reject);
  });
  socket.write(secret);
  return socketChannel(socket);
}

/** Calls `handler` once on SIGINT, SIGTERM or SIGHUP. */
export function onTerminateSignal(handler: () => void): void {
  let called = false;
  const once = () => {
    if (called) return;
    called = true;
    handler();
  };
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"] as const) process.on(signal, once);
}

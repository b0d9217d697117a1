/**
 * The little of the NATS client that remote pools use, typed here so that spawnpool depends on the client only
 * when a remote pool is made: `@nats-io/transport-node` (an optional peer dependency) is loaded then.
 *
 * @module
 */

import { SpawnPoolError } from "../core/errors.ts";
import type { RemoteOptions } from "./options.ts";

/** A received message. */
export interface NatsMsg {
  /** Its subject. */
  subject: string;
  /** Where to answer. */
  reply?: string;
  /** Its payload. */
  data: Uint8Array;
  /** Headers; a status message (503: no responders) has `code`. */
  headers?: { code: number };
}

/** A subscription. */
export interface NatsSubscription {
  /** Stops it. */
  unsubscribe(): void;
}

/** A connection. */
export interface NatsConnection {
  /** What the server said of itself: `max_payload` bounds a message. */
  info?: { max_payload: number };
  /** Publishes a message. */
  publish(subject: string, payload?: Uint8Array, options?: { reply?: string }): void;
  /** Subscribes; `callback` gets each message. */
  subscribe(
    subject: string,
    options: { queue?: string; callback: (error: Error | null, msg: NatsMsg) => void },
  ): NatsSubscription;
  /** Sends a request and resolves with the first answer. */
  request(subject: string, payload?: Uint8Array, options?: { timeout: number }): Promise<NatsMsg>;
  /** Sends what is buffered and waits for the server's answer. */
  flush(): Promise<void>;
  /** Resolves when the connection closed for good (with the error that closed it, if any). */
  closed(): Promise<void | Error>;
  /** Lets pending messages out, then closes. */
  drain(): Promise<void>;
  /** Closes at once. */
  close(): Promise<void>;
  /** What happens to the connection: disconnects, reconnects, the server's errors (permission violations). */
  status(): AsyncIterable<NatsStatus>;
}

/** An event of a connection; a permissions violation is an `"error"` whose error names the operation and subject. */
export interface NatsStatus {
  /** The kind of event. */
  type: string;
  /** For `"error"`: what the server said. */
  error?: Error & { operation?: "publish" | "subscription"; subject?: string };
}

interface NatsModule {
  connect(options: Record<string, unknown>): Promise<NatsConnection>;
  credsAuthenticator(creds: Uint8Array): unknown;
  createInbox(prefix?: string): string;
}

/** The package of the NATS client loaded for remote pools. */
export const NATS_CLIENT = "@nats-io/transport-node";
/** The versions of it spawnpool works with: package.json's peer dependency range. */
const NATS_CLIENT_RANGE = "^3.4.0";

/**
 * What is imported: the package, as installed, in Node and Bun; in Deno its npm: specifier, which Deno fetches itself
 * (or finds in node_modules), so that a Deno user installs nothing. A variable, so that no bundler or type-checker
 * tries to resolve it before a remote pool is made.
 */
const clientSpecifier: string = "Deno" in globalThis ? `npm:${NATS_CLIENT}@${NATS_CLIENT_RANGE}` : NATS_CLIENT;

let loaded: Promise<NatsModule> | undefined;

/** Loads the NATS client, once. */
function loadClient(): Promise<NatsModule> {
  loaded ??= (import(clientSpecifier) as Promise<NatsModule>).catch((error) => {
    loaded = undefined;
    throw new SpawnPoolError(
      "ERR_REMOTE_CONNECT",
      `A remote pool needs the NATS client: install ${NATS_CLIENT} (npm install ${NATS_CLIENT}, ` +
        `bun add ${NATS_CLIENT}; Deno fetches it from npm itself)`,
      { cause: error },
    );
  });
  return loaded;
}

/**
 * Connects to NATS as `options` say; the client reconnects on its own (to another server of the list, if one
 * goes) and never gives up while the connection is open.
 *
 * @throws {SpawnPoolError} `ERR_REMOTE_CONNECT` when the client is missing or no server can be reached.
 */
export async function connectNats(options: RemoteOptions, defaultName: string): Promise<NatsConnection> {
  const nats = await loadClient();
  const settings: Record<string, unknown> = {
    servers: options.servers,
    name: options.name ?? defaultName,
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
  };
  if (options.inboxPrefix !== undefined) settings.inboxPrefix = options.inboxPrefix;
  if (options.token !== undefined) settings.token = options.token;
  if (options.user !== undefined) {
    settings.user = options.user;
    settings.pass = options.pass;
  }
  if (options.tls !== undefined && options.tls !== false) settings.tls = options.tls === true ? {} : { ...options.tls };
  try {
    if (options.credentials !== undefined) {
      // Loaded here only: a pool with no credentials file never loads node:fs.
      const { readFile } = await import("node:fs/promises");
      settings.authenticator = nats.credsAuthenticator(await readFile(options.credentials));
    }
    return await nats.connect(settings);
  } catch (error) {
    throw new SpawnPoolError(
      "ERR_REMOTE_CONNECT",
      `Could not connect to NATS at ${[options.servers].flat().join(", ")}: ${
        error instanceof Error ? error.message : String(error)
      }`,
      { cause: error },
    );
  }
}

/** A fresh inbox prefix for a caller's reply subjects, under `prefix` (the client's default, `_INBOX`, without). */
export async function newInbox(prefix?: string): Promise<string> {
  return (await loadClient()).createInbox(prefix);
}

/** Whether a message is the server's "no responders" status (nobody listens where the request went). */
export function noResponders(msg: NatsMsg): boolean {
  return msg.headers?.code === 503 && msg.data.byteLength === 0;
}

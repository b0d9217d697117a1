/**
 * How a remote pool (and an agent) reaches NATS: servers, the pool's subject, credentials and TLS.
 *
 * @module
 */

import { validSubject } from "./wire.ts";

/** TLS for the connection to NATS; `true` for TLS with the system's trusted CAs. */
export interface RemoteTlsOptions {
  /** PEM file of the CA that signed the servers' certificates. */
  caFile?: string;
  /** PEM file of a client certificate, for servers that verify clients. */
  certFile?: string;
  /** PEM file of that certificate's key. */
  keyFile?: string;
}

/** Where a remote pool's agents are, and how to prove who it is. */
export interface RemoteOptions {
  /** NATS server URLs (`nats://host:4222`, `tls://host:4222`); the client fails over between them. */
  servers: string | string[];
  /**
   * The subject agents listen on; callers and agents of one fleet use the same. Letters, digits, `-`, `_` and dots.
   *
   * @default {"spawnpool"}
   */
  subject?: string;
  /** A token, for servers that authenticate with one. */
  token?: string;
  /** A user name, for servers that authenticate with user and password. */
  user?: string;
  /** That user's password. */
  pass?: string;
  /** A `.creds` file (a user JWT and its NKey seed), for servers in operator mode. */
  credentials?: string;
  /** TLS: `true`, or the CA and client certificate files. */
  tls?: boolean | RemoteTlsOptions;
  /** The connection's name, as servers show it in their monitoring. @default {"spawnpool"} */
  name?: string;
  /**
   * Where this caller's replies come, `<inboxPrefix>.<random>.*`: under `_INBOX.`, one prefix per caller user (say
   * `_INBOX.billing`), so that NATS permissions can keep callers out of each other's replies (docs/remote.md#security).
   * Agents answer only subjects under `_INBOX.`, commands and `ready()`'s discovery alike. @default {"_INBOX"}
   */
  inboxPrefix?: string;
}

/** The subject agents listen on when none is given. */
export const DEFAULT_SUBJECT = "spawnpool";

/**
 * Checks remote options; returns them with the subject filled in.
 *
 * @throws {TypeError} For a missing server list, a bad subject or an option of the wrong type.
 */
export function checkRemoteOptions(options: RemoteOptions): Required<Pick<RemoteOptions, "subject">> & RemoteOptions {
  if (typeof options !== "object" || options === null) throw new TypeError("remote must be an object");
  const servers = typeof options.servers === "string" ? [options.servers] : options.servers;
  if (!Array.isArray(servers) || servers.length === 0 || servers.some((s) => typeof s !== "string" || s === "")) {
    throw new TypeError("remote.servers must be a NATS URL or a non-empty array of them");
  }
  const subject = options.subject ?? DEFAULT_SUBJECT;
  if (typeof subject !== "string" || !validSubject(subject)) {
    throw new TypeError(`remote.subject must be dot-separated letters, digits, "-" and "_", got "${String(subject)}"`);
  }
  for (const key of ["token", "user", "pass", "credentials", "name", "inboxPrefix"] as const) {
    if (options[key] !== undefined && typeof options[key] !== "string") {
      throw new TypeError(`remote.${key} must be a string, got ${typeof options[key]}`);
    }
  }
  if ((options.user === undefined) !== (options.pass === undefined)) {
    throw new TypeError('remote.user and remote.pass go together: got only "' + (options.user ? "user" : "pass") + '"');
  }
  const ways = [options.token, options.user, options.credentials].filter((way) => way !== undefined).length;
  if (ways > 1) throw new TypeError("remote takes one of token, user and pass, or credentials, got more");
  const prefix = options.inboxPrefix;
  if (prefix !== undefined && !(prefix === "_INBOX" || (prefix.startsWith("_INBOX.") && validSubject(prefix)))) {
    throw new TypeError(`remote.inboxPrefix must be "_INBOX" or a subject under "_INBOX.", got "${prefix}"`);
  }
  const tls = options.tls;
  if (tls !== undefined && typeof tls !== "boolean") {
    if (typeof tls !== "object" || tls === null) {
      throw new TypeError("remote.tls must be a boolean or { caFile, certFile, keyFile }");
    }
    for (const key of ["caFile", "certFile", "keyFile"] as const) {
      if (tls[key] !== undefined && typeof tls[key] !== "string") {
        throw new TypeError(`remote.tls.${key} must be a file path, got ${typeof tls[key]}`);
      }
    }
    if ((tls.certFile === undefined) !== (tls.keyFile === undefined)) {
      throw new TypeError("remote.tls.certFile and remote.tls.keyFile go together");
    }
  }
  return { ...options, servers, subject };
}

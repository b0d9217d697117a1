/**
 * Real nats-server processes for the tests (the remote pool over NATS): helpers that start one server or a routed
 * cluster on 127.0.0.1 with random ports, optionally with token or user/password auth, TLS (a throwaway CA and server
 * certificate, support/test_certificates.mjs), or a raw config file; no server outlives the process that started it.
 * Which nats-server runs, and its install, is support/nats_install.mjs's (re-exported here).
 * Plain JavaScript, so that it runs under Node, Deno and Bun alike.
 *
 * @module
 */

import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { ensureNatsServer, natsServerMissing, natsServerPath, versionOf } from "./nats_install.mjs";
import { makeTestCertificates } from "./test_certificates.mjs";

export {
  ensureNatsServer,
  NATS_SERVER_VERSION,
  natsRequired,
  natsServerMissing,
  natsServerPath,
} from "./nats_install.mjs";
export { makeTestCertificates } from "./test_certificates.mjs";

/** Servers still running, SIGKILLed when this process exits so that none outlives it. */
const live = new Set();
let hooked = false;
function hookExit() {
  if (hooked) return;
  hooked = true;
  process.on("exit", () => {
    for (const { pid, dir } of live) {
      try {
        process.kill(pid, "SIGKILL");
      } catch { /* already gone */ }
      if (dir) rmSync(dir, { recursive: true, force: true });
    }
  });
}

/**
 * For when this process dies with no 'exit' event (SIGKILL, a signal it does not handle): a detached shell that
 * SIGKILLs the server `pid` and removes its temp dir once this process is gone, and ends by itself when the server
 * does. Returns what ends it at once (when the server has exited). No shell, no watchdog: the 'exit' hook alone.
 * @param {number} pid
 * @param {string} dir
 * @returns {(() => void) | undefined}
 */
function watchdog(pid, dir) {
  const script = `while kill -0 ${process.pid} 2>/dev/null && kill -0 ${pid} 2>/dev/null; do sleep 0.5; done; ` +
    `kill -0 ${process.pid} 2>/dev/null || { kill -9 ${pid} 2>/dev/null; rm -rf "$1"; }`;
  try {
    const shell = spawn("/bin/sh", ["-c", script, "nats-watchdog", dir], { stdio: "ignore", detached: true });
    shell.on("error", () => {});
    shell.unref();
    return () => {
      try {
        // Its own process group (detached): the shell and its sleep.
        if (shell.exitCode === null && shell.signalCode === null) {
          process.kill(-(/** @type {number} */ (shell.pid)), "SIGKILL");
        }
      } catch { /* gone */ }
    };
  } catch {
    return undefined;
  }
}

/**
 * @typedef {object} NatsServerOptions
 * @property {string} [token] clients must authenticate with this token (`--auth`)
 * @property {string} [user] clients must authenticate with this user and `pass`
 * @property {string} [pass]
 * @property {boolean | { caFile: string, certFile: string, keyFile: string }} [tls] TLS for clients: `true` makes a
 *   throwaway CA and server certificate (for 127.0.0.1 and localhost) in the server's temp dir; an object names files
 *   to use instead (not removed on stop)
 * @property {{ name?: string, port?: number, routes?: string[] }} [cluster] a cluster listener (on 127.0.0.1, `port`
 *   or a random one) and the routes (nats://127.0.0.1:PORT) it solicits
 * @property {string} [config] the text of a config file, passed with `-c`; the other options' flags override it
 * @property {string} [name] the server's name (`--server_name`)
 * @property {number} [port] the client port; random by default
 * @property {string[]} [args] more command-line arguments
 * @property {number} [readyTimeout] ms to wait for "Server is ready" (default 20000)
 */

/**
 * @typedef {object} NatsServer
 * @property {string} url `nats://127.0.0.1:PORT` (with `tls`, connect with the client's tls option and `caFile`)
 * @property {number} port the client port
 * @property {number} pid
 * @property {string} monitorUrl the HTTP monitoring endpoint, `http://127.0.0.1:PORT` (/varz, /routez, /connz...)
 * @property {string | undefined} clusterUrl `nats://127.0.0.1:PORT` of its route listener, with `cluster`
 * @property {string | undefined} caFile with `tls`: the CA that signed the server's certificate
 * @property {string | undefined} certFile with `tls`
 * @property {string | undefined} keyFile with `tls`
 * @property {string} dir the server's temp dir (removed on stop() and kill())
 * @property {() => string} log the server's log so far (its last 500 lines)
 * @property {Promise<{ code: number | null, signal: string | null }>} exited settles when the process exits
 * @property {() => Promise<void>} stop SIGTERM, then waits for it to exit (SIGKILL after 10 s)
 * @property {(signal?: NodeJS.Signals) => Promise<void>} kill sends `signal` (SIGKILL by default), waits for it to exit
 */

/**
 * Starts a nats-server on 127.0.0.1 with random client and monitoring ports; resolves once it accepts connections
 * (its "Server is ready", and with `cluster` its route listener). Throws natsServerMissing()'s line when there is no
 * nats-server. The process is SIGKILLed if this process exits with it still running (an 'exit' hook), and by a
 * detached watchdog shell if this process dies without one (SIGKILL).
 * @param {NatsServerOptions} [options]
 * @returns {Promise<NatsServer>}
 */
export async function startNatsServer(options = {}) {
  const path = natsServerPath();
  if (!path) throw new Error(natsServerMissing());
  const dir = mkdtempSync(join(tmpdir(), "spawnpool-nats-"));
  try {
    const args = [];
    if (options.config !== undefined) {
      const file = join(dir, "server.conf");
      writeFileSync(file, options.config);
      args.push("-c", file);
    }
    args.push("-a", "127.0.0.1", "-p", String(options.port ?? -1), "-m", "-1");
    if (options.name) args.push("--server_name", options.name);
    if (options.token !== undefined) args.push("--auth", options.token);
    if (options.user !== undefined) args.push("--user", options.user, "--pass", options.pass ?? "");
    let files;
    if (options.tls) {
      files = options.tls === true ? makeTestCertificates(join(dir, "tls")) : options.tls;
      args.push("--tls", "--tlscert", files.certFile, "--tlskey", files.keyFile);
    }
    if (options.cluster) {
      const { name, port = -1, routes = [] } = options.cluster;
      args.push("--cluster", `nats://127.0.0.1:${port}`);
      if (name) args.push("--cluster_name", name);
      if (routes.length > 0) args.push("--routes", routes.join(","));
    }
    args.push(...(options.args ?? []));
    return await launch(path, args, dir, files, options);
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
}

/**
 * @param {string} path
 * @param {string[]} args
 * @param {string} dir
 * @param {{ caFile: string, certFile: string, keyFile: string } | undefined} files
 * @param {NatsServerOptions} options
 * @returns {Promise<NatsServer>}
 */
function launch(path, args, dir, files, options) {
  hookExit();
  const child = spawn(path, args, { stdio: ["ignore", "ignore", "pipe"] });
  /** @type {string[]} */
  const lines = [];
  let partial = "";
  /** @type {Promise<{ code: number | null, signal: string | null }>} */
  const exited = new Promise((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
    child.once("error", () => resolve({ code: null, signal: null }));
  });
  const entry = { pid: child.pid, dir };
  if (child.pid !== undefined) live.add(entry);
  const guard = child.pid === undefined ? undefined : watchdog(child.pid, dir);
  const cleanup = () => {
    live.delete(entry);
    rmSync(dir, { recursive: true, force: true });
  };
  exited.then(() => {
    live.delete(entry);
    guard?.();
  });

  return new Promise((resolve, reject) => {
    let port, monitorPort, clusterPort, ready = false, settled = false;
    const fail = (/** @type {string} */ why) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try {
        child.kill("SIGKILL");
      } catch { /* gone */ }
      exited.then(() => {
        cleanup();
        reject(new Error(`nats-server ${args.join(" ")}: ${why}\n${lines.join("\n")}`));
      });
    };
    const timer = setTimeout(() => fail("not ready in time"), options.readyTimeout ?? 20_000);
    child.once("error", (error) => fail(error.message));
    exited.then(({ code, signal }) => fail(`exited (${signal ?? code}) before it was ready`));
    const check = () => {
      if (settled || !ready || port === undefined || monitorPort === undefined) return;
      if (options.cluster && clusterPort === undefined) return;
      settled = true;
      clearTimeout(timer);
      const waitExit = async () => {
        await exited;
        cleanup();
      };
      resolve({
        url: `nats://127.0.0.1:${port}`,
        port,
        pid: /** @type {number} */ (child.pid),
        monitorUrl: `http://127.0.0.1:${monitorPort}`,
        clusterUrl: clusterPort === undefined ? undefined : `nats://127.0.0.1:${clusterPort}`,
        caFile: files?.caFile,
        certFile: files?.certFile,
        keyFile: files?.keyFile,
        dir,
        log: () => lines.join("\n"),
        exited,
        stop: async () => {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill("SIGTERM");
            const timeout = setTimeout(() => child.kill("SIGKILL"), 10_000);
            await exited.finally(() => clearTimeout(timeout));
          }
          await waitExit();
        },
        kill: async (signal = "SIGKILL") => {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          await waitExit();
        },
      });
    };
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (/** @type {string} */ chunk) => {
      const parts = (partial + chunk).split("\n");
      partial = parts.pop() ?? "";
      for (const line of parts) {
        lines.push(line);
        if (lines.length > 500) lines.shift();
        let m;
        if ((m = /Listening for client connections on [^\s]*:(\d+)/.exec(line))) port = Number(m[1]);
        else if ((m = /Starting http monitor on [^\s]*:(\d+)/.exec(line))) monitorPort = Number(m[1]);
        else if ((m = /Listening for route connections on [^\s]*:(\d+)/.exec(line))) clusterPort = Number(m[1]);
        else if (/Server is ready/.test(line)) ready = true;
        else if (/\[FTL\]/.test(line) && !settled) fail(line);
      }
      check();
    });
  });
}

/**
 * @typedef {object} NatsCluster
 * @property {NatsServer[]} servers
 * @property {string[]} urls the servers' client URLs
 * @property {string} name the cluster's name
 * @property {string | undefined} caFile with `tls`: the CA every server's certificate is signed by
 * @property {() => Promise<void>} stop stops every server still running
 */

/**
 * Starts `n` nats-servers routed to each other (each solicits routes to those started before it; they gossip the rest)
 * and resolves once every server's /routez lists the other n-1. `options` apply to every server (with `tls: true` they
 * share one CA and certificate); `options.cluster.name` names the cluster (random by default).
 * @param {number} [n]
 * @param {NatsServerOptions & { timeout?: number }} [options]
 * @returns {Promise<NatsCluster>}
 */
export async function startNatsCluster(n = 3, options = {}) {
  const name = options.cluster?.name ?? `spawnpool-test-${randomBytes(4).toString("hex")}`;
  /** @type {NatsServer[]} */
  const servers = [];
  let certDir;
  const stop = async () => {
    await Promise.all(servers.map((server) => server.stop()));
    if (certDir) rmSync(certDir, { recursive: true, force: true });
  };
  try {
    let tls = options.tls;
    if (tls === true) {
      certDir = mkdtempSync(join(tmpdir(), "spawnpool-nats-tls-"));
      tls = makeTestCertificates(certDir);
    }
    for (let i = 0; i < n; i++) {
      servers.push(
        await startNatsServer({
          ...options,
          tls,
          name: `${options.name ?? name}-${i}`,
          cluster: { name, routes: servers.map((server) => /** @type {string} */ (server.clusterUrl)) },
        }),
      );
    }
    const deadline = Date.now() + (options.timeout ?? 20_000);
    for (const server of servers) {
      for (;;) {
        const routez = await (await fetch(`${server.monitorUrl}/routez`)).json();
        const peers = new Set((routez.routes ?? []).map((/** @type {{ remote_id: string }} */ r) => r.remote_id));
        if (peers.size >= n - 1) break;
        if (Date.now() > deadline) {
          throw new Error(`nats cluster ${name}: ${server.url} has ${peers.size} of ${n - 1} routes\n${server.log()}`);
        }
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    return {
      servers,
      urls: servers.map((server) => server.url),
      name,
      caFile: typeof tls === "object" ? tls.caFile : undefined,
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const path = ensureNatsServer();
  if (!path) {
    console.error(natsServerMissing());
    process.exit(1);
  }
  console.log(`${path}: nats-server ${versionOf(path)}`);
}

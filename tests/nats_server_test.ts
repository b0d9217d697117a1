/**
 * support/nats_server.mjs: the real nats-server the remote pool's tests run against. One server and a routed cluster
 * of three, reached with the NATS client: a publish/subscribe round trip (across two cluster nodes), token auth, TLS
 * with the throwaway CA, and a client reconnecting to another node when its node is SIGKILLed. Without a nats-server
 * it prints one SKIP line naming what to install and skips; where it must run (natsRequired(): CI, or
 * SPAWNPOOL_REQUIRE_NATS as .ci/run sets) it fails instead.
 *
 * @module
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { type NatsCluster, natsRequired, startNatsCluster, startNatsServer } from "../support/nats_server.mjs";
import { alive, HOST, withTimeout } from "./_helpers.ts";
import { missing, skipWithout } from "./_remote.ts";

const skip = skipWithout("tests/nats_server_test.ts");

/** The next message on `subject` as text, or a rejection after 5 s. */
async function nextMessage(nc: NatsConnection, subject: string): Promise<() => Promise<string>> {
  const sub = nc.subscribe(subject, { max: 1 });
  await nc.flush();
  return () =>
    withTimeout(
      (async () => {
        for await (const msg of sub) return msg.string();
        throw new Error(`subscription to ${subject} ended with no message`);
      })(),
      5000,
      `no message on ${subject}`,
    );
}

describe(`${HOST} host, nats-server for tests`, { skip }, () => {
  it("finds a nats-server (on CI it must)", () => {
    assert.equal(missing, undefined, missing ?? "");
  });

  it("one server: a publish/subscribe round trip, and stop() ends the process and removes its temp dir", async () => {
    const server = await startNatsServer();
    try {
      assert.match(server.url, /^nats:\/\/127\.0\.0\.1:\d+$/);
      assert.ok(server.port > 0);
      assert.ok(alive(server.pid));
      const nc = await connect({ servers: server.url });
      try {
        const received = await nextMessage(nc, "spawnpool.test");
        nc.publish("spawnpool.test", "hello");
        assert.equal(await received(), "hello");
        const varz = await (await fetch(`${server.monitorUrl}/varz`)).json();
        assert.equal(varz.port, server.port);
      } finally {
        await nc.close();
      }
    } finally {
      await server.stop();
    }
    assert.equal(alive(server.pid), false);
    assert.equal(existsSync(server.dir), false);
  });

  it("token auth: the right token connects, a wrong one fails with an authorization error", async () => {
    const server = await startNatsServer({ token: "s3cret" });
    try {
      const nc = await connect({ servers: server.url, token: "s3cret" });
      await nc.flush();
      await nc.close();
      await assert.rejects(
        connect({ servers: server.url, token: "wrong", maxReconnectAttempts: 0, reconnect: false }),
        (error: Error) => /authoriz/i.test(`${error.message} ${(error as { code?: string }).code ?? ""}`),
      );
      await assert.rejects(
        connect({ servers: server.url, maxReconnectAttempts: 0, reconnect: false }),
        (error: Error) => /authoriz/i.test(`${error.message} ${(error as { code?: string }).code ?? ""}`),
      );
    } finally {
      await server.stop();
    }
  });

  it("user and password auth", async () => {
    const server = await startNatsServer({ user: "pool", pass: "p4ss" });
    try {
      const nc = await connect({ servers: server.url, user: "pool", pass: "p4ss" });
      await nc.flush();
      await nc.close();
      await assert.rejects(connect({ servers: server.url, user: "pool", pass: "nope", reconnect: false }));
    } finally {
      await server.stop();
    }
  });

  it("TLS: a client that trusts the throwaway CA connects, and a round trip works", {
    skip: (() => {
      try {
        execFileSync("openssl", ["version"], { stdio: "ignore" });
        return false;
      } catch {
        return natsRequired() ? false : "no openssl CLI";
      }
    })(),
  }, async () => {
    const server = await startNatsServer({ tls: true });
    try {
      assert.ok(server.caFile && existsSync(server.caFile));
      const nc = await connect({ servers: server.url, tls: { caFile: server.caFile } });
      try {
        const received = await nextMessage(nc, "spawnpool.tls");
        nc.publish("spawnpool.tls", "over tls");
        assert.equal(await received(), "over tls");
        const varz = await (await fetch(`${server.monitorUrl}/varz`)).json();
        assert.equal(varz.tls_required, true);
      } finally {
        await nc.close();
      }
    } finally {
      await server.stop();
    }
  });

  it("a config file: its authorization applies", async () => {
    const server = await startNatsServer({
      config: 'authorization { users = [ { user: "a", password: "b", permissions: { publish: "ok.>" } } ] }\n',
    });
    try {
      const nc = await connect({ servers: server.url, user: "a", pass: "b" });
      await nc.flush();
      await nc.close();
      await assert.rejects(connect({ servers: server.url, user: "a", pass: "c", reconnect: false }));
    } finally {
      await server.stop();
    }
  });

  it("kill() SIGKILLs the server", async () => {
    const server = await startNatsServer();
    await server.kill();
    assert.equal(alive(server.pid), false);
    assert.deepEqual(await server.exited, { code: null, signal: "SIGKILL" });
    assert.equal(existsSync(server.dir), false);
  });

  describe("a cluster of three", () => {
    let cluster: NatsCluster;
    const connections: NatsConnection[] = [];
    before(async () => {
      cluster = await startNatsCluster(3);
    });
    after(async () => {
      await Promise.all(connections.map((nc) => nc.close()));
      await cluster?.stop();
      for (const server of cluster?.servers ?? []) assert.equal(alive(server.pid), false);
    });

    it("every node routes to the other two", async () => {
      assert.equal(cluster.servers.length, 3);
      assert.equal(new Set(cluster.urls).size, 3);
      for (const server of cluster.servers) {
        const routez = await (await fetch(`${server.monitorUrl}/routez`)).json();
        const peers = new Set(routez.routes.map((route: { remote_id: string }) => route.remote_id));
        assert.equal(peers.size, 2);
      }
    });

    it("a message published on one node reaches a subscriber on another", async () => {
      const a = await connect({ servers: cluster.urls[0] });
      connections.push(a);
      const b = await connect({ servers: cluster.urls[1] });
      connections.push(b);
      const received = await nextMessage(b, "spawnpool.cluster");
      // The subscription's interest reaches node 0 over the route a moment after node 1 has it.
      const deadline = Date.now() + 5000;
      const state = { received: false };
      const sent = (async () => {
        while (!state.received && Date.now() < deadline) {
          a.publish("spawnpool.cluster", "across");
          await a.flush();
          await new Promise((resolve) => setTimeout(resolve, 50));
        }
      })();
      const answer = await received().finally(() => (state.received = true));
      await sent;
      assert.equal(answer, "across");
    });

    it("a client whose node is SIGKILLed reconnects to another node", async () => {
      const victim = cluster.servers[2];
      const nc = await connect({ servers: victim.url, reconnectTimeWait: 100, maxReconnectAttempts: -1 });
      connections.push(nc);
      await nc.flush();
      const reconnected = (async () => {
        for await (const status of nc.status()) if (status.type === "reconnect") return status;
      })();
      await victim.kill("SIGKILL");
      assert.equal(alive(victim.pid), false);
      await withTimeout(reconnected, 15_000, "no reconnect after the node was killed");
      assert.notEqual(nc.getServer(), `127.0.0.1:${victim.port}`);
      assert.ok(cluster.servers.slice(0, 2).some((server) => nc.getServer().endsWith(`:${server.port}`)));
      const received = await nextMessage(nc, "spawnpool.after");
      nc.publish("spawnpool.after", "still here");
      assert.equal(await received(), "still here");
    });
  });
});

/**
 * A throwaway CA and server certificate for TLS tests (the nats-servers of support/nats_server.mjs), made with the
 * `openssl` CLI.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Writes a throwaway CA and a server certificate for 127.0.0.1 and localhost, signed by it, into `dir` (with the
 * `openssl` CLI; EC P-256, valid for 2 days).
 * @param {string} dir
 * @returns {{ caFile: string, certFile: string, keyFile: string }}
 */
export function makeTestCertificates(dir) {
  mkdirSync(dir, { recursive: true });
  const caFile = join(dir, "ca.pem");
  const caKey = join(dir, "ca-key.pem");
  const certFile = join(dir, "server.pem");
  const keyFile = join(dir, "server-key.pem");
  const csr = join(dir, "server.csr");
  const ext = join(dir, "server.ext");
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  const openssl = (/** @type {string[]} */ args) => {
    try {
      execFileSync("openssl", args, { stdio: ["ignore", "ignore", "pipe"] });
    } catch (error) {
      const stderr = /** @type {{ stderr?: Buffer }} */ (error).stderr?.toString().trim() ?? "";
      throw new Error(`openssl ${args[0]} failed (TLS test certificates need the openssl CLI): ${stderr || error}`);
    }
  };
  openssl([
    "req",
    "-x509",
    ...ec,
    "-keyout",
    caKey,
    "-out",
    caFile,
    "-days",
    "2",
    "-subj",
    "/CN=spawnpool test CA",
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
  ]);
  openssl(["req", ...ec, "-keyout", keyFile, "-out", csr, "-subj", "/CN=localhost"]);
  writeFileSync(
    ext,
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n" +
      "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
  );
  openssl([
    "x509",
    "-req",
    "-in",
    csr,
    "-CA",
    caFile,
    "-CAkey",
    caKey,
    "-set_serial",
    `0x${randomBytes(8).toString("hex")}`,
    "-days",
    "2",
    "-extfile",
    ext,
    "-out",
    certFile,
  ]);
  return { caFile, certFile, keyFile };
}

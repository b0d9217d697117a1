// A minimal npm registry for tests, on 127.0.0.1: what a client reads to install a package by name and version, each
// package's document (its "packument": every version's package.json with a `dist` of tarball URL, sha1 and sha512) and
// its tarballs, made from tarballs `npm pack` wrote. Nothing else: no publishing, search, login or dist-tag edits.
// Deno (NPM_CONFIG_REGISTRY) and npm (--registry) install from it. It records each request's path. A full registry such
// as verdaccio would add what these tests never use (publishing, users, storage) and a large dependency tree.
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { basename } from "node:path";
import { gunzipSync } from "node:zlib";

/**
 * Packs each package directory with `npm pack` into `dest`; returns the tarballs' paths.
 *
 * @param {string[]} dirs absolute paths (npm takes a relative `a/b` for a GitHub repository)
 * @param {string} dest
 * @returns {string[]}
 */
export function npmPack(dirs, dest) {
  const output = execFileSync("npm", ["pack", "--json", "--pack-destination", dest, ...dirs], {
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  return JSON.parse(output.slice(output.indexOf("["))).map(({ filename }) => `${dest}/${filename}`);
}

/**
 * The `package/package.json` of an npm tarball (gzipped tar, ustar headers).
 *
 * @param {Uint8Array} tarball
 * @returns {{ name: string, version: string }}
 */
export function tarballManifest(tarball) {
  const tar = gunzipSync(tarball);
  const text = (start, length) => tar.subarray(start, start + length).toString("latin1").replace(/\0.*$/s, "");
  for (let offset = 0; offset + 512 <= tar.length;) {
    const name = text(offset, 100);
    if (name === "") break; // the end-of-archive blocks
    const size = parseInt(text(offset + 124, 12).trim() || "0", 8);
    const prefix = text(offset + 345, 155);
    if ((prefix === "" ? name : `${prefix}/${name}`) === "package/package.json") {
      return JSON.parse(tar.subarray(offset + 512, offset + 512 + size).toString("utf8"));
    }
    offset += 512 + Math.ceil(size / 512) * 512;
  }
  throw new Error("no package/package.json in the tarball");
}

/**
 * @typedef {object} NpmRegistry
 * @property {string} url `http://127.0.0.1:PORT/`, what NPM_CONFIG_REGISTRY takes
 * @property {string[]} requests the paths it was asked for, decoded (`/@scope/name`, `/@scope/name/-/file.tgz`)
 * @property {() => Promise<void>} close stops it, its connections too
 */

/**
 * Starts a registry serving the packages of `tarballs` (paths), every version of a name in one document.
 *
 * @param {string[]} tarballs
 * @returns {Promise<NpmRegistry>}
 */
export async function startNpmRegistry(tarballs) {
  const documents = new Map();
  const files = new Map();
  const requests = [];
  const server = createServer((request, response) => {
    const path = decodeURIComponent(new URL(request.url ?? "/", "http://registry").pathname);
    requests.push(path);
    const file = files.get(path);
    const document = documents.get(path.slice(1));
    if (request.method === "GET" && file !== undefined) {
      response.writeHead(200, { "content-type": "application/octet-stream", "content-length": file.length });
      response.end(file);
    } else if (request.method === "GET" && document !== undefined) {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify(document));
    } else {
      response.writeHead(404, { "content-type": "application/json" });
      response.end(JSON.stringify({ error: "Not found" }));
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}/`;
  for (const tarball of tarballs) {
    const bytes = readFileSync(tarball);
    const manifest = tarballManifest(bytes);
    const path = `/${manifest.name}/-/${basename(tarball)}`;
    files.set(path, bytes);
    const document = documents.get(manifest.name) ?? { name: manifest.name, "dist-tags": {}, versions: {} };
    document.versions[manifest.version] = {
      ...manifest,
      dist: {
        tarball: new URL(path.slice(1), url).href,
        shasum: createHash("sha1").update(bytes).digest("hex"),
        integrity: `sha512-${createHash("sha512").update(bytes).digest("base64")}`,
      },
    };
    document["dist-tags"].latest = manifest.version;
    documents.set(manifest.name, document);
  }
  return {
    url,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections?.();
      }),
  };
}

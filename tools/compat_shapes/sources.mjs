// The upstream test files compat_shapes.mjs runs: where each comes from, fetched into its cache with the fixtures
// it names, and this repository's stand-ins for the helpers it imports.

import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { spawnSync } from "node:child_process";

export const SUITES = {
  deno: { title: "Deno's tests/unit/command_test.ts", file: "command_test.ts", upstream: "tests/unit/command_test.ts" },
  bun: {
    title: "Bun's test/js/bun/spawn/spawn.test.ts",
    file: "spawn.test.ts",
    upstream: "test/js/bun/spawn/spawn.test.ts",
  },
};

function git(gitDir, args) {
  const result = spawnSync("git", [`--git-dir=${gitDir}`, ...args], { maxBuffer: 1 << 28 });
  if (result.status !== 0) throw new Error(`git ${args.join(" ")}: ${result.stderr.toString().trim()}`);
  return result.stdout;
}

function gitDirOf(path) {
  const dir = resolve(path);
  return existsSync(join(dir, ".git")) ? join(dir, ".git") : dir;
}

/** Fixture files a Bun test names next to itself: `join(import.meta.dir, "name")`. */
function siblingsNamed(source) {
  return [...source.matchAll(/join\(\s*import\.meta\.dir\s*,\s*["']([^"'/]+)["']\s*\)/g)].map((m) => m[1]);
}

/**
 * Fills .cache/compat/shapes/<suite>/ from a file or a git repository (when given), then writes the
 * stand-ins; returns the path of the cached test file, or undefined when there is none.
 */
export function prepare(suite, { cache, standIns, opts }) {
  const { file, upstream } = SUITES[suite];
  const dir = join(cache, suite);
  const target = join(dir, file);
  const fromFile = opts[`${suite}-test`];
  const fromGit = opts[`${suite}-git`];
  if (fromFile || fromGit) {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { recursive: true });
    let origin;
    let read;
    if (fromFile) {
      const path = resolve(fromFile);
      origin = { from: path };
      read = (name) => {
        const sibling = join(dirname(path), name);
        return existsSync(sibling) ? readFileSync(sibling) : undefined;
      };
      writeFileSync(target, readFileSync(path));
    } else {
      const gitDir = gitDirOf(fromGit);
      const commit = git(gitDir, ["rev-parse", `${opts[`${suite}-ref`]}^{commit}`]).toString().trim();
      origin = { from: resolve(fromGit), ref: opts[`${suite}-ref`], commit };
      read = (name) => {
        try {
          return git(gitDir, ["show", `${commit}:${dirname(upstream)}/${name}`]);
        } catch {
          return undefined;
        }
      };
      writeFileSync(target, git(gitDir, ["show", `${commit}:${upstream}`]));
    }
    const source = readFileSync(target, "utf8");
    origin.sha256 = createHash("sha256").update(source).digest("hex");
    if (suite === "bun") {
      origin.fixtures = {};
      for (const name of siblingsNamed(source)) {
        const bytes = read(name);
        if (bytes) writeFileSync(join(dir, name), bytes);
        origin.fixtures[name] = bytes ? "copied" : "missing";
      }
    }
    writeFileSync(join(dir, "SOURCE.json"), JSON.stringify(origin, null, 2) + "\n");
  }
  if (!existsSync(target)) return undefined;
  // The stand-ins, fresh on every run (they are this repository's code).
  if (suite === "deno") copyFileSync(join(standIns, "test_util.ts"), join(dir, "test_util.ts"));
  else {
    const harness = join(dir, "node_modules", "harness");
    mkdirSync(harness, { recursive: true });
    copyFileSync(join(standIns, "harness.ts"), join(harness, "index.ts"));
    writeFileSync(join(harness, "package.json"), '{ "name": "harness", "type": "module", "main": "index.ts" }\n');
  }
  return target;
}

export function sourceNote(suite, cache) {
  const path = join(cache, suite, "SOURCE.json");
  if (!existsSync(path)) return "";
  const origin = JSON.parse(readFileSync(path, "utf8"));
  const where = origin.commit ? `${origin.from} at ${origin.ref} (${origin.commit})` : origin.from;
  return `${where}, sha256 ${origin.sha256.slice(0, 16)}`;
}

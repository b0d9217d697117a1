/**
 * Every relative link in the README, CHANGELOG, CONTRIBUTING, docs/ and bench/README.md reaches a file of the checkout, and every
 * `#anchor` a heading of its file (GitHub's anchors: lower case, punctuation dropped, spaces as dashes).
 */

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url).href);
const pages = [
  "README.md",
  "CHANGELOG.md",
  "CONTRIBUTING.md",
  "bench/README.md",
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`),
];

/** The anchors of a Markdown file's headings, as GitHub makes them. */
function anchors(file: string): Set<string> {
  const text = readFileSync(file, "utf8").replace(/^```[\s\S]*?^```$/gm, "");
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const [, heading] of text.matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const slug = heading.toLowerCase().replace(/[`*_]/g, "").replace(/[^\p{L}\p{N} -]/gu, "").replace(/ /g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

describe("the docs' relative links", () => {
  for (const page of pages) {
    it(`${page}: every relative link and anchor resolves`, () => {
      const text = readFileSync(join(root, page), "utf8").replace(/^```[\s\S]*?^```$/gm, "");
      const broken: string[] = [];
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/i.test(target)) continue; // http:, https:, mailto:
        const [path, anchor] = target.split("#");
        const file = path === "" ? join(root, page) : join(root, dirname(page), path);
        if (!existsSync(file)) {
          broken.push(`${target}: no ${relative(root, file)}`);
          continue;
        }
        if (anchor !== undefined && file.endsWith(".md") && !anchors(file).has(anchor)) {
          broken.push(`${target}: no heading #${anchor} in ${relative(root, file)}`);
        }
      }
      assert.deepEqual(broken, []);
    });
  }
});

describe("docs/how-it-works.md's test map", () => {
  it("its Tests section names every test file (a `{a,b}` group names each of its members)", () => {
    const text = readFileSync(join(root, "docs/how-it-works.md"), "utf8");
    const section = text.slice(text.indexOf("\n## Tests\n"));
    const named = new Set<string>();
    for (const [, stem, group, tail] of section.matchAll(/(\w*)\{([\w,]+)\}(\w*_test\.ts)/g)) {
      for (const part of group.split(",")) named.add(`${stem}${part}${tail}`);
    }
    for (const [name] of section.matchAll(/\w+_test\.ts/g)) named.add(name);
    const files = readdirSync(join(root, "tests")).filter((name) => name.endsWith("_test.ts"));
    assert.deepEqual(files.filter((name) => !named.has(name)), [], "add these to the Tests section");
  });
});

// The JUnit XML reports of `deno test` and `bun test`, as compat_shapes.mjs reads them.

export const unescapeXml = (s) =>
  s.replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'")
    .replace(/&#(\d+);/g, (_, n) => String.fromCharCode(Number(n))).replace(/&amp;/g, "&");

export const attr = (tag, name) => {
  const m = tag.match(new RegExp(`\\s${name}="([^"]*)"`));
  return m ? unescapeXml(m[1]) : undefined;
};

/**
 * The testcases of a JUnit report, in order: { name (with the enclosing suites' names, " > " between),
 * line, status "pass" | "fail" | "skip", error (the first line of the failure) }.
 */
export function parseJunit(xml) {
  const cases = [];
  const suites = [];
  const tags = /<(\/?)(testsuites|testsuite|testcase|failure|error|skipped)\b([^>]*?)(\/?)>/g;
  let current;
  for (const m of xml.matchAll(tags)) {
    const [, end, tag, attrs, selfClosing] = m;
    if (tag === "testsuite") {
      if (end) suites.pop();
      else if (!selfClosing) suites.push(attr(attrs, "name"));
    } else if (tag === "testcase") {
      if (end) current = undefined;
      else {
        // The outermost testsuite is the file.
        const path = [...suites.slice(1), attr(attrs, "name")];
        current = { name: path.join(" > "), line: Number(attr(attrs, "line")), status: "pass", error: "" };
        cases.push(current);
        if (selfClosing) current = undefined;
      }
    } else if (current && !end && (tag === "failure" || tag === "error")) {
      current.status = "fail";
      const after = xml.slice(m.index + m[0].length);
      const text = selfClosing ? "" : unescapeXml(after.slice(0, after.indexOf(`</${tag}>`)));
      current.error ||= firstLine(text) || attr(attrs, "message") || tag;
      // What a matcher says under its first line ("Expected substring: ...", "Received function did not
      // throw"): up to two more lines, stack frames and source excerpts aside.
      current.detail ??= plain(text).split("\n").slice(1).map((l) => l.trim())
        .filter((l) => l && !/^(at |\^|\d+ \||throw |const |- |\+ Received)/.test(l)).slice(0, 2).join(" / ")
        .slice(0, 160);
    } else if (current && !end && tag === "skipped") current.status = "skip";
  }
  return cases;
}

// deno-lint-ignore no-control-regex
export const plain = (s) => s.replace(/\x1b\[[0-9;]*m/g, "");
export const firstLine = (s) => plain(s).split("\n").map((l) => l.trim()).find(Boolean) ?? "";

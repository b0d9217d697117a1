// How compat_shapes.mjs reads an upstream test file: its code without comments and strings, each test call with its
// line, name and body, and which tests are excluded (and why).

/**
 * The source with the contents of strings, template literals (but not their `${}` expressions), comments
 * and regular expression literals blanked out, offsets and line breaks kept: code to search and to match
 * brackets in, where code inside a string (a fixture a child process runs) does not count.
 */
export function codeOnly(src) {
  const out = src.split("");
  const blank = (from, to) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  const templates = []; // brace depth at which each open `${` returns to its template
  let depth = 0;
  let last = ""; // the last significant code character, to tell a regex from a division
  let i = 0;
  const template = () => {
    // at the first character inside a template literal; stops after its closing ` or at a `${`
    const start = i;
    while (i < src.length) {
      if (src[i] === "\\") i += 2;
      else if (src[i] === "`") {
        blank(start, i);
        i++;
        last = "`";
        return;
      } else if (src[i] === "$" && src[i + 1] === "{") {
        blank(start, i);
        i += 2;
        templates.push(depth);
        depth++;
        last = "{";
        return;
      } else i++;
    }
  };
  while (i < src.length) {
    const c = src[i];
    if (c === "/" && src[i + 1] === "/") {
      const end = src.indexOf("\n", i);
      blank(i, end < 0 ? src.length : end);
      i = end < 0 ? src.length : end;
    } else if (c === "/" && src[i + 1] === "*") {
      const end = src.indexOf("*/", i + 2) + 2;
      blank(i, end);
      i = end;
    } else if (c === '"' || c === "'") {
      const start = i++;
      while (i < src.length && src[i] !== c && src[i] !== "\n") i += src[i] === "\\" ? 2 : 1;
      blank(start + 1, i);
      i++;
      last = c;
    } else if (c === "`") {
      i++;
      template();
    } else if (c === "/" && (last === "" || "(,=:[!&|?{};+-*%<>~^".includes(last))) {
      const start = i++;
      let inClass = false;
      while (i < src.length && src[i] !== "\n" && (inClass || src[i] !== "/")) {
        if (src[i] === "\\") i++;
        else if (src[i] === "[") inClass = true;
        else if (src[i] === "]") inClass = false;
        i++;
      }
      blank(start + 1, i);
      i++;
      last = "/";
    } else {
      if (c === "{") depth++;
      else if (c === "}") {
        depth--;
        if (templates.length > 0 && templates[templates.length - 1] === depth) {
          templates.pop();
          i++;
          template();
          continue;
        }
      }
      if (!/\s/.test(c)) last = c;
      i++;
    }
  }
  return out.join("");
}

/** The offset of the bracket closing the one at `open`, in code from codeOnly(). */
export function closing(code, open) {
  let depth = 0;
  for (let i = open; i < code.length; i++) {
    if ("([{".includes(code[i])) depth++;
    else if (")]}".includes(code[i]) && --depth === 0) return i;
  }
  return code.length;
}

export const lineAt = (src, offset) => src.slice(0, offset).split("\n").length;

/** Each test call of the file: its line, its source, its code (codeOnly) and the name given literally. */
export function testCalls(src, suite) {
  const code = codeOnly(src);
  const pattern = suite === "deno"
    ? /\bDeno\.test\s*\(/g
    : /(?<![\w$.])(?:it|test)(?:\.\w+(?:\((?:[^()]|\([^()]*\))*\))?)*\s*\(/g;
  const calls = [];
  for (const match of code.matchAll(pattern)) {
    const open = match.index + match[0].length - 1;
    const close = closing(code, open);
    const body = code.slice(open, close + 1);
    const text = src.slice(open, close + 1);
    const literal = text.match(/^\(\s*(["'])((?:\\.|(?!\1).)*)\1/);
    const named = body.match(/\bfunction\s+([\w$]+)\s*\(/);
    calls.push({
      line: lineAt(src, match.index),
      name: literal ? literal[2] : named ? named[1] : undefined,
      body,
    });
  }
  return calls;
}

/** The test call a reported line belongs to: the last one starting at or before it. */
export function callAt(calls, line) {
  let found;
  for (const call of calls) if (call.line <= line) found = call;
  return found;
}

export function exclusionOf(suite, call) {
  if (!call) return undefined;
  if (suite === "deno") {
    if (/\.outputSync\s*\(/.test(call.body)) return "calls outputSync() (spawnpool's throws by design)";
    if (!/\bDeno\.Command\b/.test(call.body)) {
      return "never constructs Deno.Command (Deno.spawn / Deno.spawnAndWait[Sync], untouched by the swap)";
    }
    return undefined;
  }
  if (/\bspawnSync\s*\(/.test(call.body) && !/(?<![\w$])spawn\s*\(/.test(call.body)) {
    return "calls spawnSync only (Bun.spawnSync stays native)";
  }
  return undefined;
}

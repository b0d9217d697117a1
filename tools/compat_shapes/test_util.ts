/**
 * A stand-in for Deno's `tests/unit/test_util.ts`, for `npm run compat:shapes` (tools/compat_shapes.mjs).
 * Deno's file re-exports `@std/assert`, which this machine cannot fetch (JSR is unreachable); this module
 * provides the assertions `tests/unit/command_test.ts` imports, written here after `@std/assert`'s documented
 * behaviour: the same checks, the same outcomes (what throws, what passes), an `AssertionError` with a
 * message of the same shape (without `@std`'s coloured diffs). The runner copies it next to the cached
 * upstream test file, where that file's `import ... from "./test_util.ts"` finds it.
 *
 * @module
 */

/** Thrown by every failed assertion, as `@std/assert`'s. */
export class AssertionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AssertionError";
  }
}

function sameConstructor(a: object, b: object): boolean {
  return a.constructor === b.constructor ||
    (a.constructor === Object && !b.constructor) ||
    (!a.constructor && b.constructor === Object);
}

/**
 * Deep equality as `@std/assert`'s `equal`: numbers by value (NaN equals NaN), RegExp and URL by their
 * string, Dates by time, objects only of the same constructor, with the same own enumerable keys (and
 * symbols) holding deeply equal values; Maps and Sets by their entries. Typed arrays are objects whose
 * index keys are compared, so a `Buffer` does not equal a `Uint8Array`.
 */
export function equal(c: unknown, d: unknown): boolean {
  const seen = new Map<unknown, unknown>();
  const compare = (a: unknown, b: unknown): boolean => {
    if (a && b && ((a instanceof RegExp && b instanceof RegExp) || (a instanceof URL && b instanceof URL))) {
      return String(a) === String(b);
    }
    if (a instanceof Date && b instanceof Date) {
      const [x, y] = [a.getTime(), b.getTime()];
      return (Number.isNaN(x) && Number.isNaN(y)) || x === y;
    }
    if (typeof a === "number" && typeof b === "number") return (Number.isNaN(a) && Number.isNaN(b)) || a === b;
    if (Object.is(a, b)) return true;
    if (!a || typeof a !== "object" || !b || typeof b !== "object") return false;
    if (!sameConstructor(a, b)) return false;
    if (a instanceof WeakMap || b instanceof WeakMap) {
      if (!(a instanceof WeakMap && b instanceof WeakMap)) return false;
      throw new TypeError("cannot compare WeakMap instances");
    }
    if (a instanceof WeakSet || b instanceof WeakSet) {
      if (!(a instanceof WeakSet && b instanceof WeakSet)) return false;
      throw new TypeError("cannot compare WeakSet instances");
    }
    if (a instanceof WeakRef || b instanceof WeakRef) {
      if (!(a instanceof WeakRef && b instanceof WeakRef)) return false;
      return compare(a.deref(), b.deref());
    }
    if (seen.get(a) === b) return true;
    if (Object.keys(a).length !== Object.keys(b).length) return false;
    seen.set(a, b);
    if ((a instanceof Map || a instanceof Set) && (b instanceof Map || b instanceof Set)) {
      if (a.size !== b.size) return false;
      let unmatched = a.size;
      for (const [aKey, aValue] of a.entries()) {
        for (const [bKey, bValue] of b.entries()) {
          if (compare(aKey, bKey) && compare(aValue, bValue)) {
            unmatched--;
            break;
          }
        }
      }
      return unmatched === 0;
    }
    const merged = { ...a, ...b } as Record<PropertyKey, unknown>;
    const x = a as Record<PropertyKey, unknown>;
    const y = b as Record<PropertyKey, unknown>;
    for (const key of [...Object.getOwnPropertyNames(merged), ...Object.getOwnPropertySymbols(merged)]) {
      if (!compare(x[key], y[key])) return false;
      if ((key in x) !== (key in y)) return false;
    }
    return true;
  };
  return compare(c, d);
}

function show(value: unknown): string {
  try {
    return Deno.inspect(value, { depth: 6, sorted: true, trailingComma: true, compact: false, iterableLimit: 200 });
  } catch {
    return String(value);
  }
}

/** Throws unless `expr` is truthy. */
export function assert(expr: unknown, msg = ""): asserts expr {
  if (!expr) throw new AssertionError(msg);
}

/** Throws unless `actual` deeply equals `expected` (see {@link equal}). */
export function assertEquals<T>(actual: T, expected: T, msg?: string): void {
  if (equal(actual, expected)) return;
  const suffix = msg ? `: ${msg}` : ".";
  throw new AssertionError(
    `Values are not equal${suffix}\n\n    actual: ${show(actual)}\n  expected: ${show(expected)}`,
  );
}

/** Throws unless `actual` contains `expected`. */
export function assertStringIncludes(actual: string, expected: string, msg?: string): void {
  if (actual.includes(expected)) return;
  const suffix = msg ? `: ${msg}` : ".";
  throw new AssertionError(`Expected actual: "${actual}" to contain: "${expected}"${suffix}`);
}

type ErrorClass<E extends Error = Error> = abstract new (...args: never[]) => E;

/** Throws unless `error` is an Error (of `ErrorClass`, with `msgIncludes` in its message, when given). */
export function assertIsError(error: unknown, ErrorClass?: ErrorClass, msgIncludes?: string, msg?: string): void {
  const suffix = msg ? `: ${msg}` : ".";
  if (!(error instanceof Error)) throw new AssertionError(`Expected "error" to be an Error object${suffix}`);
  if (ErrorClass && !(error instanceof ErrorClass)) {
    throw new AssertionError(
      `Expected error to be instance of "${ErrorClass.name}", but was "${error.constructor?.name}"${suffix}`,
    );
  }
  // deno-lint-ignore no-control-regex
  const message = error.message.replace(/\x1b\[[0-9;]*m/g, "");
  if (msgIncludes !== undefined && !message.includes(msgIncludes)) {
    throw new AssertionError(
      `Expected error message to include ${JSON.stringify(msgIncludes)}, but got ${JSON.stringify(message)}${suffix}`,
    );
  }
}

function errorArgs(
  errorClassOrMsg?: ErrorClass | string,
  msgIncludesOrMsg?: string,
  msg?: string,
): { ErrorClass?: ErrorClass; msgIncludes?: string; msg?: string } {
  if (typeof errorClassOrMsg === "function") return { ErrorClass: errorClassOrMsg, msgIncludes: msgIncludesOrMsg, msg };
  return { msg: errorClassOrMsg };
}

/**
 * Calls `fn` and throws unless it throws synchronously (an Error of `ErrorClass` with `msgIncludes` in its
 * message, when given). A returned promise, rejected or not, is not a throw. Returns what was thrown.
 */
export function assertThrows(
  fn: () => unknown,
  errorClassOrMsg?: ErrorClass | string,
  msgIncludesOrMsg?: string,
  msg?: string,
): unknown {
  const args = errorArgs(errorClassOrMsg, msgIncludesOrMsg, msg);
  const suffix = args.msg ? `: ${args.msg}` : ".";
  try {
    fn();
  } catch (error) {
    if (args.ErrorClass) {
      if (!(error instanceof Error)) throw new AssertionError(`A non-Error object was thrown${suffix}`);
      assertIsError(error, args.ErrorClass, args.msgIncludes, args.msg);
    }
    return error;
  }
  throw new AssertionError(`Expected function to throw${suffix}`);
}

/**
 * Calls `fn`, which must return a promise, and throws unless that promise rejects (with an Error of
 * `ErrorClass` with `msgIncludes` in its message, when given). A synchronous throw from `fn` fails, as in
 * `@std/assert`: "Function throws when expected to reject". Resolves to the rejection reason.
 */
export async function assertRejects(
  fn: () => PromiseLike<unknown>,
  errorClassOrMsg?: ErrorClass | string,
  msgIncludesOrMsg?: string,
  msg?: string,
): Promise<unknown> {
  const args = errorArgs(errorClassOrMsg, msgIncludesOrMsg, msg);
  const suffix = args.msg ? `: ${args.msg}` : ".";
  let returned = false;
  try {
    const result = fn();
    if (!result || typeof result.then !== "function") throw new Error();
    returned = true;
    await result;
  } catch (error) {
    if (!returned) throw new AssertionError(`Function throws when expected to reject${suffix}`);
    if (args.ErrorClass) {
      if (!(error instanceof Error)) throw new AssertionError(`A non-Error object was rejected${suffix}`);
      assertIsError(error, args.ErrorClass, args.msgIncludes, args.msg);
    }
    return error;
  }
  throw new AssertionError(`Expected function to reject${suffix}`);
}

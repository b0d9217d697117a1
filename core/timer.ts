/**
 * `setTimeout` as a function that returns what cancels it: the default timer where a runtime offers no cheaper one
 * (`Adapter.unrefTimer`).
 *
 * @module
 */

/** Calls `callback` after `ms` unless the returned function is called first. */
export function setTimer(ms: number, callback: () => void): () => void {
  const timer = setTimeout(callback, ms);
  return () => clearTimeout(timer);
}

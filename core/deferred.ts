/**
 * A promise with its resolve and reject at hand.
 *
 * @module
 */

/** A promise and the functions that settle it; a rejection nobody looks at is not reported as unhandled. */
export class Deferred<T> {
  promise: Promise<T>;
  resolve!: (value: T) => void;
  reject!: (error: unknown) => void;
  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    // Callers that never look at a promise must not see an unhandled rejection.
    this.promise.catch(() => {});
  }
}

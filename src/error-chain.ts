import { isGatewayError } from "./errors.js";

/** How many links below the error it was given the walk reads: a cause's cause…, up to this. */
const deepestLink = 4;

/**
 * Each error a fault may hide in, the error itself first: its cause, its cause's cause…, and an
 * AggregateError's errors (Node's connect to several addresses fails with one of one error per
 * address), each before its own cause. The rules every classifier shares (isDatabaseUnavailable,
 * refusesEveryRow, the provider call's isProviderTimeout and responseTooLargeFailure), so they
 * never disagree on where to look:
 * - a value that is not an Error ends the walk there;
 * - a GatewayError already carries its answer (a usage report the database cancelled, whose cause
 *   is the cancellation): neither it nor anything under it is yielded, so it is never turned into
 *   another answer;
 * - no more than `deepestLink` links deep, so a cause that cycles back ends too.
 */
export function* errorChain(error: unknown, depth = 0): Generator<Error> {
  if (!(error instanceof Error) || depth > deepestLink || isGatewayError(error)) return;
  yield error;
  if (error instanceof AggregateError) for (const each of error.errors) yield* errorChain(each, depth + 1);
  yield* errorChain(error.cause, depth + 1);
}

/** The first error of `error`'s chain (errorChain) that `test` picks. */
export function firstInChain<T extends Error>(
  error: unknown,
  test: (each: Error) => each is T,
): T | undefined;
export function firstInChain(error: unknown, test: (each: Error) => boolean): Error | undefined;
export function firstInChain(error: unknown, test: (each: Error) => boolean): Error | undefined {
  for (const each of errorChain(error)) if (test(each)) return each;
  return undefined;
}

/** True when `test` holds for an error of `error`'s chain (errorChain). */
export function someInChain(error: unknown, test: (each: Error) => boolean): boolean {
  return firstInChain(error, test) !== undefined;
}

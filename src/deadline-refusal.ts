import type { ServerResponse } from "node:http";
import { GatewayError } from "./errors.js";

/**
 * The event the connection drain emits on a response whose answer has not begun at the shutdown's
 * deadline (`refuseAtDeadline`). A symbol: no other code emits it by accident.
 */
const refusal = Symbol("refused at the shutdown deadline");

export type RefusalListener = (refusal: GatewayError) => void;

/** The responses the deadline refused, each with its refusal (`refusalOf`). */
const refusals = new WeakMap<ServerResponse, GatewayError>();

/**
 * At the shutdown's deadline, a call whose answer has not begun is refused, not cut without an
 * answer: the work that waits for it (a provider call) listens on its response (`onRefusal`),
 * stops, and fails with the refusal, which its route records in the usage row and answers (503,
 * Retry-After; the drain has made every answer say `Connection: close`). A request body still
 * arriving is such work too (`readBody`). Returns whether anything listened: a response nothing
 * answers for is cut as before.
 */
export function refuseAtDeadline(response: ServerResponse): boolean {
  const error = deadlineRefusal();
  refusals.set(response, error);
  return response.emit(refusal, error);
}

/**
 * The error of a call the shutdown stopped before its answer began (503, Retry-After: 1); also what
 * the work the gateway's close stops fails with (a credential read cancelled on PostgreSQL).
 */
export function deadlineRefusal(): GatewayError {
  return new GatewayError(
    "SERVICE_UNAVAILABLE",
    "The gateway is shutting down and stopped this call before its answer began; retry it",
    { headers: { "retry-after": "1" }, details: { retryable: true } },
  );
}

/** The refusal of `response`'s call, if the deadline refused it: work that begins after fails with it. */
export function refusalOf(response: ServerResponse): GatewayError | undefined {
  return refusals.get(response);
}

/**
 * Calls `listener` should the shutdown's deadline refuse `response`'s call, until `offRefusal`
 * (`on`, not `once`: the drain refuses a response once, and a proxied call saves `once`'s wrapper).
 */
export function onRefusal(response: ServerResponse, listener: RefusalListener): void {
  response.on(refusal, listener);
}

export function offRefusal(response: ServerResponse, listener: RefusalListener): void {
  response.off(refusal, listener);
}

/**
 * `work`, unless the shutdown's deadline refuses `response`'s call first: then its refusal, which
 * the route answers (503), `work` left to end on its own with nothing made of it. For a route's wait
 * that nothing else stops at the deadline and that changes nothing the call must undo (a throttle's
 * count in Redis, a health check's ping, a lookup), or whose own continuation checks for the refusal
 * (`refused`, called with it at once, before the rejection: admission's wait); one listener for the
 * wait's length.
 */
export function untilRefused<T>(
  response: ServerResponse,
  work: Promise<T>,
  refused?: RefusalListener,
): Promise<T> {
  const already = refusals.get(response);
  if (already !== undefined) {
    work.catch(() => {});
    refused?.(already);
    return Promise.reject(already);
  }
  return new Promise((resolve, reject) => {
    const onRefused: RefusalListener = (refusal) => {
      refused?.(refusal);
      reject(refusal);
    };
    response.on(refusal, onRefused);
    work.then(
      (value) => {
        response.off(refusal, onRefused);
        resolve(value);
      },
      (error: unknown) => {
        response.off(refusal, onRefused);
        reject(error);
      },
    );
  });
}

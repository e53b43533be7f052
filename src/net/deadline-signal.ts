/**
 * A signal that aborts once `timeoutMs` have passed (its reason a `TimeoutError` DOMException, as
 * `AbortSignal.timeout`'s) or when `signal` aborts (with its reason), and `clear`, which ends the
 * timer and the tie to `signal` once the work is done (call it in a `finally`).
 *
 * Not `AbortSignal.any([AbortSignal.timeout(ms), signal])`: on Node 20 `any` holds its sources
 * weakly, and the timeout's timer holds its signal weakly too, so once the caller no longer refers
 * to the timeout's signal (an optimized async function keeps only the locals it reads later; an
 * inline `AbortSignal.timeout(ms)` at once), a garbage collection takes it with its timer and the
 * deadline never comes (nodejs/node#57736): a PDF server sending a byte now and then held its fetch
 * until the client gave up. This timer holds its controller.
 */
export function deadlineSignal(
  timeoutMs: number,
  signal?: AbortSignal,
): { signal: AbortSignal; clear(): void } {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")),
    timeoutMs,
  );
  // As AbortSignal.timeout's: a deadline alone does not keep the process alive.
  timer.unref();
  const follow = () => controller.abort(signal?.reason);
  if (signal?.aborted) follow();
  else signal?.addEventListener("abort", follow, { once: true });
  return {
    signal: controller.signal,
    clear() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", follow);
    },
  };
}

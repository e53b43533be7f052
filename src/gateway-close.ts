import type { SuppressionWindowsRegistry } from "./observability/suppression-windows.js";
import type { UsageRecorder } from "./usage/usage-recorder.js";

/**
 * How long past its deadline (SLUICE_SHUTDOWN_TIMEOUT_MS after SIGTERM) the shutdown may take: half
 * for the usage rows of the calls the deadline cut short and the usage flush, half for closing the
 * pools and connections. A whole shutdown takes at most SLUICE_SHUTDOWN_TIMEOUT_MS plus this.
 */
export const shutdownMarginMs = 1000;

/**
 * The gateway's own shutdown, after the server drained its connections (until `deadline`, epoch
 * ms). Calls cut short at the deadline write their rows as they wind down (an aborted stream, a
 * compressed answer read after its response closed): they are waited for, then the queue is
 * flushed, until half the margin past it; a write still unanswered then (a database that hangs) is
 * given up on, and the rows still queued are dropped, logged and counted. Closing gets the other
 * half: a connection that hangs (a stalled PostgreSQL) must not hold the process past its
 * shutdown time. `hurry` aborted (a second signal, come after the drain ended) brings the deadline
 * forward to that moment, as a second signal during the drain does: a database that cannot take
 * the rows holds the process half the margin from then, not until the shutdown timeout's end.
 * Last, the log lines coalesced in windows still open (provider failures, vault reads, usage drops
 * and refusals, DeviceCheck warnings) write their counts once, before the process exits and its log
 * is flushed: their timers would not run, and the counts would be lost.
 */
export async function closeGateway(
  deadline: number,
  parts: {
    /** Admitted calls whose usage row is not written yet. */
    unrecorded: () => number;
    recorder: UsageRecorder;
    /** Closes the upstream pools, the limiter, Redis and the database. */
    closeConnections: () => Promise<void>;
    /** Every suppression window of the gateway's logs. */
    suppressionWindows: Pick<SuppressionWindowsRegistry, "flush">;
  },
  hurry?: AbortSignal,
): Promise<void> {
  let end = deadline;
  const hurried = () => {
    end = Math.min(end, Date.now());
  };
  if (hurry?.aborted) hurried();
  else hurry?.addEventListener("abort", hurried, { once: true });
  try {
    const left = () => Math.max(0, end + shutdownMarginMs / 2 - Date.now());
    while (parts.unrecorded() > 0 && left() > 0) await new Promise((resolve) => setTimeout(resolve, 10));
    // In slices, each a try of the database or a wait for the write under way, so that a hurry is
    // heeded within one.
    do await parts.recorder.flush(Math.min(left(), flushSliceMs));
    while (parts.recorder.depth() > 0 && left() > 0);
    await parts.recorder.stop(left());
    await Promise.race([parts.closeConnections(), timerTo(() => end + shutdownMarginMs, hurry)]);
  } finally {
    hurry?.removeEventListener("abort", hurried);
    parts.suppressionWindows.flush();
  }
}

/** How long one flush of the close runs before the close looks at its deadline again. */
const flushSliceMs = 100;

/**
 * Resolves at `by()` (epoch ms), read again when `hurry` is aborted (which may bring it forward).
 * Unref'd: it holds no process open.
 */
function timerTo(by: () => number, hurry: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    const arm = () => setTimeout(resolve, Math.max(0, by() - Date.now())).unref();
    let timer = arm();
    hurry?.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        timer = arm();
      },
      { once: true },
    );
  });
}

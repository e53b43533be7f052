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
 * shutdown time. Last, the log lines coalesced in windows still open (provider failures, vault
 * reads, usage drops and refusals, DeviceCheck warnings) write their counts once, before the
 * process exits and its log is flushed: their timers would not run, and the counts would be lost.
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
): Promise<void> {
  try {
    const rowsBy = deadline + shutdownMarginMs / 2;
    const left = () => Math.max(0, rowsBy - Date.now());
    while (parts.unrecorded() > 0 && left() > 0) await new Promise((resolve) => setTimeout(resolve, 10));
    await parts.recorder.flush(left());
    await parts.recorder.stop(left());
    const closedBy = deadline + shutdownMarginMs;
    await Promise.race([
      parts.closeConnections(),
      new Promise((resolve) => setTimeout(resolve, Math.max(0, closedBy - Date.now())).unref()),
    ]);
  } finally {
    parts.suppressionWindows.flush();
  }
}

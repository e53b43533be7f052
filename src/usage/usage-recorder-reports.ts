import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import {
  createSuppressionWindows,
  type SuppressionWindowsRegistry,
} from "../observability/suppression-windows.js";
import { type RefusalReason, refusalKey, refusalReason, type UsageRecorderDeps } from "./usage-recorder.js";

/** Distinct reasons for failed usage writes logged per outage; the attempts are all counted. */
const maxFailureReasons = 20;

/** Reasons rows were refused for whose windows are open at once; beyond them, they close at once. */
const maxRefusalReasons = 100;

export interface UsageRecorderReportOptions {
  /**
   * Rows dropped from a full queue, and rows refused for one reason, are logged once per window, with
   * the count (default 10 s).
   */
  dropWindowMs?: number;
  /** The gateway's, whose close writes the counts of the windows still open (no row dropped then). */
  registry?: SuppressionWindowsRegistry;
}

/**
 * What the usage recorder reports, as metrics and log lines: its queue depth, rows dropped (queue
 * full, shutdown) or refused by the database, an outage of usage writes and its end (the
 * `database` degraded gauge), and refusals coalesced into another row (a metric only).
 */
export function usageRecorderReports(
  metrics: Metrics,
  logger: Logger,
  { dropWindowMs = 10_000, registry }: UsageRecorderReportOptions = {},
): Pick<
  UsageRecorderDeps,
  "onQueueDepth" | "onDropped" | "onRefused" | "onWriteFailure" | "onRecovered" | "onCoalesced"
> {
  // A full queue drops every request's row while the outage lasts: one line per row would drown
  // the log. The first drop is logged at once; the rest of its window are counted and logged when
  // it ends.
  const fullQueue = createSuppressionWindows<undefined>({
    windowMs: dropWindowMs,
    registry,
    onSuppressed: (_, count) =>
      logger.error({ count, windowMs: dropWindowMs }, "usage queue full: more usage rows dropped"),
  });
  // Rows refused for the same reason (a bad value every row carries, a policy refusing a project's
  // rows) would each write a line: the first of a reason's window is logged with its request id, the
  // rest counted and logged, with the reason, when the window ends.
  const refusedRows = createSuppressionWindows<RefusalReason>({
    windowMs: dropWindowMs,
    maxKeys: maxRefusalReasons,
    registry,
    onSuppressed: ({ code, reason }, count) =>
      logger.error(
        { count, code, reason, windowMs: dropWindowMs },
        "usage rows refused by the database: more dropped",
      ),
  });
  // The reasons of the outage's failed writes logged so far, and its failed attempts.
  const failureReasons = new Set<string>();
  let failedAttempts = 0;
  return {
    onQueueDepth: metrics.setUsageQueueDepth,
    onDropped: (count, reason) => {
      metrics.countUsageRowsDropped(count);
      if (reason === "shutdown") {
        // The last windows are written now: their timers would not run before the exit.
        fullQueue.flush();
        refusedRows.flush();
        logger.error({ count }, "usage rows not written before shutdown: dropped");
      } else if (reason === "refusals-evicted") {
        // One line per pass: a pass takes every refusal's row queued, so the next needs a full queue again.
        logger.warn(
          { count },
          "usage queue full: rows of refused requests dropped to keep the rows of calls",
        );
      } else if (fullQueue.open("queue-full", undefined, count))
        logger.error({ count }, "usage queue full: usage rows dropped");
    },
    onRefused: (row, error) => {
      metrics.countUsageRowsDropped(1);
      const refusal = refusalReason(error);
      if (refusedRows.open(refusalKey(refusal), refusal))
        logger.error({ err: error, requestId: row.request_id }, "usage row refused by the database: dropped");
    },
    onWriteFailure: (error) => {
      metrics.countUsageWriteFailure();
      metrics.setDegraded("database", true, "usage-writes");
      // Retried every 5 s at most while the outage lasts (every 250 ms while rows are dropped from a
      // full queue): each reason is logged once per outage.
      failedAttempts++;
      const reason = error instanceof Error ? error.message : String(error);
      if (failureReasons.has(reason) || failureReasons.size >= maxFailureReasons) return;
      failureReasons.add(reason);
      logger.warn({ err: error }, "usage batch not written; it stays queued and is retried");
    },
    // No log line: a client ignoring Retry-After would write one per refusal, what the rows were kept from.
    onCoalesced: (row) => metrics.countRefusalCoalesced(row.error_code ?? "none"),
    onRecovered: () => {
      metrics.setDegraded("database", false, "usage-writes");
      logger.info({ failedAttempts }, "usage writes recovered");
      failedAttempts = 0;
      failureReasons.clear();
    },
  };
}

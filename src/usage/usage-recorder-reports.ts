import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import type { UsageRecorderDeps } from "./usage-recorder.js";

/**
 * What the usage recorder reports, as metrics and log lines: its queue depth, rows dropped (queue
 * full, shutdown) or refused by the database, and an outage of usage writes and its end (the
 * `database` degraded gauge).
 */
export function usageRecorderReports(
  metrics: Metrics,
  logger: Logger,
): Pick<UsageRecorderDeps, "onQueueDepth" | "onDropped" | "onRefused" | "onWriteFailure" | "onRecovered"> {
  return {
    onQueueDepth: metrics.setUsageQueueDepth,
    onDropped: (count, reason) => {
      metrics.countUsageRowsDropped(count);
      logger.error(
        { count },
        reason === "shutdown"
          ? "usage rows not written before shutdown: dropped"
          : "usage queue full: usage rows dropped",
      );
    },
    onRefused: (row, error) => {
      metrics.countUsageRowsDropped(1);
      logger.error({ err: error, requestId: row.request_id }, "usage row refused by the database: dropped");
    },
    onWriteFailure: (error) => {
      metrics.countUsageWriteFailure();
      metrics.setDegraded("database", true);
      logger.warn({ err: error }, "usage batch not written; it stays queued and is retried");
    },
    onRecovered: () => {
      metrics.setDegraded("database", false);
      logger.info("usage writes recovered");
    },
  };
}

import type { Logger } from "../observability/logger.js";
import type { Metrics } from "../observability/metrics.js";
import {
  createSuppressionWindows,
  type SuppressionWindowsRegistry,
} from "../observability/suppression-windows.js";
import { type UsageRecord, usageColumns } from "../storage/usage-repository.js";
import { columnTypes, droppedRowsContents, type UsageColumn } from "./usage-import.js";
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
  /**
   * The gateway's, whose close writes the counts of the windows still open (no row dropped then),
   * and the contents of the dropped rows held for a line.
   */
  registry?: SuppressionWindowsRegistry;
  /** The clock (ms) the time given to writing the contents of dropped rows is read on (tests). */
  now?: () => number;
}

/**
 * What the usage recorder reports, as metrics and log lines: its queue depth, rows dropped (queue
 * full, shutdown) or refused by the database, an outage of usage writes and its end (the
 * `database` degraded gauge), and refusals coalesced into another row (a metric only).
 */
export function usageRecorderReports(
  metrics: Metrics,
  logger: Logger,
  { dropWindowMs = 10_000, registry, now = () => performance.now() }: UsageRecorderReportOptions = {},
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
  const contents = droppedRowsLog(logger, { windowMs: dropWindowMs, now });
  registry?.add(contents);
  // The reasons of the outage's failed writes logged so far, and its failed attempts.
  const failureReasons = new Set<string>();
  let failedAttempts = 0;
  return {
    onQueueDepth: metrics.setUsageQueueDepth,
    onDropped: (count, reason, rows) => {
      metrics.countUsageRowsDropped(count);
      if (reason === "shutdown") {
        // The last windows are written now: their timers would not run before the exit.
        fullQueue.flush();
        refusedRows.flush();
        logger.error({ count }, "usage rows not written before shutdown: dropped");
        contents.add(reason, rows);
        contents.flush();
        return;
      }
      if (reason === "refusals-evicted") {
        // One line per pass: a pass takes every refusal's row queued, so the next needs a full queue again.
        logger.warn(
          { count },
          "usage queue full: rows of refused requests dropped to keep the rows of calls",
        );
      } else if (fullQueue.open("queue-full", undefined, count))
        logger.error({ count }, "usage queue full: usage rows dropped");
      contents.add(reason, rows);
    },
    onRefused: (row, error) => {
      metrics.countUsageRowsDropped(1);
      const refusal = refusalReason(error);
      if (refusedRows.open(refusalKey(refusal), refusal))
        logger.error({ err: error, requestId: row.request_id }, "usage row refused by the database: dropped");
      contents.add("refused", [row]);
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

/**
 * The table's columns in the order a contents line writes them (the line names it, and the import
 * maps each line by its own): the text columns and the number columns (`columnTypes`) in turn, each
 * in the table's order, so a text is followed by a number, never by another text (11 of each).
 * The log's redaction takes a string after a credential header's name in a list for that header's
 * value (`rawHeaders`): in the table's order, a project id such as `cookie` or `authorization` had
 * the key id after it written `[redacted]`, and imported so.
 */
const loggedColumns: readonly UsageColumn[] = alternated(
  usageColumns.filter((column) => columnTypes[column] === "string"),
  usageColumns.filter((column) => columnTypes[column] === "number"),
);

/** `texts` and `numbers` taken in turn, a text first, the longer's rest after. */
function alternated(texts: readonly UsageColumn[], numbers: readonly UsageColumn[]): UsageColumn[] {
  const columns: UsageColumn[] = [];
  for (let at = 0; at < Math.max(texts.length, numbers.length); at++) {
    if (at < texts.length) columns.push(texts[at] as UsageColumn);
    if (at < numbers.length) columns.push(numbers[at] as UsageColumn);
  }
  return columns;
}

/** Rows of one line of dropped rows' contents: ~200 bytes each, a line well under the 16 KB a log copier reads at once. */
const rowsPerLine = 25;

/**
 * The bytes of row values one line of contents holds at most (`lineRows`): with the line's own
 * fields (its level, time, reason, count, columns and message: ~450 bytes), within the 16 KiB a log
 * copier passes on as one line. A row's model is the one its client's body named: up to 200
 * characters, 600 bytes of UTF-8 when none is ASCII, and 25 such rows made a line of ~23 KB, which
 * Docker's json-file driver (and containerd's CRI log) cut into pieces of 16 KiB, each an entry of
 * its own: `sluice usage import` could read none of the line's rows. Rows of the usual values (~550
 * bytes as `rowBytes` counts them) still go 25 a line.
 */
const lineRowBytes = 14 * 1024;

/**
 * How long the contents of the rows one drop hands over may take to write (the event loop is held
 * meanwhile: at shutdown, the whole queue, up to SLUICE_USAGE_QUEUE_MAX rows, some 20 µs each); the
 * rows left then are counted in a line of their own.
 */
const contentsBudgetMs = 250;

/**
 * The contents of dropped usage rows, in the log: a row the table will not hold can be read there,
 * and inserted again by `sluice usage import` (usage-import.ts, which reads them). Each line holds at most `rowsPerLine` rows of one
 * reason, as arrays of values in the order of `loggedColumns` (written in the line: half the bytes of
 * objects, and the redaction walks no column names). Rows dropped one by one (a full queue, the
 * database's refusals) are held until a line is full, the window ends, the shutdown or the
 * gateway's close (`flush`): a line per row would be a line per call for the length of an outage.
 */
function droppedRowsLog(logger: Logger, options: { windowMs: number; now: () => number }) {
  let held: UsageRecord[] = [];
  let heldReason = "";
  let timer: NodeJS.Timeout | undefined;

  /** Writes `rows` in lines, as many as fit in the time left before `deadline`. */
  function write(reason: string, rows: readonly UsageRecord[], deadline: number): void {
    for (let start = 0; start < rows.length; ) {
      if (options.now() >= deadline) {
        logger.error(
          { reason, count: rows.length - start },
          "usage rows dropped: contents not logged, out of time",
        );
        return;
      }
      const line = lineRows(rows, start);
      logger.error({ reason, count: line.length, columns: loggedColumns, rows: line }, droppedRowsContents);
      start += line.length;
    }
  }

  function flush(): void {
    clearTimeout(timer);
    timer = undefined;
    const rows = held;
    held = [];
    if (rows.length > 0) write(heldReason, rows, options.now() + contentsBudgetMs);
  }

  return {
    /** Writes the full lines of `rows` now (after the rows held for another reason), holds the rest. */
    add(reason: string, rows: readonly UsageRecord[]): void {
      if (rows.length === 0) return;
      if (reason !== heldReason) flush();
      heldReason = reason;
      const deadline = options.now() + contentsBudgetMs;
      const all = held.length === 0 ? rows : [...held, ...rows];
      const whole = all.length - (all.length % rowsPerLine);
      held = all.slice(whole);
      write(reason, all.slice(0, whole), deadline);
      if (held.length > 0 && timer === undefined) timer = setTimeout(flush, options.windowMs).unref();
    },
    flush,
  };
}

/**
 * The values of the rows of one line of contents, from `rows[start]` on: at most `rowsPerLine`
 * rows, and no more than `lineRowBytes` of them as `rowBytes` counts them, but for a first row
 * alone (no row is that long: its longest value is its model's 600 bytes).
 */
function lineRows(rows: readonly UsageRecord[], start: number): unknown[][] {
  const line: unknown[][] = [];
  let bytes = 0;
  for (let at = start; at < rows.length && line.length < rowsPerLine; at++) {
    const values = loggedColumns.map((column) => (rows[at] as UsageRecord)[column] ?? null);
    const size = rowBytes(values);
    if (line.length > 0 && bytes + size > lineRowBytes) break;
    line.push(values);
    bytes += size;
  }
  return line;
}

/**
 * No fewer than the bytes of a row's values as the log writes them (a JSON array): a text of
 * printable ASCII but for `"` and `\` is its characters and quotes; any other (a model its client
 * named, a project id's `…`), its JSON in UTF-8; a number or null, at most 25 characters
 * (`-0.0000012345678901234567`). Not the whole row's JSON: each row would be written twice, and
 * the rows' contents at shutdown have 250 ms.
 */
function rowBytes(values: readonly unknown[]): number {
  let bytes = values.length + 1;
  for (const value of values)
    if (typeof value !== "string") bytes += 25;
    else bytes += plainText.test(value) ? value.length + 2 : Buffer.byteLength(JSON.stringify(value));
  return bytes;
}

/** Text JSON writes as it is, one byte a character: printable ASCII but `"` and `\`. */
const plainText = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

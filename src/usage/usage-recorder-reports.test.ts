import { Readable } from "node:stream";
import { afterEach, describe, expect, it, vi } from "vitest";
import { fakeUsageRepository } from "../../test/support/fake-usage-repository.js";
import { usageRow } from "../../test/support/usage-row.js";
import { createLogger } from "../observability/logger.js";
import { createMetrics } from "../observability/metrics.js";
import { createSuppressionWindowsRegistry } from "../observability/suppression-windows.js";
import { storedModelName } from "./stored-model-name.js";
import { importDroppedRows } from "./usage-import.js";
import { createUsageRecorder } from "./usage-recorder.js";
import { usageRecorderReports } from "./usage-recorder-reports.js";

/** Pushes a log line, but one of dropped rows' contents (the tests below look at those). */
function pushCounted(lines: Record<string, unknown>[], line: string): void {
  const parsed = JSON.parse(line) as Record<string, unknown>;
  if (parsed.msg !== "usage rows dropped: their contents") lines.push(parsed);
}

describe("usage recorder reports", () => {
  afterEach(() => vi.useRealTimers());

  it("logs rows dropped from a full queue once per window, then how many more it dropped", async () => {
    vi.useFakeTimers();
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void pushCounted(lines, line) });
    const metrics = createMetrics();
    const reports = usageRecorderReports(metrics, logger, { dropWindowMs: 10_000 });
    for (let row = 0; row < 30; row++) reports.onDropped?.(1, "queue-full", [usageRow(`req_full_${row}`)]);
    // Before, thirty lines: one per dropped row.
    expect(lines.map(({ msg, count }) => [msg, count])).toEqual([
      ["usage queue full: usage rows dropped", 1],
    ]);
    vi.advanceTimersByTime(10_000);
    expect(lines[1]).toMatchObject({
      msg: "usage queue full: more usage rows dropped",
      count: 29,
      windowMs: 10_000,
    });
    reports.onDropped?.(1, "queue-full", [usageRow("req_full_30")]);
    reports.onDropped?.(2, "shutdown", [usageRow("req_shutdown_0"), usageRow("req_shutdown_1")]);
    expect(lines.slice(2).map(({ msg, count }) => [msg, count])).toEqual([
      ["usage queue full: usage rows dropped", 1],
      ["usage rows not written before shutdown: dropped", 2],
    ]);
    expect(await metrics.render()).toMatchObject({
      body: expect.stringContaining("sluice_usage_rows_dropped_total 33"),
    });
  });

  it("writes the full queue's last count at shutdown, before its window would have ended", () => {
    vi.useFakeTimers();
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void pushCounted(lines, line) });
    const reports = usageRecorderReports(createMetrics(), logger, { dropWindowMs: 10_000 });
    for (let row = 0; row < 5; row++) reports.onDropped?.(1, "queue-full", [usageRow(`req_full_${row}`)]);
    reports.onDropped?.(
      3,
      "shutdown",
      [0, 1, 2].map((index) => usageRow(`req_shutdown_${index}`)),
    );
    expect(lines.map(({ msg, count }) => [msg, count])).toEqual([
      ["usage queue full: usage rows dropped", 1],
      ["usage queue full: more usage rows dropped", 4],
      ["usage rows not written before shutdown: dropped", 3],
    ]);
  });

  it("logs rows the database refuses for one reason once per window, then how many more, each reason apart", async () => {
    vi.useFakeTimers();
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void pushCounted(lines, line) });
    const metrics = createMetrics();
    const reports = usageRecorderReports(metrics, logger, { dropWindowMs: 10_000 });
    const nul = () =>
      Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), { code: "22021" });
    const policy = () =>
      Object.assign(new Error('new row violates row-level security policy for table "usage_records"'), {
        code: "42501",
      });
    for (let index = 0; index < 50; index++) reports.onRefused?.(usageRow(`req_${index}`), nul());
    reports.onRefused?.(usageRow("req_policy"), policy());
    // Before, fifty-one lines: one per refused row.
    expect(lines.map(({ msg, requestId }) => [msg, requestId])).toEqual([
      ["usage row refused by the database: dropped", "req_0"],
      ["usage row refused by the database: dropped", "req_policy"],
    ]);
    vi.advanceTimersByTime(10_000);
    expect(lines.slice(2)).toEqual([
      expect.objectContaining({
        msg: "usage rows refused by the database: more dropped",
        count: 49,
        code: "22021",
        reason: 'invalid byte sequence for encoding "UTF8": 0x00',
        windowMs: 10_000,
      }),
    ]);
    // A window still open at shutdown is written then, before the shutdown's own line.
    for (let index = 0; index < 3; index++) reports.onRefused?.(usageRow(`req_late_${index}`), policy());
    reports.onDropped?.(1, "shutdown", [usageRow("req_shutdown")]);
    expect(lines.slice(3).map(({ msg, count, requestId }) => [msg, count, requestId])).toEqual([
      ["usage row refused by the database: dropped", undefined, "req_late_0"],
      ["usage rows refused by the database: more dropped", 2, undefined],
      ["usage rows not written before shutdown: dropped", 1, undefined],
    ]);
    expect((await metrics.render()).body).toContain("sluice_usage_rows_dropped_total 55");
  });

  it("counts the refusals coalesced into another row, by error code", async () => {
    const metrics = createMetrics();
    const reports = usageRecorderReports(metrics, createLogger("info", { write: () => {} }));
    const refusal = (code: string) =>
      ({ error_code: code }) as Parameters<NonNullable<typeof reports.onCoalesced>>[0];
    for (let index = 0; index < 3; index++) reports.onCoalesced?.(refusal("TOO_MANY_REQUESTS"));
    reports.onCoalesced?.(refusal("FORBIDDEN"));
    const { body } = await metrics.render();
    expect(body).toContain('sluice_usage_refusals_coalesced_total{code="TOO_MANY_REQUESTS"} 3');
    expect(body).toContain('sluice_usage_refusals_coalesced_total{code="FORBIDDEN"} 1');
  });

  it("logs each reason a usage write failed once per outage, and how many attempts failed when it ends", () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void pushCounted(lines, line) });
    const reports = usageRecorderReports(createMetrics(), logger);
    // The recorder retries every 5 s at most during an outage: before, a line with its stack each time.
    for (let attempt = 0; attempt < 10; attempt++)
      reports.onWriteFailure?.(new Error("Connection terminated unexpectedly"));
    reports.onWriteFailure?.(new Error("connect ECONNREFUSED 127.0.0.1:5432"));
    reports.onWriteFailure?.(new Error("Connection terminated unexpectedly"));
    reports.onRecovered?.();
    reports.onWriteFailure?.(new Error("Connection terminated unexpectedly"));
    expect(
      lines.map(({ msg, err, failedAttempts }) => [
        msg,
        (err as { message?: string })?.message,
        failedAttempts,
      ]),
    ).toEqual([
      [
        "usage batch not written; it stays queued and is retried",
        "Connection terminated unexpectedly",
        undefined,
      ],
      [
        "usage batch not written; it stays queued and is retried",
        "connect ECONNREFUSED 127.0.0.1:5432",
        undefined,
      ],
      ["usage writes recovered", undefined, 12],
      [
        "usage batch not written; it stays queued and is retried",
        "Connection terminated unexpectedly",
        undefined,
      ],
    ]);
  });

  it("logs a table that refuses every row once, not once per row, and says so on /metrics until it takes them", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void pushCounted(lines, line) });
    const metrics = createMetrics();
    let revoked = true;
    const recorder = createUsageRecorder({
      repository: fakeUsageRepository({
        async insertBatch() {
          if (revoked)
            throw Object.assign(new Error("permission denied for table usage_records"), { code: "42501" });
        },
      }),
      flushIntervalMs: 60_000,
      queueMax: 100_000,
      ...usageRecorderReports(metrics, logger),
    });
    for (let index = 0; index < 1000; index++) recorder.record(usageRow(`req_${index}`));
    await recorder.flush(300);
    // Before, a line per row, each row dropped: the whole queue within the flush.
    expect(lines.map(({ msg }) => msg)).toEqual(["usage batch not written; it stays queued and is retried"]);
    const failing = await metrics.render();
    expect(failing.body).toMatch(/sluice_degraded\{[^}]*database[^}]*\} 1/);
    expect(failing.body).not.toMatch(/sluice_usage_rows_dropped_total [1-9]/);
    revoked = false;
    await recorder.flush(2000);
    expect(lines.map(({ msg }) => msg)).toEqual([
      "usage batch not written; it stays queued and is retried",
      "usage writes recovered",
    ]);
    expect((await metrics.render()).body).toMatch(/sluice_degraded\{[^}]*database[^}]*\} 0/);
    await recorder.stop();
  });
});

describe("usage recorder reports, the contents of the rows dropped", () => {
  afterEach(() => vi.useRealTimers());

  const contents = "usage rows dropped: their contents";
  /** The rows of the contents lines, as objects again, as `sluice usage import` reads them (src/cli/usage-import.test.ts). */
  const rowsOf = (lines: Record<string, unknown>[]) =>
    lines
      .filter(({ msg }) => msg === contents)
      .flatMap(({ columns, rows }) =>
        (rows as unknown[][]).map((values) =>
          Object.fromEntries((columns as string[]).map((column, index) => [column, values[index]])),
        ),
      );
  const logged = () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    return { lines, logger };
  };
  const rows = (count: number, prefix = "req") =>
    Array.from({ length: count }, (_, index) =>
      usageRow(`${prefix}_${index}`, { model: `model-${index}`, cost_usd: index / 1000 }),
    );

  it("logs every row dropped at shutdown whole, in lines of at most 25 rows, after the count line", async () => {
    const { lines, logger } = logged();
    const metrics = createMetrics();
    const reports = usageRecorderReports(metrics, logger);
    const dropped = rows(60);
    reports.onDropped?.(60, "shutdown", dropped);
    expect(lines.map(({ msg, count, reason }) => [msg, count, reason])).toEqual([
      ["usage rows not written before shutdown: dropped", 60, undefined],
      [contents, 25, "shutdown"],
      [contents, 25, "shutdown"],
      [contents, 10, "shutdown"],
    ]);
    // Every column, as the table stores it: the rows can be inserted again.
    expect(rowsOf(lines)).toEqual(dropped);
    expect((await metrics.render()).body).toContain("sluice_usage_rows_dropped_total 60");
  });

  it("logs the rows a full queue drops in lines of 25, and the rest when the window ends or at shutdown", () => {
    vi.useFakeTimers();
    const { lines, logger } = logged();
    const reports = usageRecorderReports(createMetrics(), logger, { dropWindowMs: 10_000 });
    const dropped = rows(60);
    for (const row of dropped.slice(0, 30)) reports.onDropped?.(1, "queue-full", [row]);
    expect(lines.map(({ msg, count }) => [msg, count])).toEqual([
      ["usage queue full: usage rows dropped", 1],
      [contents, 25],
    ]);
    vi.advanceTimersByTime(10_000);
    expect(rowsOf(lines)).toEqual(dropped.slice(0, 30));
    for (const row of dropped.slice(30, 33)) reports.onDropped?.(1, "queue-full", [row]);
    reports.onDropped?.(2, "refusals-evicted", dropped.slice(33, 35));
    reports.onDropped?.(25, "shutdown", dropped.slice(35));
    expect(rowsOf(lines)).toEqual(dropped);
    expect(lines.filter(({ msg }) => msg === contents).map(({ reason }) => reason)).toEqual([
      "queue-full",
      "queue-full",
      "queue-full",
      "refusals-evicted",
      "shutdown",
    ]);
  });

  it("logs the rows the database refused whole, each one, though their reason's line is written once per window", () => {
    vi.useFakeTimers();
    const { lines, logger } = logged();
    const registry = createSuppressionWindowsRegistry();
    const reports = usageRecorderReports(createMetrics(), logger, { registry });
    const nul = Object.assign(new Error('invalid byte sequence for encoding "UTF8": 0x00'), {
      code: "22021",
    });
    const refused = rows(3, "refused");
    for (const row of refused) reports.onRefused?.(row, nul);
    // The gateway's close flushes the registry: the rows held for a line are written then.
    registry.flush();
    expect(lines.filter(({ msg }) => msg === contents).map(({ reason, count }) => [reason, count])).toEqual([
      ["refused", 3],
    ]);
    expect(rowsOf(lines)).toEqual(refused);
  });

  it("logs each value as the row holds it, whatever the value before it: the log's redaction of a value after a credential header's name takes none", () => {
    const { lines, logger } = logged();
    const reports = usageRecorderReports(createMetrics(), logger);
    // Project ids and models a project may well have: a credential header's name, in a flat list
    // of values, made the log redact the string after it as a header's value (the key id after a project id).
    const dropped = ["cookie", "authorization", "x-api-key", "x-ai-key", "token"].flatMap((name, index) => [
      usageRow(`req_project_${index}`, { project_id: name, key_id: `key${index}abcdefghij` }),
      usageRow(`req_model_${index}`, { model: name, error_code: "PROVIDER_ERROR", status: 502 }),
    ]);
    reports.onDropped?.(dropped.length, "shutdown", dropped);
    expect(rowsOf(lines)).toEqual(dropped);
  });

  it("keeps each contents line within the 16 KiB a log copier takes as one line, whatever model names its rows hold", async () => {
    const raw: string[] = [];
    const logger = createLogger("info", { write: (line: string) => void raw.push(line) });
    const reports = usageRecorderReports(createMetrics(), logger);
    // A proxied call's row records the model its body names: up to 200 characters its client chose,
    // 600 bytes of UTF-8 when none is ASCII (400 of JSON when each is one it escapes). Before, 25
    // such rows made a line of some 23 KB.
    const dropped = Array.from({ length: 60 }, (_, index) =>
      usageRow(`req_${index}`, {
        model: storedModelName(`${index}`.padEnd(300, index % 3 === 2 ? '"\\' : "語")),
      }),
    );
    reports.onDropped?.(60, "shutdown", dropped);
    const contentsLines = raw.filter((line) => line.includes(contents));
    for (const line of contentsLines) expect(Buffer.byteLength(line)).toBeLessThanOrEqual(maxLineBytes);
    // Docker's json-file driver writes each 16 KiB piece of a longer line as an entry of its own
    // (a partial message), and the import then read none of the line's rows.
    const entries = raw.flatMap((line) =>
      pieces(line, maxLineBytes).map((log) =>
        JSON.stringify({ log, stream: "stdout", time: "2026-11-02T10:00:00Z" }),
      ),
    );
    const imported: unknown[] = [];
    const summary = await importDroppedRows(Readable.from(entries), async (rows) => {
      imported.push(...rows);
      return rows.length;
    });
    expect(summary).toEqual({ read: 60, inserted: 60, alreadyPresent: 0, refused: [] });
    expect(imported).toEqual(dropped);
  });

  it("stops writing rows' contents when its time is up, and says how many it left out", () => {
    const { lines, logger } = logged();
    let clock = 0;
    // 50 ms pass between two looks at the clock, one before each line: four lines in the 250 ms.
    const reports = usageRecorderReports(createMetrics(), logger, {
      now: () => {
        const at = clock;
        clock += 50;
        return at;
      },
    });
    reports.onDropped?.(200, "shutdown", rows(200));
    expect(lines.map(({ msg, count }) => [msg, count])).toEqual([
      ["usage rows not written before shutdown: dropped", 200],
      [contents, 25],
      [contents, 25],
      [contents, 25],
      [contents, 25],
      ["usage rows dropped: contents not logged, out of time", 100],
    ]);
  });
});

/** The longest line a log copier passes on whole (Docker's, containerd's): 16 KiB. */
const maxLineBytes = 16 * 1024;

/** `line` in pieces of at most `bytes` bytes of UTF-8 each, as a log copier cuts a longer line (never inside a character here). */
function pieces(line: string, bytes: number): string[] {
  const cut: string[] = [];
  let piece = "";
  let size = 0;
  for (const character of line) {
    const length = Buffer.byteLength(character);
    if (size + length > bytes) {
      cut.push(piece);
      piece = "";
      size = 0;
    }
    piece += character;
    size += length;
  }
  if (piece !== "") cut.push(piece);
  return cut;
}

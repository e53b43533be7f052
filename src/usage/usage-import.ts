import { isDatabaseUnavailable } from "../storage/database-unavailable.js";
import { refusesEveryRow } from "../storage/refuses-every-row.js";
import type { UsageRecord, usageColumns } from "../storage/usage-repository.js";

/** The message of the log lines that hold dropped usage rows' contents (usage-recorder-reports.ts). */
export const droppedRowsContents = "usage rows dropped: their contents";

export type UsageColumn = (typeof usageColumns)[number];

/**
 * What each column's values are in a contents line, besides null (every column's type must be
 * named): what the import checks, and what the log's order of the columns alternates.
 */
export const columnTypes: Record<UsageColumn, "string" | "number"> = {
  request_id: "string",
  project_id: "string",
  key_id: "string",
  endpoint: "string",
  provider: "string",
  model: "string",
  status: "number",
  error_code: "string",
  input_tokens: "number",
  output_tokens: "number",
  cached_tokens: "number",
  reasoning_tokens: "number",
  cost_usd: "number",
  latency_ms: "number",
  ttfb_ms: "number",
  streamed: "number",
  outcome: "string",
  auth_method: "string",
  client_ip: "string",
  created_at: "string",
  requests: "number",
  provider_answered: "number",
};

/** Rows one statement inserts at most (22 columns: 11,000 values, within both engines' limits). */
const batchRows = 500;

export interface UsageImportRefusal {
  /** The input's line (from 1) that held the row. */
  line: number;
  /** The row's request id, when it could be read. */
  requestId?: string;
  reason: string;
}

export interface UsageImportSummary {
  /** Rows read from the contents lines. */
  read: number;
  inserted: number;
  /** Rows whose request id was stored already: skipped. */
  alreadyPresent: number;
  refused: UsageImportRefusal[];
}

/**
 * `sluice usage import`: every row of every contents line among `lines` (a whole log: other lines
 * are skipped), each mapped by its own line's `columns` (a line of an older release, with fewer,
 * leaves the rest to their defaults), checked, and inserted by `insert` in batches of the same
 * columns; `insert` skips a request id stored already and answers how many it inserted. A row of
 * the wrong shape, or one the database refuses for a value, is refused and the rest imported; a
 * database that is down, or refuses every row alike (its table, its grants), ends the import (a run
 * again inserts only what this one did not).
 */
export async function importDroppedRows(
  lines: AsyncIterable<string>,
  insert: (rows: Partial<UsageRecord>[]) => Promise<number>,
): Promise<UsageImportSummary> {
  const summary: UsageImportSummary = { read: 0, inserted: 0, alreadyPresent: 0, refused: [] };
  let batch: { line: number; row: Partial<UsageRecord> }[] = [];
  let batchColumns = "";

  async function write(): Promise<void> {
    const taken = batch;
    batch = [];
    if (taken.length === 0) return;
    try {
      const inserted = await insert(taken.map(({ row }) => row));
      summary.inserted += inserted;
      summary.alreadyPresent += taken.length - inserted;
      return;
    } catch (error) {
      if (!refusesValue(error)) throw error;
    }
    // A value the statement refused: each row alone, to find the ones refused.
    for (const { line, row } of taken) {
      try {
        const inserted = await insert([row]);
        summary.inserted += inserted;
        summary.alreadyPresent += 1 - inserted;
      } catch (error) {
        if (!refusesValue(error)) throw error;
        summary.refused.push({
          line,
          ...(row.request_id === undefined ? {} : { requestId: row.request_id }),
          reason: `refused by the database: ${(error as Error).message}`,
        });
      }
    }
  }

  let number = 0;
  for await (const text of lines) {
    number++;
    const line = contentsLine(text);
    if (line === undefined) continue;
    if (line === "unreadable") {
      summary.refused.push({
        line: number,
        reason:
          "the line names the contents message but is no JSON (cut short, or wrapped by a log collector): its rows cannot be read",
      });
      continue;
    }
    const { columns, rows } = line;
    if (!Array.isArray(rows)) {
      summary.refused.push({ line: number, reason: 'the line\'s "rows" is not a list' });
      continue;
    }
    summary.read += rows.length;
    const problem = columnsProblem(columns);
    const names = (Array.isArray(columns) && problem === undefined ? columns : []) as UsageColumn[];
    // Each batch holds rows of the same columns: one statement inserts them.
    const lineColumns = names.join(",");
    if (lineColumns !== batchColumns || batch.length + rows.length > batchRows) await write();
    batchColumns = lineColumns;
    const requestIdAt = Array.isArray(columns) ? columns.indexOf("request_id") : -1;
    for (const values of rows) {
      // The request id, when the row's values fit its line's columns (known or not).
      const fits = Array.isArray(values) && Array.isArray(columns) && values.length === columns.length;
      const id = fits ? values[requestIdAt] : undefined;
      const requestId = typeof id === "string" && id !== "" ? id : undefined;
      const refuse = (reason: string) =>
        summary.refused.push({ line: number, ...(requestId === undefined ? {} : { requestId }), reason });
      if (problem !== undefined) refuse(problem);
      else if (!Array.isArray(values) || values.length !== names.length)
        refuse(
          `${Array.isArray(values) ? values.length : "not a list of"} values for ${names.length} columns`,
        );
      else if (requestId === undefined) refuse("request_id: a request id expected");
      else {
        const row = Object.fromEntries(names.map((name, index) => [name, values[index]]));
        const wrong = names.find((name) => row[name] !== null && typeof row[name] !== columnTypes[name]);
        // Every number the gateway writes (a status, a count, a cost, a time) is finite and not
        // negative: a cost below 0 would take spend off the project's month and its reports, and
        // JSON reads 1e400 as Infinity.
        const outOfRange = names.find(
          (name) =>
            typeof row[name] === "number" && !(Number.isFinite(row[name]) && (row[name] as number) >= 0),
        );
        if (wrong !== undefined)
          refuse(`${wrong}: a ${columnTypes[wrong]} expected, a ${kindOf(row[wrong])} given`);
        else if (outOfRange !== undefined)
          refuse(`${outOfRange}: a finite number of 0 or more expected, ${String(row[outOfRange])} given`);
        else batch.push({ line: number, row: row as Partial<UsageRecord> });
      }
    }
  }
  await write();
  return summary;
}

/**
 * The line's fields when it is a contents line (JSON, with that message), undefined otherwise;
 * "unreadable" when it names the message but holds no JSON to read it from. The JSON is read from
 * the line's start, else from the first `{` it reads from (a log collector's prefix: journalctl's `… host
 * sluice[812]: `, `docker logs -t`'s and `kubectl logs --timestamps`' time), or from the `log`
 * member a container runtime's JSON file wraps each line in (Docker's json-file driver): skipped,
 * such a log's rows were all left out, the import saying it had read none.
 */
function contentsLine(text: string): { columns?: unknown; rows?: unknown } | "unreadable" | undefined {
  // Most of a log is other lines: parsed only when they may be one.
  if (!text.includes(droppedRowsContents)) return undefined;
  const parsed = parsedObject(text) ?? behindPrefix(text);
  if (parsed === undefined) return "unreadable";
  if (parsed.msg === undefined && typeof parsed.log === "string") return contentsLine(parsed.log.trimEnd());
  return parsed.msg === droppedRowsContents ? parsed : undefined;
}

/**
 * The JSON object a prefix hides (`contentsLine`): read from each `{` before the message in turn,
 * the first that reads, as the prefix may hold braces of its own (a template's `{pod}`). Only those
 * before the message: the object holds it, and a line cut short is not read again from every brace
 * of its rows.
 */
function behindPrefix(text: string): ReturnType<typeof parsedObject> {
  const message = text.indexOf(droppedRowsContents);
  for (let at = text.indexOf("{"); at !== -1 && at < message; at = text.indexOf("{", at + 1)) {
    const parsed = parsedObject(text.slice(at));
    if (parsed !== undefined) return parsed;
  }
  return undefined;
}

/** `text` as JSON, when it is a JSON object; undefined otherwise. */
function parsedObject(
  text: string,
): { msg?: unknown; log?: unknown; columns?: unknown; rows?: unknown } | undefined {
  try {
    const parsed: unknown = JSON.parse(text);
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? parsed : undefined;
  } catch {
    return undefined;
  }
}

/** Why a line's `columns` cannot map its rows, or undefined when they can. */
function columnsProblem(columns: unknown): string | undefined {
  if (!Array.isArray(columns) || !columns.every((column) => typeof column === "string"))
    return 'the line\'s "columns" is not a list of column names';
  const unknown = columns.filter((column) => !Object.hasOwn(columnTypes, column));
  if (unknown.length > 0)
    return `unknown ${unknown.length === 1 ? "column" : "columns"} ${unknown.map((column) => JSON.stringify(column)).join(", ")}: this build's usage table has none (a log of a newer release: import it with that release's CLI)`;
  if (new Set(columns).size !== columns.length) return "a column named twice";
  if (!columns.includes("request_id")) return "no request_id column: rows are imported by request id";
  return undefined;
}

function kindOf(value: unknown): string {
  return Array.isArray(value) ? "list" : typeof value;
}

/**
 * Whether the database refused a statement for a value one of its rows holds (a constraint, a value
 * its column's type does not take), not for something every row meets alike.
 */
function refusesValue(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && !isDatabaseUnavailable(error) && !refusesEveryRow(error);
}

/**
 * The usage report's pages (docs/decisions/0026): an answer holds `limit` groups at most, and when
 * more follow, `next`, a cursor that the next request passes as `cursor` to read on. The cursor
 * names the report (project, window, grouping) and the last group answered; it is opaque to
 * clients (base64url of JSON, list-cursor.ts), and not secret: it holds what the request and its
 * answer showed.
 */

import { problemsError } from "../errors.js";
import { decodeListCursor, encodeListCursor, isoInstant, ownCursor } from "./list-cursor.js";
import type { OtherListCursor } from "./project-input.js";

export const usageReportLimit = {
  /** The groups an answer holds when `limit` is not given: more than the days of two years. */
  default: 1000,
  /** The most `limit` may ask for: some 1.7 MB of JSON with model names of 200 (ASCII) characters. */
  max: 5000,
} as const;

/** What a usage report groups by (`groupBy`). */
export const usageGroupings = ["day", "model", "endpoint"] as const;
export type UsageGroupBy = (typeof usageGroupings)[number];

export interface UsageReportCursor {
  projectId: string;
  groupBy: UsageGroupBy;
  /** The report's window, as the answer gave it (ISO instants). */
  from: string;
  to: string;
  /** The last group of the page before: the next page starts after it. */
  after: string;
}

const version = 1;

export function encodeUsageReportCursor(cursor: UsageReportCursor): string {
  const { projectId, groupBy, from, to, after } = cursor;
  return encodeListCursor([version, projectId, groupBy, from, to, after]);
}

/** The cursor `text` is, or null when it is none this module wrote (cut, altered, made up). */
export function decodeUsageReportCursor(text: string): UsageReportCursor | null {
  const fields = decodeListCursor(text);
  if (fields?.length !== 6) return null;
  const [written, projectId, groupBy, from, to, after] = fields;
  if (written !== version || typeof projectId !== "string" || !isGroup(after)) return null;
  if (typeof groupBy !== "string" || !(usageGroupings as readonly string[]).includes(groupBy)) return null;
  if (!isoInstant(from) || !isoInstant(to) || !(from < to)) return null;
  return { projectId, groupBy: groupBy as UsageGroupBy, from, to, after };
}

/**
 * The cursor a usage report reads on from (none for a first page) and the grouping it reads (the
 * query's, else the cursor's, else `day`). A cursor read on in another report than its own would
 * answer groups after a group of another report, silently skipping some or repeating them: one of
 * another list, of another project, or given `from`, `to` or `groupBy` that differ from its own is
 * refused (422, well-formed values that contradict each other). `report` is the project and the
 * window the query asks for; nothing stored is read, so the CLI refuses these as usage errors.
 */
export function usageReportReadOn(
  query: { groupBy?: UsageGroupBy | undefined; cursor?: UsageReportCursor | OtherListCursor | undefined },
  report: { projectId: string; from: string; to: string },
  parameterName: (field: string) => string,
): { cursor: UsageReportCursor | undefined; groupBy: UsageGroupBy } {
  const cursor = ownCursor(query.cursor, "a usage report", "Invalid usage query", parameterName);
  const groupBy = query.groupBy ?? cursor?.groupBy ?? "day";
  if (!cursor) return { cursor, groupBy };
  const cursorName = parameterName("cursor");
  if (cursor.projectId !== report.projectId)
    throw problemsError("VALIDATION_ERROR", "Invalid usage query", [
      `${cursorName}: is a cursor of another project's usage report`,
    ]);
  const expected = { ...report, groupBy };
  const problems = (["from", "to", "groupBy"] as const).flatMap((field) =>
    cursor[field] === expected[field]
      ? []
      : [
          `${parameterName(field)}: differs from the ${cursorName} (${cursor[field]}); leave it out to read on in the cursor's report`,
        ],
  );
  if (problems.length > 0) throw problemsError("VALIDATION_ERROR", "Invalid usage query", problems);
  return { cursor, groupBy };
}

/**
 * Whether `after` may be a group a report answered: text without a NUL. No group holds one (a
 * stored model's control characters are `?`), and PostgreSQL's text refuses one outright, so a
 * cursor made by hand with a NUL was a database error (500) there, where SQLite answered.
 */
function isGroup(after: unknown): after is string {
  return typeof after === "string" && !after.includes("\u0000");
}

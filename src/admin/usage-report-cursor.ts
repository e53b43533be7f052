/**
 * The usage report's pages (docs/decisions/0026): an answer holds `limit` groups at most, and when
 * more follow, `next`, a cursor that the next request passes as `cursor` to read on. The cursor
 * names the report (project, window, grouping) and the last group answered; it is opaque to
 * clients (base64url of JSON, list-cursor.ts), and not secret: it holds what the request and its
 * answer showed.
 */

import { decodeListCursor, encodeListCursor, isoInstant } from "./list-cursor.js";

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
  if (written !== version || typeof projectId !== "string" || typeof after !== "string") return null;
  if (typeof groupBy !== "string" || !(usageGroupings as readonly string[]).includes(groupBy)) return null;
  if (!isoInstant(from) || !isoInstant(to) || !(from < to)) return null;
  return { projectId, groupBy: groupBy as UsageGroupBy, from, to, after };
}

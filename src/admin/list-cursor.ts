/**
 * The cursors of the admin API's paged lists (the usage report, decision 0026; the project list,
 * decision 0029): base64url of a JSON array of the fields that say where the next page starts.
 * Opaque to clients, and not secret: a cursor holds what the request and its answer showed.
 */

import { problemsError } from "../errors.js";
import type { OtherListCursor } from "./project-input.js";

/** Longer than any cursor Sluice writes (a usage report's after a 200-character model name of 3-byte characters). */
export const maxCursorLength = 2000;

export function encodeListCursor(fields: readonly (string | number)[]): string {
  return Buffer.from(JSON.stringify(fields)).toString("base64url");
}

/** The fields of the cursor `text` is, or null when it is none Sluice wrote (cut, altered, made up). */
export function decodeListCursor(text: string): unknown[] | null {
  if (text.length === 0 || text.length > maxCursorLength || !/^[A-Za-z0-9_-]+$/.test(text)) return null;
  try {
    const fields: unknown = JSON.parse(Buffer.from(text, "base64url").toString("utf8"));
    return Array.isArray(fields) ? fields : null;
  } catch {
    return null;
  }
}

const isoInstantForm = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** An ISO instant as `toISOString` writes it, the form every stored time has. */
export function isoInstant(value: unknown): value is string {
  return typeof value === "string" && isoInstantForm.test(value) && new Date(value).toISOString() === value;
}

/**
 * `cursor` when it is one of the list it was given to (`list`); a cursor of another paged list is
 * one Sluice wrote, well-formed, but it would read on in that list: 422, as a cursor of another
 * report is. It needs nothing stored: the CLI refuses it as a usage error before opening the database.
 */
export function ownCursor<T extends object>(
  cursor: T | OtherListCursor | undefined,
  list: string,
  title: string,
  parameterName: (field: string) => string,
): T | undefined {
  if (cursor === undefined || !("otherList" in cursor)) return cursor;
  throw problemsError("VALIDATION_ERROR", title, [
    `${parameterName("cursor")}: is a cursor of ${cursor.otherList}, not of ${list}`,
  ]);
}

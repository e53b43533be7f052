/**
 * The project list's pages (docs/decisions/0029): an answer holds `limit` projects at most, in
 * creation order (ids by code points in a tie), and when more follow, `next`, a cursor that the
 * next request passes as `cursor` to read on. The cursor names the last project answered (its
 * creation time and id); it is opaque to clients (base64url of JSON, list-cursor.ts).
 */

import { decodeListCursor, encodeListCursor, isoInstant } from "./list-cursor.js";
import { projectIdPattern } from "./project-id.js";

export const projectListLimit = {
  /**
   * The projects an answer holds when `limit` is not given: 570 KB of JSON with output schemas of
   * 5 KB (measured), 6.3 MB with schemas near their 64 KiB, and 13 MB at most (a project's schema
   * and proxy allow-list both at their size limits).
   */
  default: 100,
  /** The most `limit` may ask for: twice that, 1.1 MB with schemas of 5 KB, 26 MB at most. */
  max: 200,
} as const;

/** Where the project list reads on: after this project, in its order. */
export interface ProjectListCursor {
  createdAt: string;
  id: string;
}

/** The first field of a project list's cursor, which a usage report's (a version number) never is. */
const tag = "projects";

export function encodeProjectListCursor(cursor: ProjectListCursor): string {
  return encodeListCursor([tag, cursor.createdAt, cursor.id]);
}

/** The cursor `text` is, or null when it is none this module wrote (cut, altered, made up). */
export function decodeProjectListCursor(text: string): ProjectListCursor | null {
  const fields = decodeListCursor(text);
  if (fields?.length !== 3) return null;
  const [written, createdAt, id] = fields;
  if (written !== tag || !isoInstant(createdAt) || typeof id !== "string" || !projectIdPattern.test(id))
    return null;
  return { createdAt, id };
}

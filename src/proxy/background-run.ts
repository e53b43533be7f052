import { createHash } from "node:crypto";
import type { TokenUsage } from "../usage/token-usage.js";
import type { ResponseObjectFields } from "./response-object-fields.js";

/**
 * A provider A Responses API run in background mode (`"background": true`): the POST answers
 * `queued` without usage, and the run's tokens reach whichever call sees it finished (a poll, a
 * resumed stream, the cancel answer, or the streamed POST's own terminal event), any number of
 * times. They are recorded once per project that sees them, on a row of their own, under an id
 * derived from the run itself and that project.
 * A Batch API batch is a run of the same kind: created without usage, its tokens (all its requests')
 * reported by the polls (`GET batches/{id}`) that see it finished.
 */
export interface BackgroundRun {
  /**
   * The usage row's request id: the same for every call of the project that reports this run, on
   * any instance.
   */
  rowId: string;
  usage: TokenUsage;
  model: string | null;
  /** A batch, billed at the provider's batch prices (which the catalogue does not list). */
  batch: boolean;
}

const finishedStatuses = new Set(["completed", "incomplete", "failed", "cancelled"]);
const finishedBatchStatuses = new Set(["completed", "failed", "expired", "cancelled"]);

/**
 * Whether the response is a background run, or a batch, that has finished (no tokens are added
 * after that).
 */
export function isFinishedBackgroundRun(fields: ResponseObjectFields | null | undefined): boolean {
  if (!fields || fields.status === null) return false;
  if (fields.background === true) return finishedStatuses.has(fields.status);
  return fields.object === "batch" && finishedBatchStatuses.has(fields.status);
}

/**
 * The usage row id of a finished background run, as the project `projectId` records it: `bg_` + 12
 * hex digits of its `created_at` in milliseconds + 20 hex digits of SHA-256 of the project id and
 * the run's id. Runs created later sort later, so the usage table's request_id index grows at the
 * right edge of the `bg_` range, as it does for request ids (docs/decisions/0005). The project is in
 * the digest because a run is reported to whoever polls it: two projects whose keys reach the same
 * provider account both see it finished, and each records it once, on its own row (counted for each
 * project's spend cap: the conservative side), rather than the first to poll taking it for all.
 * Null when the response is no finished background run, or its id or `created_at` cannot be read.
 */
export function backgroundRowId(
  projectId: string,
  fields: ResponseObjectFields | null | undefined,
): string | null {
  if (!fields || !isFinishedBackgroundRun(fields) || !fields.id || fields.createdAt === null) return null;
  const ms = Math.round(fields.createdAt * 1000);
  if (!(ms >= 0 && ms < 2 ** 48)) return null;
  // A project id never holds a newline (^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$): the two cannot run together.
  const digest = createHash("sha256").update(`${projectId}\n${fields.id}`).digest("hex");
  return `bg_${ms.toString(16).padStart(12, "0")}${digest.slice(0, 20)}`;
}

/**
 * The last `capacity` ids seen, the least recently seen forgotten first (an id seen again counts as
 * recent again): the background runs' rows an instance already recorded, keyed by row id, and so
 * per project and run. `add` answers whether the id was new.
 */
export function recentIds(capacity: number) {
  const ids = new Set<string>();
  return {
    add(id: string): boolean {
      const known = ids.delete(id);
      ids.add(id);
      if (ids.size > capacity) ids.delete(ids.values().next().value as string);
      return !known;
    },
  };
}

import type { Logger } from "./logger.js";
import { createSuppressionWindows, type SuppressionWindowsOptions } from "./suppression-windows.js";

/**
 * `windowMs`: one line per project, provider and reason per window; the others are counted (default 60 s).
 * `registry`: the gateway's, whose close writes the counts of the windows still open.
 */
export type ProjectReasonWindowsOptions = Partial<
  Pick<SuppressionWindowsOptions<unknown>, "windowMs" | "now" | "schedule" | "registry">
>;

/** What a windowed line is keyed by, and what its count of suppressed lines names. */
export interface ProjectReason {
  projectId: string;
  provider: string;
  reason: string;
}

/** Windows beyond this many close at once (one per project whose calls are logged so). */
const maxKeys = 1000;

/**
 * The windows of an operator's warning about one project's calls (a schema the provider refuses, an
 * output the model keeps missing): `open` says whether this call's line is the window's first, to be
 * written; the others in the window are counted, and written with `suppressedMessage` when it ends.
 */
export function createProjectReasonWindows(
  logger: Logger,
  options: ProjectReasonWindowsOptions,
  suppressedMessage: string,
) {
  const windowMs = options.windowMs ?? 60_000;
  const windows = createSuppressionWindows<ProjectReason>({
    // The test clock and timers, and the gateway's registry, as given.
    ...options,
    windowMs,
    maxKeys,
    onSuppressed: ({ projectId, provider, reason }, suppressed) =>
      logger.warn({ projectId, provider, reason, suppressed, windowMs }, suppressedMessage),
  });
  return {
    open: (facts: ProjectReason): boolean =>
      windows.open(`${facts.projectId} ${facts.provider} ${facts.reason}`, facts),
  };
}

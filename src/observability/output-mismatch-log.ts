import type { OutputMismatch } from "../structured/analyze.js";
import { storedModelName } from "../usage/stored-model-name.js";
import type { Logger } from "./logger.js";
import { createProjectReasonWindows, type ProjectReasonWindowsOptions } from "./project-reason-windows.js";

/**
 * What one structured call whose output failed the schema after the repair is logged with: never
 * the answer, the input, the schema or a path in them (they may hold personal data).
 */
export interface OutputMismatchFacts extends OutputMismatch {
  projectId: string;
  provider: string;
  /** The model the provider says answered: its text, cut at 200 characters as a usage row keeps it. */
  model: string;
}

/**
 * Logs at warn a structured call answered 502 because the model's output did not match the
 * project's output schema also after the repair (cut off, no JSON, or not matching): the error names
 * no provider, since the provider answered, so the provider failure log passes over it, yet a
 * schema the model keeps missing (or an output limit too small for it) is the operator's to see.
 * One line per project, provider and reason per window, as schema refusals are windowed; the others
 * in it are counted, and written when the window ends ("model output schema mismatches suppressed").
 */
export function createOutputMismatchLog(logger: Logger, options: ProjectReasonWindowsOptions = {}) {
  const windows = createProjectReasonWindows(logger, options, "model output schema mismatches suppressed");
  return (facts: OutputMismatchFacts, requestId: string, route: string): void => {
    const { projectId, provider, reason, keyword, mismatches, moreMismatches } = facts;
    if (!windows.open({ projectId, provider, reason })) return;
    const model = storedModelName(facts.model) ?? "";
    logger.warn(
      {
        requestId,
        projectId,
        provider,
        model,
        route,
        status: 502,
        reason,
        ...(keyword === undefined ? {} : { keyword }),
        ...(mismatches === undefined ? {} : { mismatches }),
        ...(moreMismatches ? { moreMismatches } : {}),
      },
      "model output did not match the project's output schema after the repair",
    );
  };
}

export type OutputMismatchLog = ReturnType<typeof createOutputMismatchLog>;

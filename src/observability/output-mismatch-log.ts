import type { OutputMismatch } from "../structured/analyze.js";
import { storedModelName } from "../usage/stored-model-name.js";
import type { Logger } from "./logger.js";
import { createSuppressionWindows, type SuppressionWindowsOptions } from "./suppression-windows.js";

/**
 * `windowMs`: one line per project, provider and reason per window; the others are counted (default 60 s).
 * `registry`: the gateway's, whose close writes the counts of the windows still open.
 */
export type OutputMismatchLogOptions = Partial<
  Pick<SuppressionWindowsOptions<unknown>, "windowMs" | "now" | "schedule" | "registry">
>;

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

/** Windows beyond this many close at once (one per project whose calls fail so). */
const maxKeys = 1000;

/**
 * Logs at warn a structured call answered 502 because the model's output did not match the
 * project's output schema also after the repair (cut off, no JSON, or not matching): the error names
 * no provider, since the provider answered, so the provider failure log passes over it, yet a
 * schema the model keeps missing (or an output limit too small for it) is the operator's to see.
 * One line per project, provider and reason per window, as schema refusals are windowed; the others
 * in it are counted, and written when the window ends ("model output schema mismatches suppressed").
 */
export function createOutputMismatchLog(logger: Logger, options: OutputMismatchLogOptions = {}) {
  const windowMs = options.windowMs ?? 60_000;
  const windows = createSuppressionWindows<OutputMismatchFacts>({
    // The test clock and timers, and the gateway's registry, as given.
    ...options,
    windowMs,
    maxKeys,
    onSuppressed: ({ projectId, provider, reason }, suppressed) =>
      logger.warn(
        { projectId, provider, reason, suppressed, windowMs },
        "model output schema mismatches suppressed",
      ),
  });
  return (facts: OutputMismatchFacts, requestId: string, route: string): void => {
    const { projectId, provider, reason, keyword, mismatches, moreMismatches } = facts;
    const model = storedModelName(facts.model) ?? "";
    if (!windows.open(`${projectId} ${provider} ${reason}`, { projectId, provider, reason, model })) return;
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

import type { SchemaRefusal } from "../providers/provider-refusal.js";
import type { Logger } from "./logger.js";
import { createProjectReasonWindows, type ProjectReasonWindowsOptions } from "./project-reason-windows.js";

/** What one refusal of a project's output schema is logged with: never the schema or the provider's words. */
export interface SchemaRefusalFacts {
  projectId: string;
  provider: string;
  /** Too complex for the provider, or a keyword or shape it does not take. */
  reason: SchemaRefusal;
  model: string;
}

/**
 * Logs a provider's refusal of a project's output schema at warn, for the operator: the app sees a
 * 422 (docs/decisions/0020, amended), which is no provider failure (provider-failure-log.ts logs
 * those), yet only the project's admin can fix it and every call of that project is refused until
 * then. One line per project, provider and kind per window, as provider failures are windowed; the
 * refusal lasts until the schema changes, so a longer window than theirs says enough. The others
 * in it are counted, and written when the window ends ("project output schema refusals suppressed").
 */
export function createSchemaRefusalLog(logger: Logger, options: ProjectReasonWindowsOptions = {}) {
  const windows = createProjectReasonWindows(logger, options, "project output schema refusals suppressed");
  return (facts: SchemaRefusalFacts, requestId: string, route: string): void => {
    if (!windows.open(facts)) return;
    logger.warn({ ...facts, status: 422, requestId, route }, "project output schema refused by the provider");
  };
}

export type SchemaRefusalLog = ReturnType<typeof createSchemaRefusalLog>;

import type { Config } from "./config.js";
import type { ProjectRepository } from "./storage/project-repository.js";

/** A warning the start logs: the fields of its log line and its message. */
export interface StartWarning {
  fields: Record<string, unknown>;
  message: string;
}

/**
 * What a production start (SLUICE_ENV=production) warns about, each once; none elsewhere. SPEC
 * rule 4: Test Mode is for development and testing only, so production refuses every test key
 * and the projects still in Test Mode are named, to be switched to DeviceCheck.
 */
export async function productionWarnings(
  config: Pick<Config, "environment">,
  projects: Pick<ProjectRepository, "list">,
): Promise<StartWarning[]> {
  if (config.environment !== "production") return [];
  const warnings: StartWarning[] = [];
  const inTestMode = (await projects.list())
    .filter((project) => project.testMode)
    .map((project) => project.id);
  if (inTestMode.length > 0)
    warnings.push({
      fields: { projectIds: inTestMode },
      message: `Projects still in Test Mode, whose test keys production refuses: ${inTestMode.join(", ")}. Turn it off for each (PATCH /admin/v1/projects/{id} {"testMode":false}, or sluice projects update {id} --test-mode false) and authenticate their apps with DeviceCheck`,
    });
  return warnings;
}

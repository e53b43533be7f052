import type { Config } from "./config.js";
import type { ProjectRepository } from "./storage/project-repository.js";

/** A warning the start logs: the fields of its log line and its message. */
export interface StartWarning {
  fields: Record<string, unknown>;
  message: string;
}

/**
 * What a production start (SLUICE_ENV=production) warns about, each once; none elsewhere. SPEC
 * rule 4: calls must use HTTPS, so plain HTTP with no TLS-terminating proxy declared is named
 * (requests are still served: the proxy may be one Sluice is not told of); and Test Mode is for
 * development and testing only, so production refuses every test key and the projects still in
 * Test Mode are named, to be switched to DeviceCheck.
 */
export async function productionWarnings(
  config: Pick<Config, "environment" | "tlsCert" | "trustProxy">,
  projects: Pick<ProjectRepository, "idsInTestMode">,
): Promise<StartWarning[]> {
  if (config.environment !== "production") return [];
  const warnings: StartWarning[] = [];
  if (!config.tlsCert && !config.trustProxy?.length)
    warnings.push({
      fields: { tls: false, trustProxy: false },
      message:
        "Calls must use HTTPS (they carry partial keys and tokens), but this production gateway serves plain HTTP and trusts no proxy: set SLUICE_TLS_CERT and SLUICE_TLS_KEY to serve HTTPS itself, or run it behind a TLS-terminating proxy (a load balancer, nginx) and set SLUICE_TRUST_PROXY to that proxy's address",
    });
  // Their ids alone: every project read whole (its output schema too) was 960 ms and 220 MB more at
  // each start with 20,000 projects of 4 KB schemas.
  const inTestMode = await projects.idsInTestMode();
  if (inTestMode.length > 0)
    warnings.push({
      fields: { projectIds: inTestMode },
      message: `Projects still in Test Mode, whose test keys production refuses: ${inTestMode.join(", ")}. Turn it off for each (PATCH /admin/v1/projects/{id} {"testMode":false}, or sluice projects update {id} --test-mode false) and authenticate their apps with DeviceCheck`,
    });
  return warnings;
}

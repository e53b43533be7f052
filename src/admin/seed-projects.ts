import { readFileSync } from "node:fs";
import { z } from "zod";
import { isGatewayError } from "../errors.js";
import type { ProjectAdmin } from "./project-admin.js";

/**
 * Projects as code: `SLUICE_CONFIG_FILE` names a JSON file `{"projects": [{ "id": …, …}]}` whose
 * entries use the admin API's project fields. At start each project is created when missing and
 * updated to match when present. Provider keys and test keys are not seeded (they are secrets and
 * are shown once): add them with the CLI or the admin API.
 */
const seedFile = z
  .object({ projects: z.array(z.record(z.string(), z.unknown()).and(z.object({ id: z.string() }))) })
  .strict();

export async function seedProjects(
  admin: ProjectAdmin,
  file: string,
): Promise<{ created: string[]; updated: string[] }> {
  let parsed: z.infer<typeof seedFile>;
  try {
    parsed = seedFile.parse(JSON.parse(readFileSync(file, "utf8")));
  } catch (error) {
    throw new Error(`SLUICE_CONFIG_FILE ${file} is not a valid projects file: ${(error as Error).message}`);
  }
  const created: string[] = [];
  const updated: string[] = [];
  for (const { id, ...fields } of parsed.projects) {
    try {
      await admin.getProject(id);
      await admin.updateProject(id, fields);
      updated.push(id);
    } catch (error) {
      if (!isGatewayError(error) || error.code !== "PROJECT_NOT_FOUND") throw error;
      await admin.createProject({ id, ...fields });
      created.push(id);
    }
  }
  return { created, updated };
}

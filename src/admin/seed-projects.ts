import { readFileSync } from "node:fs";
import { z } from "zod";
import { isGatewayError } from "../errors.js";
import type { ProjectAdmin } from "./project-admin.js";

/**
 * Projects as code: `SLUICE_CONFIG_FILE` names a JSON file `{"projects": [{ "id": …, …}]}` whose
 * entries use the admin API's project fields. At start each project is created when missing and
 * updated to match when present; a refused entry stops the start, naming the file and the project.
 * Provider keys and test keys are not seeded (they are secrets and are shown once): add them with
 * the CLI or the admin API (docs/api.md).
 */
const seedFile = z
  .object({ projects: z.array(z.record(z.string(), z.unknown()).and(z.object({ id: z.string() }))) })
  .strict()
  .superRefine(({ projects }, context) => {
    const seen = new Set<string>();
    projects.forEach(({ id }, index) => {
      if (seen.has(id))
        context.addIssue({
          code: "custom",
          path: ["projects", index, "id"],
          message: `${JSON.stringify(id)} is listed twice`,
        });
      seen.add(id);
    });
  });

export async function seedProjects(
  admin: ProjectAdmin,
  file: string,
): Promise<{ created: string[]; updated: string[] }> {
  const invalid = (reason: string) =>
    new Error(`SLUICE_CONFIG_FILE ${file} is not a valid projects file: ${reason}`);
  let content: unknown;
  try {
    content = JSON.parse(readFileSync(file, "utf8"));
  } catch (error) {
    // V8 quotes the text around a JSON syntax error, which may be part of a .p8 private key.
    throw invalid(
      (error as Error).message.replace(/, (?:\.\.\.)?".*" is not valid JSON$/s, " (not valid JSON)"),
    );
  }
  const result = seedFile.safeParse(content);
  if (!result.success) {
    throw invalid(
      result.error.issues.map((issue) => `${issue.path.join(".") || "(file)"}: ${issue.message}`).join("; "),
    );
  }
  const parsed = result.data;
  const created: string[] = [];
  const updated: string[] = [];
  for (const { id, ...fields } of parsed.projects) {
    try {
      if (!(await exists(admin, id)) && (await createUnlessCreated(admin, id, fields))) {
        created.push(id);
      } else {
        await admin.updateProject(id, fields);
        updated.push(id);
      }
    } catch (error) {
      throw new Error(
        `SLUICE_CONFIG_FILE ${file}: project ${JSON.stringify(id)}: ${(error as Error).message}`,
        {
          cause: error,
        },
      );
    }
  }
  return { created, updated };
}

/**
 * False when another instance seeding the same file (several starting at once on one PostgreSQL)
 * created the project between the check and this insert: it is then updated like any other.
 */
async function createUnlessCreated(
  admin: ProjectAdmin,
  id: string,
  fields: Record<string, unknown>,
): Promise<boolean> {
  try {
    await admin.createProject({ id, ...fields });
    return true;
  } catch (error) {
    if (isGatewayError(error) && error.code === "CONFLICT") return false;
    throw error;
  }
}

async function exists(admin: ProjectAdmin, id: string): Promise<boolean> {
  try {
    await admin.getProject(id);
    return true;
  } catch (error) {
    if (isGatewayError(error) && error.code === "PROJECT_NOT_FOUND") return false;
    throw error;
  }
}

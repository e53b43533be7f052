import { readFileSync } from "node:fs";
import { z } from "zod";
import { isGatewayError, listedProblems, maxProblemsListed } from "../errors.js";
import { fileNameShown, isFileContents, unreadableReason } from "../file-name-shown.js";
import { repeatedMemberProblems } from "../json-repeated-members.js";
import { jsonSyntaxProblem } from "../json-syntax.js";
import { checkProjectEntry, type ProjectAdmin, type ProjectView, problemText } from "./project-admin.js";
import { type UpdateProjectInput, updateProjectInput } from "./project-input.js";
import { fieldDiffers } from "./project-rules.js";

/**
 * Projects as code: `SLUICE_CONFIG_FILE` names a JSON file `{"projects": [{ "id": …, …}]}` whose
 * entries use the admin API's project fields. `readProjectsFile` reads it and checks what needs
 * nothing stored (the file's shape, each entry's fields and values) before the start writes
 * anything: a master key, a database. At start `seedProjects` then creates each project when
 * missing and updates it to match when it differs from the file; one that already matches is not
 * written (its updatedAt and the caches that hold it stay as they are). Every entry is checked
 * against every rule first: a refused one stops the start before any project is written, and the
 * message names the file and each refused project with its problems.
 * Provider keys and test keys are not seeded (they are secrets and are shown once): add them with
 * the CLI or the admin API (docs/api.md). The start loads this module (and zod with it) only when
 * SLUICE_CONFIG_FILE is set (deps.ts).
 */
const seedFile = z
  // Each entry an object with an id, its other fields checked later as the admin API's: one schema,
  // so an entry that is no object is said once (a record and an object both expected were two).
  .object({ projects: z.array(z.looseObject({ id: z.string() })) })
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

/** A projects file read and checked as far as it can be without the database. */
export interface ProjectsFile {
  file: string;
  projects: ReadonlyArray<{ id: string } & Record<string, unknown>>;
}

/**
 * Reads `file` and checks its shape and each entry's values; throws naming the file and every
 * problem found. Reads nothing else and writes nothing.
 */
export async function readProjectsFile(file: string): Promise<ProjectsFile> {
  const invalid = (reason: string) =>
    new Error(`SLUICE_CONFIG_FILE ${file} is not a valid projects file: ${reason}`);
  let text: string;
  try {
    // Without a UTF-8 byte order mark (Windows editors save one), which JSON.parse refuses.
    text = readFileSync(file, "utf8").replace(/^\uFEFF/, "");
  } catch (error) {
    // The projects themselves (.p8 keys among them) set in place of the file's name: not printed.
    if (isFileContents(file))
      throw new Error(
        `SLUICE_CONFIG_FILE (${fileNameShown(file)}) cannot be read (${unreadableReason(error)})`,
      );
    throw new Error(
      `SLUICE_CONFIG_FILE ${fileNameShown(file)} cannot be read (${unreadableReason(error)}): ${(error as Error).message}`,
    );
  }
  let content: unknown;
  try {
    content = JSON.parse(text);
  } catch (error) {
    // V8 quotes the text around a JSON syntax error, which may be part of a .p8 private key.
    throw invalid(jsonSyntaxProblem(error, text));
  }
  // JSON.parse kept the last of a repeated member without a word, as the admin API refuses it.
  const repeated = repeatedMemberProblems(Buffer.from(text));
  if (repeated.length > 0) throw invalid(repeated.join("; "));
  const result = seedFile.safeParse(content);
  if (!result.success) {
    throw invalid(
      listedProblems(
        result.error.issues.map(
          (issue) => `${issue.path.join(".") || "(file)"}: ${problemText(issue, content)}`,
        ),
      ).text,
    );
  }
  // The entries as the file holds them, not zod's copies: a copy leaves out a `__proto__` member
  // (setting it would set the copy's prototype), which was then dropped without a word, where the
  // admin API refuses it as any unknown field. The shape is the one seedFile checked.
  const projects = (content as { projects: ProjectsFile["projects"] }).projects;
  const refused: Refusal[] = [];
  for (const [index, { id, ...fields }] of projects.entries()) {
    try {
      await checkProjectEntry(id, fields, placeIn(index));
    } catch (error) {
      if (!isGatewayError(error)) throw seedFailure(file, id, error);
      refused.push({ id, error });
    }
  }
  if (refused.length > 0) throw refusedEntries(file, refused);
  return { file, projects };
}

export async function seedProjects(
  admin: ProjectAdmin,
  { file, projects }: ProjectsFile,
): Promise<{ created: string[]; updated: string[]; unchanged: string[] }> {
  const refused: Refusal[] = [];
  for (const [index, { id, ...fields }] of projects.entries()) {
    try {
      await admin.checkProject(id, fields, placeIn(index));
    } catch (error) {
      if (!isGatewayError(error) || error.status >= 500) throw seedFailure(file, id, error);
      refused.push({ id, error });
    }
  }
  if (refused.length > 0) throw refusedEntries(file, refused);
  const created: string[] = [];
  const updated: string[] = [];
  const unchanged: string[] = [];
  for (const { id, ...fields } of projects) {
    try {
      let stored = await find(admin, id);
      if (!stored) {
        if (await createUnlessCreated(admin, id, fields)) {
          created.push(id);
          continue;
        }
        // Another instance seeding at the same moment created it: from the same file it already
        // matches, and writing it again would move its updatedAt and drop it from that instance's
        // caches for nothing.
        stored = await find(admin, id);
      }
      if (stored && matches(stored, fields)) {
        unchanged.push(id);
      } else {
        await admin.updateProject(id, fields);
        updated.push(id);
      }
    } catch (error) {
      throw seedFailure(file, id, error);
    }
  }
  return { created, updated, unchanged };
}

interface Refusal {
  id: string;
  error: Error;
}

/** Fields named by their place in the file: `projects.1.model`, `projects.1` for the entry. */
function placeIn(index: number): (path: string) => string {
  return (path) => (path ? `projects.${index}.${path}` : `projects.${index}`);
}

/**
 * The refused entries, each with its error (whose problems listedProblems cut already), at most
 * maxProblemsListed of them: a file may hold thousands.
 */
function refusedEntries(file: string, refused: readonly Refusal[]): Error {
  const named = refused.slice(0, maxProblemsListed);
  const reasons = named.map(({ id, error }) => `project ${JSON.stringify(id)}: ${error.message}`);
  const more = refused.length - named.length;
  if (more > 0) reasons.push(`and ${more} more ${more === 1 ? "project" : "projects"} refused`);
  return new Error(`SLUICE_CONFIG_FILE ${file}: ${reasons.join("; ")}`, { cause: refused[0]?.error });
}

function seedFailure(file: string, id: string, error: unknown): Error {
  return new Error(`SLUICE_CONFIG_FILE ${file}: project ${JSON.stringify(id)}: ${(error as Error).message}`, {
    cause: error,
  });
}

/**
 * True when the entry asks for nothing the stored project does not already hold, field by field
 * (the nested deviceCheck and rateLimits too, as an update applies them). An entry the admin API
 * would refuse never matches, so the update reports why. A private key is stored sealed and never
 * shown: an entry that sets one on a project that has one cannot be compared, and is written.
 */
function matches(stored: ProjectView, fields: Record<string, unknown>): boolean {
  const parsed = updateProjectInput.safeParse(fields);
  if (!parsed.success) return false;
  const { deviceCheck = {}, rateLimits = {}, ...top }: UpdateProjectInput = parsed.data;
  const { privateKey, ...deviceCheckFields } = deviceCheck;
  if (privateKey !== undefined && (privateKey !== null || stored.deviceCheck.hasPrivateKey)) return false;
  return (
    holds(stored, top) && holds(stored.deviceCheck, deviceCheckFields) && holds(stored.rateLimits, rateLimits)
  );
}

/**
 * Whether `stored` holds each value `wanted` lists. An object (an output schema, a proxy allow-list)
 * is compared as JSON text, as the admin API's audit line compares it (fieldDiffers): members in
 * another order are another schema, as a model answers in their order, and are written.
 */
function holds(stored: object, wanted: object): boolean {
  return Object.entries(wanted).every(
    ([name, value]) => value === undefined || !fieldDiffers((stored as Record<string, unknown>)[name], value),
  );
}

/**
 * False when another instance seeding at the same moment (several starting at once on one
 * PostgreSQL) created the project between the check and this insert: it is then read again, and
 * updated only where it differs from this file (a rolling deploy's newer file, say).
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

async function find(admin: ProjectAdmin, id: string): Promise<ProjectView | null> {
  try {
    return await admin.getProject(id);
  } catch (error) {
    if (isGatewayError(error) && error.code === "PROJECT_NOT_FOUND") return null;
    throw error;
  }
}

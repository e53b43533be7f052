import { createPrivateKey, randomBytes } from "node:crypto";
import type { z } from "zod";
import { newKeyId, splitProviderKey } from "../auth/partial-key.js";
import type { SecretBox } from "../auth/secret-box.js";
import { generateTestKey, testKeyDigest } from "../auth/test-key.js";
import { GatewayError, problemsError } from "../errors.js";
import type { ProviderId } from "../providers/provider-id.js";
import type {
  KeyRepository,
  ProviderKeyRecord,
  TestKeyRecord,
  TestKeysKept,
} from "../storage/key-repository.js";
import type { Project, ProjectRepository } from "../storage/project-repository.js";
import type { UsageReportRow, UsageRepository } from "../storage/usage-repository.js";
import { ownCursor } from "./list-cursor.js";
import { mapDatabaseOutages } from "./map-database-outages.js";
import { mayBeKey, projectIdPattern, projectNotFound } from "./project-id.js";
import type * as ProjectInput from "./project-input.js";
import type { CreateProjectInput } from "./project-input.js";
import { encodeProjectListCursor, projectListLimit } from "./project-list-cursor.js";
import {
  appleSettingsChanged,
  applyChanges,
  assertTestModeAllowed,
  blankProject,
  changedFields,
  deviceCheckKeyAad,
  newProject,
  notSealed,
  type Seal,
} from "./project-rules.js";
import { checkProjectValues, type FieldName, sameName, usageReportWindow } from "./project-values.js";
import { shownMemberName, shownParameterName } from "./shown-name.js";
import { encodeUsageReportCursor, usageReportLimit, usageReportReadOn } from "./usage-report-cursor.js";

export type { FieldName } from "./project-values.js";

/** A project as shown to an admin: secrets are reduced to whether they are set. */
export type ProjectView = Omit<Project, "deviceCheck"> & {
  deviceCheck: Omit<Project["deviceCheck"], "sealedPrivateKey"> & { hasPrivateKey: boolean };
};

export interface ProviderKeyView {
  keyId: string;
  provider: ProviderId;
  label: string | null;
  createdAt: string;
  revokedAt: string | null;
}

export interface ProjectAdminDeps {
  projects: ProjectRepository;
  keys: KeyRepository;
  usage: UsageRepository;
  secretBox: SecretBox;
  now: () => Date;
  /** Called after any change so caches drop the project at once on this instance. */
  onProjectChanged: (projectId: string) => void;
  /** False in production, where no project may be put in Test Mode (SPEC rule 4). */
  testModeAllowed: boolean;
}

/**
 * A rotation keeps the new test key, the one before it, and every key issued in the minute before
 * it: rotations sent at once each answer 201 with a key, and none deletes a key another is about to
 * show (docs/api.md). A rotation a minute or more after the previous ones leaves two keys.
 */
const testKeysKept: TestKeysKept = { newest: 2, withinMs: 60_000 };
/** Each failed attempt means another update was written; ten covers any realistic burst of admins. */
const updateAttempts = 10;
/** Every key and test-key id Sluice issues has this shape; any other names none. */
const issuedKeyIdPattern = /^[A-Za-z0-9_-]{1,64}$/;

export type ProjectAdmin = ReturnType<typeof createProjectAdmin>;

let inputSchemas: Promise<typeof ProjectInput> | undefined;
/**
 * The input schemas, loaded with zod on the first input parsed: a start parses none, and loading
 * zod took a tenth of the start-up budget (docs/decisions/0005).
 */
function loadInputSchemas(): Promise<typeof ProjectInput> {
  inputSchemas ??= import("./project-input.js");
  return inputSchemas;
}

/** The administration use cases, shared by the admin HTTP API and the CLI. */
export function createProjectAdmin(deps: ProjectAdminDeps) {
  const { projects, keys, secretBox } = deps;
  const nowIso = () => deps.now().toISOString();
  // Test keys are kept newest first by created_at: two issued in one millisecond would tie, and the
  // tie would fall to the random id, so the rotation could keep the older key. Each is stamped at
  // least a millisecond after the previous one.
  let lastTestKeyAt = 0;
  const testKeyTime = () => {
    lastTestKeyAt = Math.max(deps.now().getTime(), lastTestKeyAt + 1);
    return new Date(lastTestKeyAt).toISOString();
  };

  // Ids come from URL paths and the command line: one that cannot name a record (such as one with
  // a NUL, which PostgreSQL refuses to compare) is not found, without asking the database.
  async function requireProject(id: string): Promise<Project> {
    const project = projectIdPattern.test(id) ? await projects.get(id) : null;
    if (!project) throw projectNotFound(id);
    return project;
  }

  /** A new test key of project `projectId`: the key shown once, and the record stored. */
  function newTestKey(projectId: string): { testKey: string; record: TestKeyRecord } {
    const testKey = generateTestKey();
    const testKeyId = `tk${randomBytes(8).toString("hex")}`;
    return {
      testKey,
      record: { id: testKeyId, projectId, digest: testKeyDigest(testKey), createdAt: testKeyTime() },
    };
  }

  async function issueTestKey(projectId: string): Promise<{ testKeyId: string; testKey: string }> {
    const { testKey, record } = newTestKey(projectId);
    // The project was checked first; false means it was deleted since.
    if (!(await keys.addTestKey(record, testKeysKept))) throw projectNotFound(projectId);
    return { testKeyId: record.id, testKey };
  }

  /**
   * Whether two sealed DeviceCheck keys of project `id` hold one key: the key, not the text it came
   * in (the same .p8 sent again with CRLF line endings, without its last newline or as a SEC1 PEM is
   * the same key). False when either cannot be opened or read as a key; nothing of either is quoted.
   */
  function samePrivateKey(id: string): (a: string, b: string) => boolean {
    return (a, b) => {
      let texts: Buffer[] = [];
      try {
        const aad = deviceCheckKeyAad(id);
        texts = [secretBox.open(a, aad), secretBox.open(b, aad)];
        const [first, second] = texts as [Buffer, Buffer];
        if (first.equals(second)) return true;
        return createPrivateKey({ key: first, format: "pem" }).equals(
          createPrivateKey({ key: second, format: "pem" }),
        );
      } catch {
        return false;
      } finally {
        for (const text of texts) text.fill(0);
      }
    };
  }

  /** The project `fields` create, by every rule (production's Test Mode rule too); nothing written. */
  function planNewProject(id: string, fields: CreateProjectInput, seal: Seal, fieldName: FieldName): Project {
    const { id: _id, ...changes } = fields;
    const blank = blankProject(id, nowIso());
    const project = newProject(id, changes, blank.createdAt, seal, fieldName);
    assertTestModeAllowed(blank, project, deps.testModeAllowed, fieldName);
    return project;
  }

  /**
   * Applies the changes to the project as stored and writes the result only if nothing else was
   * written since it was read (compare-and-set on updatedAt, which every write moves forward);
   * otherwise reads it again and re-applies them. So two concurrent updates never undo each other,
   * and a rule spanning fields (a vault needs a team id) is checked against what is stored. It is
   * one UPDATE statement on both engines: no lock held across round trips, no engine-specific SQL.
   */
  async function changeProject(
    id: string,
    input: unknown,
    fieldName: FieldName,
  ): Promise<{ project: ProjectView; written: boolean; changed: string[] }> {
    const { updateProjectInput } = await loadInputSchemas();
    const changes = parse(updateProjectInput, input, "project update", bodyLabels(fieldName));
    checkProjectValues(changes, fieldName);
    // No field to change: the project as it is, not a write that only moves its updatedAt (which
    // tells every instance's caches, and a compare-and-set of another admin, it changed).
    if (Object.keys(changes).length === 0)
      return { project: viewOf(await requireProject(id)), written: false, changed: [] };
    for (let attempt = 0; attempt < updateAttempts; attempt++) {
      const current = await requireProject(id);
      const updatedAt = new Date(Math.max(deps.now().getTime(), Date.parse(current.updatedAt) + 1));
      const next = applyChanges(current, changes, secretBox.seal, fieldName);
      const project: Project = { ...next, updatedAt: updatedAt.toISOString() };
      // Another Apple app from now on: the tokens verified for the old one are trusted no more.
      if (appleSettingsChanged(current, next, samePrivateKey(id)))
        project.deviceCheck.changedAt = project.updatedAt;
      assertTestModeAllowed(current, project, deps.testModeAllowed, fieldName);
      if (await projects.update(project, current.updatedAt)) {
        deps.onProjectChanged(id);
        const changed = changedFields(current, next, samePrivateKey(id));
        return { project: viewOf(project), written: true, changed };
      }
    }
    throw new GatewayError(
      "CONFLICT",
      `Project ${JSON.stringify(id)} kept changing during this update; retry`,
    );
  }

  /**
   * The labels of project `projectId`'s active provider keys that the admin input refuses now (one
   * an earlier release took holding a control, bidirectional or zero-width character), each named
   * with its key, and how to mend it: a label is not changed, so the key is added again. A revoked
   * key is not named: it is not used, nothing changes it, and it would fail every check after.
   */
  async function keyLabelProblems(projectId: string, fieldName: FieldName): Promise<string[]> {
    const label = (await loadInputSchemas()).addProviderKeyInput.shape.label;
    const problems: string[] = [];
    for (const key of await keys.listProviderKeys(projectId)) {
      if (key.revokedAt !== null || key.label === null) continue;
      const parsed = label.safeParse(key.label);
      if (parsed.success) continue;
      for (const issue of parsed.error.issues)
        problems.push(
          `${fieldName("label")} of provider key ${key.id}: ${issue.message}; a label is not changed: add the key again with another label and revoke this one`,
        );
    }
    return problems;
  }

  return mapDatabaseOutages({
    async createProject(
      input: unknown,
      fieldName: FieldName = sameName,
    ): Promise<{ project: ProjectView; testKey: string; testKeyId: string }> {
      const { createProjectInput } = await loadInputSchemas();
      const fields = parse(createProjectInput, input, "project", bodyLabels(fieldName));
      checkProjectValues(fields, fieldName);
      const id =
        fields.id ??
        `prj_${randomBytes(9)
          .toString("base64url")
          .replace(/[^A-Za-z0-9]/g, "x")}`;
      if (await projects.get(id))
        throw new GatewayError("CONFLICT", `Project ${JSON.stringify(id)} already exists`);
      const project = planNewProject(id, fields, secretBox.seal, fieldName);
      // A project is created with its test key or not at all, in one transaction: one left without
      // it (the database failed in between, or the shutdown's deadline refused the call, after which
      // no undoing delete would be sent) would answer the admin's retry with 409 and never have had
      // a key shown. The check above answers the usual case; this one the race of two admins
      // creating the same id.
      const { testKey, record } = newTestKey(id);
      if (!(await projects.insert(project, record)))
        throw new GatewayError("CONFLICT", `Project ${JSON.stringify(id)} already exists`);
      const testKeyId = record.id;
      // This instance may hold the id as "not found" (asked before, or deleted and re-created).
      deps.onProjectChanged(id);
      return { project: viewOf(project), testKey, testKeyId };
    },

    /**
     * Whether `input` would be accepted for project `id` as the file seeding sends it (created when
     * missing, else updated), by every rule, against what is stored now; writes nothing. Seeding
     * checks every entry first, so a refused one stops the start before any project is written.
     */
    async checkProject(
      id: string,
      input: Record<string, unknown>,
      fieldName: FieldName = sameName,
    ): Promise<void> {
      const { createProjectInput, updateProjectInput } = await loadInputSchemas();
      const current = await projects.get(id);
      if (current === null) {
        const fields = parse(createProjectInput, { id, ...input }, "project", bodyLabels(fieldName));
        checkProjectValues(fields, fieldName);
        planNewProject(id, fields, notSealed, fieldName);
        return;
      }
      const changes = parse(updateProjectInput, input, "project update", bodyLabels(fieldName));
      checkProjectValues(changes, fieldName);
      const next = applyChanges(current, changes, notSealed, fieldName);
      assertTestModeAllowed(current, next, deps.testModeAllowed, fieldName);
    },

    /** A route that takes no fields refuses a body with any (400 with the list, as other bodies). */
    async requireNoFields(input: unknown): Promise<void> {
      parse((await loadInputSchemas()).noFieldsInput, input, "request body");
    },

    async getProject(id: string): Promise<ProjectView> {
      return viewOf(await requireProject(id));
    },

    /**
     * A page of the project list (docs/decisions/0029): `limit` projects at most, in creation
     * order, and when more follow, `next`, the cursor that reads on after them. `parameterName`
     * says how the caller spells each parameter in its messages (the CLI's `--limit`, `--cursor`).
     */
    async listProjects(
      input: unknown = {},
      parameterName: (field: string) => string = (field) => field,
    ): Promise<ProjectList> {
      const { projectListInput } = await loadInputSchemas();
      const labels = parameterLabels(Object.keys(projectListInput.shape), parameterName);
      const query = parse(projectListInput, input, "project list query", labels);
      const after = ownCursor(query.cursor, "the project list", "Invalid project list query", parameterName);
      const limit = query.limit ?? projectListLimit.default;
      // One project more than answered, to know whether any follows.
      const found = await projects.list({ limit: limit + 1, ...(after ? { after } : {}) });
      const data = found.slice(0, limit).map(viewOf);
      const last = data[data.length - 1];
      if (found.length <= limit || !last) return { data };
      return { data, next: encodeProjectListCursor({ createdAt: last.createdAt, id: last.id }) };
    },

    /**
     * Checks every stored project by the rules this build applies where it is used (a structured
     * call's check of the output schema, for each route's model) and where it is changed (the admin
     * input's types and bounds, the rules across fields, its active provider keys' labels): a value
     * an earlier release stored and a rule added since refuses. Reads the projects a page of `pageSize` at a time, in the list's
     * order, and lets the event loop run after each project (its schema may take a while to compile),
     * so neither the projects nor their problems are held all at once. `report` hears each project
     * with a problem as it is found; when it answers false (the output can take no more) the check
     * stops there. Answers how many projects were checked and how many had a problem.
     */
    async checkStoredProjects(
      report: (found: { id: string; problems: string[] }) => Promise<boolean>,
      fieldName: FieldName = sameName,
      pageSize: number = projectListLimit.default,
    ): Promise<{ checked: number; withProblems: number; stopped: boolean }> {
      const { updateProjectInput } = await loadInputSchemas();
      const { compilingEachSchemaOnce, storedFields, storedProjectProblems } = await import(
        "./stored-project-problems.js"
      );
      // A schema many projects hold is compiled once: compiling is nearly all of the check's time.
      const compile = compilingEachSchemaOnce();
      const labels = bodyLabels(fieldName);
      let [checked, withProblems] = [0, 0];
      let after: { createdAt: string; id: string } | undefined;
      for (;;) {
        const page = await projects.list({ limit: pageSize, ...(after ? { after } : {}) });
        for (const project of page) {
          checked++;
          const fields = storedFields(project);
          const parsed = updateProjectInput.safeParse(fields);
          const problems = [
            ...(parsed.success
              ? []
              : withoutFollowOns(parsed.error.issues).flatMap((issue) => labels(issue, fields))),
            ...storedProjectProblems(project, fieldName, compile),
            ...(await keyLabelProblems(project.id, fieldName)),
          ];
          if (problems.length > 0) {
            withProblems++;
            if (!(await report({ id: project.id, problems })))
              return { checked, withProblems, stopped: true };
          }
          await new Promise((resolve) => setImmediate(resolve));
        }
        const last = page.at(-1);
        if (page.length < pageSize || !last) return { checked, withProblems, stopped: false };
        after = { createdAt: last.createdAt, id: last.id };
      }
    },

    /** Applies the changes to the project as stored (changeProject): the project as written. */
    async updateProject(id: string, input: unknown, fieldName: FieldName = sameName): Promise<ProjectView> {
      return (await changeProject(id, input, fieldName)).project;
    },

    /**
     * `updateProject`, answering also whether it wrote the project and the fields whose value that
     * changed (changedFields), for the audit line: none when each field was set to its value.
     */
    changeProject: (id: string, input: unknown, fieldName: FieldName = sameName) =>
      changeProject(id, input, fieldName),

    async deleteProject(id: string): Promise<void> {
      if (!projectIdPattern.test(id) || !(await projects.delete(id))) throw projectNotFound(id);
      deps.onProjectChanged(id);
    },

    /** Issues a new test key; the previous one keeps working until the next rotation. */
    async rotateTestKey(projectId: string): Promise<{ testKeyId: string; testKey: string }> {
      await requireProject(projectId);
      const issued = await issueTestKey(projectId);
      deps.onProjectChanged(projectId);
      return issued;
    },

    async listTestKeys(projectId: string): Promise<Array<{ testKeyId: string; createdAt: string }>> {
      await requireProject(projectId);
      return (await keys.listTestKeys(projectId)).map((key) => ({
        testKeyId: key.id,
        createdAt: key.createdAt,
      }));
    },

    async revokeTestKey(projectId: string, testKeyId: string): Promise<void> {
      await requireProject(projectId);
      if (!issuedKeyIdPattern.test(testKeyId) || !(await keys.deleteTestKey(projectId, testKeyId)))
        throw new GatewayError("NOT_FOUND", "No such test key");
      deps.onProjectChanged(projectId);
    },

    /** Splits and stores a provider key; the partial key is returned this once and never again. */
    async addProviderKey(
      projectId: string,
      input: unknown,
      fieldName: FieldName = sameName,
    ): Promise<ProviderKeyView & { partialKey: string }> {
      const { addProviderKeyInput } = await loadInputSchemas();
      const fields = parse(addProviderKeyInput, input, "provider key", bodyLabels(fieldName));
      await requireProject(projectId);
      const keyId = newKeyId();
      const split = splitProviderKey(keyId, fields.apiKey);
      const record: ProviderKeyRecord = {
        id: keyId,
        projectId,
        provider: fields.provider,
        label: fields.label ?? null,
        sealedServerShare: secretBox.seal(
          split.serverShare,
          providerKeyAad(projectId, fields.provider, keyId),
        ),
        clientShareDigest: split.clientShareDigest,
        createdAt: nowIso(),
        revokedAt: null,
      };
      split.serverShare.fill(0);
      if (!(await keys.insertProviderKey(record))) throw projectNotFound(projectId);
      // The project's model lists name the providers it holds keys for.
      deps.onProjectChanged(projectId);
      return { ...keyView(record), partialKey: split.partialKey };
    },

    async listProviderKeys(projectId: string): Promise<ProviderKeyView[]> {
      await requireProject(projectId);
      return (await keys.listProviderKeys(projectId)).map(keyView);
    },

    async revokeProviderKey(projectId: string, keyId: string): Promise<void> {
      await requireProject(projectId);
      if (!issuedKeyIdPattern.test(keyId) || !(await keys.revokeProviderKey(projectId, keyId, nowIso()))) {
        throw new GatewayError("NOT_FOUND", "No such active provider key in this project");
      }
      deps.onProjectChanged(projectId);
    },

    /**
     * `parameterName` says how the caller spells each field in its messages: the admin API's query
     * parameters are the field names, the CLI's flags are `--from`, `--to`, `--group-by`.
     */
    async usageReport(
      projectId: string,
      input: unknown,
      parameterName: (field: string) => string = (field) => field,
    ): Promise<UsageReport> {
      const { usageQueryInput } = await loadInputSchemas();
      const labels = parameterLabels(Object.keys(usageQueryInput.shape), parameterName);
      const query = parse(usageQueryInput, input, "usage query", labels);
      const project = await requireProject(projectId);
      const window = usageReportWindow(query, deps.now(), parameterName);
      const [from, to] = [window.from.toISOString(), window.to.toISOString()];
      const { cursor, groupBy } = usageReportReadOn(query, { projectId, from, to }, parameterName);
      const limit = query.limit ?? usageReportLimit.default;
      // Rows from the project's creation on: those before it were a project deleted under its id
      // (its rows stay), or failed attempts on the id before it existed.
      const created = Date.parse(project.createdAt);
      const since = new Date(Math.max(window.from.getTime(), created)).toISOString();
      // One group more than answered, to know whether any follows.
      const rows =
        since < to
          ? await deps.usage.report({
              projectId,
              from: since,
              to,
              // Nor the calls begun before it that ended after (rows are stamped at a call's end),
              // whether the window starts at the creation or after it.
              begunFrom: project.createdAt,
              groupBy,
              limit: limit + 1,
              after: cursor?.after,
            })
          : [];
      if (rows.length <= limit) return { from, to, groupBy, rows };
      const page = rows.slice(0, limit);
      // The last group answered is never null (the null group comes last): one follows it.
      const after = page[page.length - 1]?.group as string;
      return {
        from,
        to,
        groupBy,
        rows: page,
        next: encodeUsageReportCursor({ projectId, groupBy, from, to, after }),
      };
    },
  });
}

/**
 * A usage report: `limit` groups at most, and when more follow, `next`, the cursor to pass to read
 * on; left out on the last page, so a report of few groups is answered as before pages existed.
 */
export interface UsageReport {
  from: string;
  to: string;
  groupBy: string;
  rows: UsageReportRow[];
  next?: string;
}

/**
 * A page of the project list: `limit` projects at most, and when more follow, `next`, the cursor to
 * pass to read on; left out on the last page, so a list of few projects is answered as before pages.
 */
export interface ProjectList {
  data: ProjectView[];
  next?: string;
}

/**
 * The checks on a project `checkProject` makes that need nothing stored: the id's form, each
 * field's type and form, the model name, the output schema, the DeviceCheck key. A file of projects
 * (SLUICE_CONFIG_FILE) is checked so before the master key or the database is touched; whether an
 * entry may create or update its project is `checkProject`'s, once the database is open.
 */
export async function checkProjectEntry(
  id: string,
  input: Record<string, unknown>,
  fieldName: FieldName = sameName,
): Promise<void> {
  const entry = (await loadInputSchemas()).createProjectInput.partial({ name: true, provider: true });
  checkProjectValues(parse(entry, { id, ...input }, "project", bodyLabels(fieldName)), fieldName);
}

/**
 * The AAD that binds a sealed server share to its project, the provider its row names and its key
 * (decision 0053): none of the three holds a colon, so no two places share an AAD.
 */
export function providerKeyAad(projectId: string, provider: string, keyId: string): string {
  return `provider-key:${projectId}:${provider}:${keyId}`;
}

/**
 * The AAD server shares were sealed with before it named the provider: still tried after
 * `providerKeyAad`, so they open until `sluice master-key reseal` seals them again.
 */
export function formerProviderKeyAad(projectId: string, keyId: string): string {
  return `provider-key:${projectId}:${keyId}`;
}

/** Each problem of an invalid input (`input`, as sent) as `<where>: <what is wrong>`. */
type ProblemLabels = (issue: z.core.$ZodIssue, input: unknown) => string[];

/** A JSON body's problems: the field as the caller names it, or "(body)" for the body as a whole. */
function bodyLabels(fieldName: FieldName): ProblemLabels {
  return (issue, input) => {
    const path = issue.path.join(".");
    return [`${path ? fieldName(path) : fieldName("") || "(body)"}: ${problemText(issue, input)}`];
  };
}

/**
 * What is wrong with the value `issue` is about, in `input` as sent: a field left out "is required"
 * (with the values allowed, for a field that takes a few), as the CLI names a missing flag, not
 * zod's "expected string, received undefined"; unknown members with a name that may be a key, by
 * its start and length (`shownMemberName`); otherwise zod's message.
 */
export function problemText(issue: z.core.$ZodIssue, input: unknown): string {
  if (issue.code === "unrecognized_keys" && issue.keys.some(mayBeKey))
    return `Unrecognized key${issue.keys.length === 1 ? "" : "s"}: ${issue.keys.map(shownMemberName).join(", ")}`;
  if (issue.path.length === 0 || valueAt(input, issue.path) !== undefined) return issue.message;
  const allowed =
    issue.code === "invalid_value" ? ` (${issue.message.replace(/^Invalid option: /, "")})` : "";
  return `is required${allowed}`;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) value = (value as Record<PropertyKey, unknown> | undefined)?.[key];
  return value;
}

/** Query parameters' problems, each named as the caller spells it; an unknown one is named too. */
function parameterLabels(parameters: string[], parameterName: (field: string) => string): ProblemLabels {
  const known = parameters.map(parameterName).join(", ");
  return (issue) => {
    if (issue.code === "unrecognized_keys")
      return issue.keys.map(
        (key) => `${shownParameterName(key)}: unknown parameter (the parameters are ${known})`,
      );
    const field = issue.path.join(".");
    return [`${field ? parameterName(field) : "(parameters)"}: ${issue.message}`];
  };
}

function parse<T>(
  schema: z.ZodType<T>,
  input: unknown,
  what: string,
  labels: ProblemLabels = bodyLabels(sameName),
): T {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const problems = withoutFollowOns(result.error.issues).flatMap((issue) => labels(issue, input));
  throw problemsError("BAD_REQUEST", `Invalid ${what}`, problems);
}

/**
 * The issues without those about a value already named as of the wrong type: zod runs a string's
 * length checks on anything with a length, so a list given for a name was also "too short".
 */
function withoutFollowOns(issues: z.core.$ZodIssue[]): z.core.$ZodIssue[] {
  const ofWrongType = new Set(
    issues.filter((issue) => issue.code === "invalid_type").map((issue) => JSON.stringify(issue.path)),
  );
  return issues.filter(
    (issue) => issue.code === "invalid_type" || !ofWrongType.has(JSON.stringify(issue.path)),
  );
}

function viewOf(project: Project): ProjectView {
  const { sealedPrivateKey, ...deviceCheck } = project.deviceCheck;
  return { ...project, deviceCheck: { ...deviceCheck, hasPrivateKey: sealedPrivateKey !== null } };
}

function keyView(record: ProviderKeyRecord): ProviderKeyView {
  return {
    keyId: record.id,
    provider: record.provider,
    label: record.label,
    createdAt: record.createdAt,
    revokedAt: record.revokedAt,
  };
}

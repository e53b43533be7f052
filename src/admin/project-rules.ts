import { GatewayError } from "../errors.js";
import type { Project } from "../storage/project-repository.js";
import { routeModels } from "../structured/model-choice.js";
import { catalogueProviderOf, findModel } from "../usage/model-catalogue.js";
import type { CreateProjectInput, UpdateProjectInput } from "./project-input.js";
import {
  assertOutputSchemaOnRoutes,
  checkProjectValues,
  type FieldName,
  sameName,
} from "./project-values.js";

/**
 * A project's rules across its fields (a vault needs a team id, DeviceCheck needs its ids and key,
 * a model of the project's provider, Test Mode and production), applied to a project as it is:
 * pure, so the admin use cases check a change against what is stored, and the CLI and the projects
 * file check a new project before anything is opened or written.
 */

export function deviceCheckKeyAad(projectId: string): string {
  return `devicecheck-key:${projectId}`;
}

/** Seals a secret for storage (the secret box's `seal`; a check that stores nothing passes `notSealed`). */
export type Seal = (plaintext: Buffer, aad: string) => string;
/** Stands in for a sealed value where nothing is stored: set, so rules that need one hold. */
export const notSealed: Seal = () => "not-sealed";

export function blankProject(id: string, at: string): Project {
  return {
    id,
    name: "",
    teamId: null,
    provider: "provider-a",
    model: null,
    testMode: false,
    deviceCheck: {
      enabled: false,
      teamId: null,
      keyId: null,
      sealedPrivateKey: null,
      environment: "production",
      tokenMode: "cached",
      changedAt: null,
    },
    outputSchema: null,
    saveImagesToVault: false,
    rateLimits: { perMinute: null, devicePerMinute: null },
    monthlySpendCapUsd: null,
    proxyAllowList: null,
    disabled: false,
    createdAt: at,
    updatedAt: at,
  };
}

/** A new project as `fields` describe it, every rule across its fields checked (nothing is read). */
export function newProject(
  id: string,
  fields: Omit<CreateProjectInput, "id">,
  at: string,
  seal: Seal,
  fieldName: FieldName,
): Project {
  return applyChanges(blankProject(id, at), fields, seal, fieldName);
}

/**
 * Every rule a new project's fields must pass that reads nothing stored: its values and the rules
 * across them. The CLI runs it before it opens the database, so such a project is a usage error.
 * Answers the project planned (nothing sealed), for the rules that read the settings too
 * (production's Test Mode rule, assertTestModeAllowed).
 */
export function checkNewProject(fields: CreateProjectInput, fieldName: FieldName = sameName): Project {
  checkProjectValues(fields, fieldName);
  const { id = "new", ...changes } = fields;
  return newProject(id, changes, new Date(0).toISOString(), notSealed, fieldName);
}

/** Rules across fields and on values a schema cannot check; messages name fields as `fieldName` does. */
export function applyChanges(
  current: Project,
  changes: UpdateProjectInput,
  seal: Seal,
  fieldName: FieldName,
): Project {
  const next: Project = {
    ...current,
    deviceCheck: { ...current.deviceCheck },
    rateLimits: { ...current.rateLimits },
  };
  if (changes.name !== undefined) next.name = changes.name;
  if (changes.teamId !== undefined) next.teamId = changes.teamId;
  if (changes.provider !== undefined) next.provider = changes.provider;
  if (changes.model !== undefined) next.model = changes.model;
  if (changes.testMode !== undefined) next.testMode = changes.testMode;
  if (changes.saveImagesToVault !== undefined) next.saveImagesToVault = changes.saveImagesToVault;
  if (changes.monthlySpendCapUsd !== undefined) next.monthlySpendCapUsd = changes.monthlySpendCapUsd;
  // Replaced whole, never merged: a PATCH states the list it leaves (checkProjectValues checked it).
  if (changes.proxyAllowList !== undefined) next.proxyAllowList = changes.proxyAllowList;
  if (changes.disabled !== undefined) next.disabled = changes.disabled;
  if (changes.rateLimits?.perMinute !== undefined) next.rateLimits.perMinute = changes.rateLimits.perMinute;
  if (changes.rateLimits?.devicePerMinute !== undefined)
    next.rateLimits.devicePerMinute = changes.rateLimits.devicePerMinute;
  // Its values (model, output schema, DeviceCheck key) were checked by checkProjectValues.
  if (changes.outputSchema !== undefined) next.outputSchema = changes.outputSchema;
  // The provider's own rules (provider C refuses some schemas on every call, provider B some on some
  // models), where the schema and the provider meet, or provider B's model: a change to one of them.
  // For the model of each structured route, which may differ (/v1/pdf's where the project's model
  // reads no PDFs): a schema refused for one route would fail its every call. Not otherwise, so a
  // project stored before this rule keeps taking updates; its calls answer 422 before any provider
  // call (structured-routes.ts), which checks again, as the catalogue or the rules may change.
  const modelRule = next.provider === "provider-b" && next.model !== current.model;
  if (next.outputSchema && (changes.outputSchema || next.provider !== current.provider || modelRule))
    assertOutputSchemaOnRoutes(next.outputSchema, next.provider, routeModels(next, next.provider));
  // Checked only when the pair changes, so a project stored before this rule keeps taking updates.
  if (next.provider !== current.provider || next.model !== current.model)
    assertModelOfProvider(next, fieldName);
  applyDeviceCheck(next, changes.deviceCheck, seal, fieldName);
  if (next.saveImagesToVault && !next.teamId) {
    const why = "(it is the first segment of the vault path)";
    throw new GatewayError(
      "VALIDATION_ERROR",
      `${fieldName("saveImagesToVault")} needs a ${fieldName("teamId")} ${why}`,
      {
        details: {
          problems: [`${fieldName("teamId")}: ${requiredWhen("saveImagesToVault", fieldName)} ${why}`],
        },
      },
    );
  }
  return next;
}

/**
 * Whether `next` asks Apple about another app than `current`: another team id, key id, .p8 key or
 * environment (Apple's development host knows other tokens than its production one). A device token
 * Apple verified under the old settings is then no credential of the project: `changedAt` says
 * since when the ledger may trust one (device-token-verifier.ts). `samePrivateKey` tells whether
 * two sealed keys hold the same key: a key sent again is sealed anew, into another text.
 */
export function appleSettingsChanged(
  current: Project,
  next: Project,
  samePrivateKey: (a: string, b: string) => boolean,
): boolean {
  const before = current.deviceCheck;
  const after = next.deviceCheck;
  if (before.teamId !== after.teamId || before.keyId !== after.keyId) return true;
  if (before.environment !== after.environment) return true;
  if (before.sealedPrivateKey === after.sealedPrivateKey) return false;
  if (before.sealedPrivateKey === null || after.sealedPrivateKey === null) return true;
  return !samePrivateKey(before.sealedPrivateKey, after.sealedPrivateKey);
}

/** A project's fields an update sets, other than its nested ones, each named as the admin API names it. */
const topFields = {
  name: true,
  teamId: true,
  provider: true,
  model: true,
  testMode: true,
  outputSchema: true,
  saveImagesToVault: true,
  monthlySpendCapUsd: true,
  proxyAllowList: true,
  disabled: true,
} satisfies Record<
  Exclude<keyof Project, "id" | "createdAt" | "updatedAt" | "deviceCheck" | "rateLimits">,
  true
>;
const deviceCheckFields = {
  enabled: true,
  teamId: true,
  keyId: true,
  environment: true,
  tokenMode: true,
} satisfies Record<Exclude<keyof Project["deviceCheck"], "sealedPrivateKey" | "changedAt">, true>;
const rateLimitFields = { perMinute: true, devicePerMinute: true } satisfies Record<
  keyof Project["rateLimits"],
  true
>;

/**
 * The fields whose value `next` changes, sorted, by the names the admin API gives them (a member of
 * `deviceCheck` or `rateLimits` by its path: `rateLimits.perMinute`), for the audit line. A field
 * set to the value stored is no change; an output schema or allow-list is compared as stored (its
 * JSON text: members in another order are another schema, as a model answers in their order), a
 * DeviceCheck key by the key it seals (each sealing of one key differs).
 */
export function changedFields(
  current: Project,
  next: Project,
  samePrivateKey: (a: string, b: string) => boolean,
): string[] {
  const changed = [
    ...Object.keys(topFields).filter((name) =>
      fieldDiffers(current[name as keyof typeof topFields], next[name as keyof typeof topFields]),
    ),
    ...membersChanged("deviceCheck", deviceCheckFields, current.deviceCheck, next.deviceCheck),
    ...membersChanged("rateLimits", rateLimitFields, current.rateLimits, next.rateLimits),
  ];
  const [before, after] = [current.deviceCheck.sealedPrivateKey, next.deviceCheck.sealedPrivateKey];
  if (before !== after && (before === null || after === null || !samePrivateKey(before, after)))
    changed.push("deviceCheck.privateKey");
  return changed.sort();
}

/**
 * Whether a field's two values differ as stored: an object (an output schema, a proxy allow-list) by
 * its JSON text, so members in another order differ (a model answers in their order); any other
 * value by itself.
 */
export function fieldDiffers(a: unknown, b: unknown): boolean {
  return (
    a !== b && (typeof a !== "object" || typeof b !== "object" || JSON.stringify(a) !== JSON.stringify(b))
  );
}

/** The members of `names` whose value differs between `before` and `after`, each by its path (`group.name`). */
function membersChanged<T extends object>(
  group: string,
  names: Partial<Record<keyof T, true>>,
  before: T,
  after: T,
) {
  return (Object.keys(names) as Array<keyof T & string>)
    .filter((name) => before[name] !== after[name])
    .map((name) => `${group}.${name}`);
}

/**
 * Production puts no project in Test Mode (SPEC rule 4: development and testing only). A project
 * already in it may still be changed, and turned off; its test keys are refused all the same.
 */
export function assertTestModeAllowed(
  current: Project,
  next: Project,
  allowed: boolean,
  fieldName: FieldName,
): void {
  if (allowed || !next.testMode || current.testMode) return;
  const rule = "cannot be turned on in production (SLUICE_ENV=production)";
  throw new GatewayError(
    "VALIDATION_ERROR",
    `${fieldName("testMode")} ${rule}: Test Mode is for development and testing only`,
    {
      details: {
        problems: [`${fieldName("testMode")}: ${rule}`],
        field: "testMode",
        environment: "production",
      },
    },
  );
}

/**
 * A model the catalogue lists under another provider could only fail later, as the provider's 502;
 * a model no provider lists (a custom or newer name) is the admin's call and stays allowed.
 */
function assertModelOfProvider(project: Pick<Project, "provider" | "model">, fieldName: FieldName): void {
  const rule = modelOfOtherProvider(project);
  if (!rule) return;
  const { provider, model } = project;
  throw new GatewayError("VALIDATION_ERROR", `model ${rule.text}`, {
    details: {
      problems: [`${fieldName("model")}: ${rule.text}`],
      model,
      provider,
      modelProvider: rule.modelProvider,
    },
  });
}

/**
 * Why `model` cannot serve the project's provider (the catalogue lists it under another), or null:
 * `"gpt-4.1" is a provider-a model; this project's provider is provider-b`.
 */
export function modelOfOtherProvider({
  provider,
  model,
}: Pick<Project, "provider" | "model">): { text: string; modelProvider: string } | null {
  if (!model || findModel(provider, model)) return null;
  const modelProvider = catalogueProviderOf(model);
  if (!modelProvider) return null;
  return {
    text: `${JSON.stringify(model)} is a ${modelProvider} model; this project's provider is ${provider}`,
    modelProvider,
  };
}

/** A rule across fields, as a problem of the field it needs: `is required when deviceCheck.enabled is true`. */
function requiredWhen(path: string, fieldName: FieldName): string {
  return `is required when ${fieldName(path)} is true`;
}

function applyDeviceCheck(
  next: Project,
  changes: UpdateProjectInput["deviceCheck"],
  seal: Seal,
  fieldName: FieldName,
): void {
  if (!changes) return;
  const deviceCheck = next.deviceCheck;
  if (changes.enabled !== undefined) deviceCheck.enabled = changes.enabled;
  if (changes.teamId !== undefined) deviceCheck.teamId = changes.teamId;
  if (changes.keyId !== undefined) deviceCheck.keyId = changes.keyId;
  if (changes.environment !== undefined) deviceCheck.environment = changes.environment;
  if (changes.tokenMode !== undefined) deviceCheck.tokenMode = changes.tokenMode;
  if (changes.privateKey === null) deviceCheck.sealedPrivateKey = null;
  else if (changes.privateKey !== undefined) {
    deviceCheck.sealedPrivateKey = seal(Buffer.from(changes.privateKey, "utf8"), deviceCheckKeyAad(next.id));
  }
  if (deviceCheck.enabled && (!deviceCheck.teamId || !deviceCheck.keyId || !deviceCheck.sealedPrivateKey)) {
    // Named within deviceCheck, as the API's body nests them: `teamId`, or the CLI's flag.
    const inDeviceCheck = (field: string) => fieldName(`deviceCheck.${field}`).replace(/^deviceCheck\./, "");
    // details.problems: each field still missing, by its whole path, as a single field's refusal.
    const needed = requiredWhen("deviceCheck.enabled", fieldName);
    const problems = [
      ...(deviceCheck.teamId ? [] : [`${fieldName("deviceCheck.teamId")}: ${needed}`]),
      ...(deviceCheck.keyId ? [] : [`${fieldName("deviceCheck.keyId")}: ${needed}`]),
      ...(deviceCheck.sealedPrivateKey
        ? []
        : [`${fieldName("deviceCheck.privateKey")}: ${needed} (the .p8 file's contents)`]),
    ];
    throw new GatewayError(
      "VALIDATION_ERROR",
      `Device Check needs ${inDeviceCheck("teamId")}, ${inDeviceCheck("keyId")} and ${inDeviceCheck("privateKey")} (the .p8 file's contents) when enabled`,
      { details: { problems } },
    );
  }
}

import { createHash } from "node:crypto";
import { isGatewayError } from "../errors.js";
import { isModelName, modelNameRule } from "../providers/model-name.js";
import { isProviderId } from "../providers/provider-id.js";
import { proxyAllowListProblems } from "../proxy/proxy-allow-list.js";
import { type Project, unreadableAllowList } from "../storage/project-repository.js";
import { routeModels } from "../structured/model-choice.js";
import { checkOutputSchema } from "../structured/output-schema.js";
import { compileUnkept } from "../structured/schema-validator.js";
import { applyChanges, modelOfOtherProvider, notSealed } from "./project-rules.js";
import type { FieldName } from "./project-values.js";

/**
 * A stored project's fields as the admin API takes them, for its input schema to check: what an
 * earlier release stored is read back as it is, and a value a rule added since refuses is named as
 * the admin API would name it (a spend cap finer than a billionth, a rate limit out of bounds). The
 * DeviceCheck key is sealed: whether one is set is checked by the rules across fields.
 */
export function storedFields(project: Project): Record<string, unknown> {
  const { sealedPrivateKey: _sealed, changedAt: _changedAt, ...deviceCheck } = project.deviceCheck;
  const { id: _id, createdAt: _createdAt, updatedAt: _updatedAt, ...fields } = project;
  return { ...fields, deviceCheck };
}

/**
 * Why a stored project fails where it is used, by the rules this build applies, beyond its fields'
 * types and bounds (the input schema's, checked by the caller): the output schema for the model of
 * each structured route, as the call checks it before any provider call (422 on /v1/text, /v1/vision
 * and /v1/pdf otherwise); the model name's form, and a model the catalogue lists under another
 * provider; the proxy allow-list's rules (one that no longer parses allows nothing), and a stored
 * list that is no JSON object (read as one that allows nothing); DeviceCheck
 * without its ids and key, a vault without a team id. Empty when it has none. Problems name fields as
 * `fieldName` does; an output schema's names that may be keys are shown by their start and length
 * only, as the structured calls' 422 shows them. Pure: nothing is read or written. `compile`
 * compiles the output schema, throwing what the compiler throws: by default compileUnkept; a check
 * of many projects passes one that compiles each distinct schema once (compilingEachSchemaOnce).
 */
export function storedProjectProblems(
  project: Project,
  fieldName: FieldName,
  compile: (schema: Record<string, unknown>) => void = compileUnkept,
): string[] {
  const problems: string[] = [];
  const { model, provider } = project;
  if (model !== null && !isModelName(model)) problems.push(`${fieldName("model")}: ${modelNameRule}`);
  else if (isProviderId(provider)) {
    const other = modelOfOtherProvider(project);
    if (other) problems.push(`${fieldName("model")}: ${other.text}`);
  }
  if (project.outputSchema !== null && isProviderId(provider))
    problems.push(...outputSchemaProblems(project, fieldName, compile));
  const allowList = project.proxyAllowList;
  if (allowList !== null && unreadableAllowList(allowList))
    problems.push(
      `${fieldName("proxyAllowList")}: the stored list is not a JSON object of rules by provider, so it allows no proxied call`,
    );
  // A list of another shape is the input schema's problem: its rules are not read here.
  if (
    allowList !== null &&
    Object.values(allowList).every(
      (rules) => Array.isArray(rules) && rules.every((rule) => typeof rule === "string"),
    )
  )
    problems.push(...proxyAllowListProblems(allowList, (path) => fieldName(`proxyAllowList.${path}`)));
  // The rules across fields, each on its own so that one does not hide the other: DeviceCheck's
  // (run by any change of it: none here) and the vault's.
  problems.push(
    ...ruleProblems(() =>
      applyChanges({ ...project, saveImagesToVault: false }, { deviceCheck: {} }, notSealed, fieldName),
    ),
    ...ruleProblems(() =>
      applyChanges(
        { ...project, deviceCheck: { ...project.deviceCheck, enabled: false } },
        {},
        notSealed,
        fieldName,
      ),
    ),
  );
  return problems;
}

/**
 * The output schema's problems for the model each structured route sends (routeModels, as the call
 * chooses it), one line per problem and model: `outputSchema on /v1/text and /v1/pdf (model m): …`.
 */
function outputSchemaProblems(
  project: Project,
  fieldName: FieldName,
  compile: (schema: Record<string, unknown>) => void,
): string[] {
  const schema = project.outputSchema as Record<string, unknown>;
  // Compiled once for every model (the schema compiles alike for each provider), and not kept: the
  // cache the calls use would otherwise hold every project's.
  let compiled: { error: unknown } | undefined;
  const compileOnce = () => {
    if (compiled === undefined) {
      try {
        compile(schema);
        compiled = { error: undefined };
      } catch (error) {
        compiled = { error };
      }
    }
    if (compiled.error !== undefined) throw compiled.error;
  };
  const byModel = new Map<string, { routes: string[]; problems: string[] }>();
  for (const { route, model } of routeModels(project, project.provider)) {
    let entry = byModel.get(model);
    if (!entry) {
      entry = { routes: [], problems: checkOutputSchema(schema, project.provider, model, compileOnce) };
      byModel.set(model, entry);
    }
    entry.routes.push(route);
  }
  return [...byModel].flatMap(([model, { routes, problems }]) =>
    problems.map(
      (problem) => `${fieldName("outputSchema")} on ${listed(routes)} (model ${model}): ${problem}`,
    ),
  );
}

/**
 * `compile` (by default compileUnkept), run once for each distinct schema of a check of many
 * projects: a schema another project holds too (projects made from one template, the same SDK's
 * schema) answers as its first compile did, throwing the same error, and is not compiled again.
 * Compiling is nearly all of the check's time (Ajv's code generation: ~17 ms for a schema of 4 KB,
 * decision 0038) and its outcome depends on the schema alone, so this changes no verdict. The
 * outcomes of the last `limit` schemas are kept, each by the SHA-256 of its JSON (not the JSON:
 * 20,000 schemas of 20 KB would hold 400 MB), least recently used dropped first. A schema holding
 * a number JSON does not write as itself (Infinity, from `1e999`, and -0 are written as `null` and
 * `0`, which the compiler may answer otherwise) is compiled each time, as before.
 */
export function compilingEachSchemaOnce(
  compile: (schema: Record<string, unknown>) => void = compileUnkept,
  limit = 10_000,
): (schema: Record<string, unknown>) => void {
  const outcomes = new Map<string, { error: unknown }>();
  return (schema) => {
    let exact = true;
    const json = JSON.stringify(schema, (_key, value: unknown) => {
      if (typeof value === "number" && (!Number.isFinite(value) || Object.is(value, -0))) exact = false;
      return value;
    });
    if (!exact) return compile(schema);
    const key = createHash("sha256").update(json).digest("base64");
    let outcome = outcomes.get(key);
    if (outcome) outcomes.delete(key);
    else {
      try {
        compile(schema);
        outcome = { error: undefined };
      } catch (error) {
        outcome = { error };
      }
      const oldest = outcomes.keys().next();
      if (outcomes.size >= limit && !oldest.done) outcomes.delete(oldest.value);
    }
    outcomes.set(key, outcome);
    if (outcome.error !== undefined) throw outcome.error;
  };
}

/** `a`, `a and b`, `a, b and c`. */
function listed(names: string[]): string {
  return names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
}

/** The problems of a rule that throws a 422 naming them (`details.problems`), or its message. */
function ruleProblems(check: () => unknown): string[] {
  try {
    check();
    return [];
  } catch (error) {
    if (!isGatewayError(error)) throw error;
    const listed = (error.details as { problems?: unknown } | undefined)?.problems;
    return Array.isArray(listed) ? listed.map(String) : [error.message];
  }
}

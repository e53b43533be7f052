/**
 * Providers' own rules on an output schema, beyond the subset every provider takes
 * (output-schema.ts): what the provider's API or the AI SDK's converter would refuse on every call.
 * Provider C's per schema (`providerCRules`, called by the walk) and across references; provider B's
 * over the whole schema.
 */

import { shownMemberName } from "../admin/shown-name.js";
import { resolveJsonPointer } from "./resolve-json-pointer.js";
import { shownSchemaName } from "./schema-name-shown.js";
import { isSchema, nestingKeywords, type Schema } from "./schema-walk.js";

/** Provider B's structured outputs compile at most this many union-typed parameters. */
const providerBUnionLimit = 16;
/** Over this many optional properties, the AI SDK sends provider B the schema as a `json` tool. */
const sdkOptionalPropertyLimit = 10;

/**
 * Provider B's structured outputs refuse a schema with more than 16 parameters that have a type list
 * or `anyOf` ("Schemas contains too many parameters with union types … (limit: 16 parameters with
 * unions)", a 400 before any inference); `nullable: true` is sent as a type list that takes null, so
 * it counts. Only where the AI SDK sends the schema that way: one it sends as a `json` tool (an open
 * object, a recursive `$ref`, more than 10 optional properties, or a model it gives no structured
 * output) has no such limit. Without a model, the rule applies.
 */
export function providerBUnionProblem(schema: Schema, model?: string): string | null {
  if (model !== undefined && !sdkGivesStructuredOutput(model)) return null;
  let unions = 0;
  forEachSchema(schema, (node) => {
    if (isUnion(node)) unions++;
  });
  if (unions <= providerBUnionLimit || !sentAsStructuredOutput(schema)) return null;
  return (
    `#: provider B's structured outputs take at most ${providerBUnionLimit} properties that may be null or ` +
    `of several types (nullable, a type list or anyOf); this schema has ${unions}`
  );
}

/**
 * What provider B's structured outputs cannot take in a schema the AI SDK sends them, beyond the
 * union limit: an `enum` holding an object or array (provider B documents enum values as strings,
 * numbers, booleans or null only, "complex types within enums" being unsupported, and answers an
 * unsupported feature with a 400 before inference), and a `required` name that is not among its
 * object's `properties` (the SDK sends every object closed, `additionalProperties: false`, so no
 * answer could hold it: each call would be refused, or billed twice and fail). Only where the SDK
 * sends structured output: as a `json` tool (see `providerBUnionProblem`) the schema goes as it is.
 * Each problem names its path; definitions count, as the SDK sends them all.
 */
export function providerBStructuredOutputProblems(schema: Schema, model?: string): string[] {
  if (model !== undefined && !sdkGivesStructuredOutput(model)) return [];
  const problems: string[] = [];
  forEachSchema(schema, (node, path) => {
    if (Array.isArray(node.enum) && node.enum.some((value) => typeof value === "object" && value !== null))
      problems.push(
        `${path}/enum: provider B's structured outputs take enum values that are strings, numbers, booleans or null only`,
      );
    problems.push(...unlistedRequiredNames(node, path));
  });
  return problems.length > 0 && sentAsStructuredOutput(schema) ? problems : [];
}

/**
 * The `required` names of an object the AI SDK closes for provider B's structured outputs (one with
 * `"type": "object"` or `properties`, as its sanitizer reads them) that its `properties` do not list.
 */
function unlistedRequiredNames(node: Schema, path: string): string[] {
  if (!Array.isArray(node.required) || (node.type !== "object" && node.properties === undefined)) return [];
  const properties = isSchema(node.properties) ? node.properties : {};
  return node.required.flatMap((name, index) =>
    typeof name !== "string" || Object.hasOwn(properties, name)
      ? []
      : [
          `${path}/required/${index}: ${shownMemberName(name)} is not among the properties; provider B's structured outputs take no other property, so no answer could have it`,
        ],
  );
}

/**
 * Whether the AI SDK (`@ai-sdk/anthropic`'s `getModelCapabilities`) gives provider B's model
 * structured output: every Claude model but Sonnet and Opus 4.0, Claude 3 and older; not a model
 * whose name it does not know as Claude's. output-schema.test.ts checks it against the SDK's own.
 */
export function sdkGivesStructuredOutput(model: string): boolean {
  if (!model.includes("claude-")) return false;
  if (/claude-(?:sonnet|opus)-4-/.test(model) && !/claude-(?:sonnet-4-[56]|opus-4-[15678])/.test(model))
    return false;
  return !/claude-(?:3-haiku|instant(?:-|$)|v?2(?=$|[-.:])|3(?=$|[-.]))/.test(model);
}

function isUnion(node: Schema): boolean {
  // A oneOf is sent as anyOf (provider-schema.ts), which provider B counts.
  if (Array.isArray(node.anyOf) || Array.isArray(node.oneOf)) return true;
  const types = new Set(Array.isArray(node.type) ? node.type : node.type === undefined ? [] : [node.type]);
  if (node.nullable === true && types.size > 0) types.add("null");
  return types.size > 1;
}

/**
 * Calls `visit` on every schema in the document, definitions included, once each, with its path
 * (`#/properties/a/items`), in document order (a problem list reads as the schema does).
 */
export function forEachSchema(root: unknown, visit: (node: Schema, path: string) => void): void {
  const pending: Array<[unknown, string]> = [[root, "#"]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [node, path] = next;
    if (!isSchema(node)) continue;
    visit(node, path);
    for (const child of subschemas(node, path, true).reverse()) pending.push(child);
  }
}

/**
 * The schemas a schema holds, each with its path below `path`: under `properties`, `$defs` and
 * `definitions` (the last two only with `definitions`: the providers' converters reach a
 * definition through a `$ref` alone), `items`, `additionalProperties`, `anyOf` and `oneOf` (sent as
 * `anyOf`): `nestingKeywords`, in their order. Entries that are no schema are the caller's to skip.
 */
function subschemas(node: Schema, path: string, definitions: boolean): Array<[unknown, string]> {
  const children: Array<[unknown, string]> = [];
  for (const [key, nesting] of nestingKeywords) {
    const value = node[key];
    if (nesting === "schema") children.push([value, `${path}/${key}`]);
    else if (nesting === "list") {
      if (Array.isArray(value))
        for (const [index, child] of value.entries()) children.push([child, `${path}/${key}/${index}`]);
    } else if ((key === "properties" || definitions) && isSchema(value))
      for (const [name, child] of Object.entries(value))
        children.push([child, `${path}/${key}/${shownSchemaName(name)}`]);
  }
  return children;
}

/**
 * Whether the AI SDK (`@ai-sdk/anthropic`'s `supportsNativeStructuredOutputSchema`) sends provider B
 * this schema as structured output (`output_config.format`) rather than as a `json` tool: no
 * recursive `$ref`, no open object, at most 10 optional properties (a `$ref`'s counted where it is
 * used). output-schema.test.ts checks that this agrees with the SDK's own function.
 */
export function sentAsStructuredOutput(schema: Schema): boolean {
  if (recursiveReference(schema) !== null) return false;
  let optional = 0;
  let open = false;
  const counted = new Map<string, { optional: number; open: boolean }>();
  const visit = (node: unknown): { optional: number; open: boolean } => {
    const stats = { optional: 0, open: false };
    if (!isSchema(node)) return stats;
    const add = (child: { optional: number; open: boolean }) => {
      stats.optional += child.optional;
      stats.open ||= child.open;
    };
    if (typeof node.$ref === "string" && node.$ref.startsWith("#")) {
      let target = counted.get(node.$ref);
      if (!target) {
        target = visit(resolveJsonPointer(schema, node.$ref));
        counted.set(node.$ref, target);
      }
      add(target);
    }
    if (isOpenObject(node)) stats.open = true;
    if (isSchema(node.properties)) {
      const required = new Set(Array.isArray(node.required) ? node.required : []);
      stats.optional += Object.keys(node.properties).filter((name) => !required.has(name)).length;
    }
    for (const [child] of subschemas(node, "", false)) add(visit(child));
    return stats;
  };
  ({ optional, open } = visit(schema));
  return !open && optional <= sdkOptionalPropertyLimit;
}

function isOpenObject(node: Schema): boolean {
  const { additionalProperties, properties, type } = node;
  if (additionalProperties === true || isSchema(additionalProperties)) return true;
  const object = type === "object" || (Array.isArray(type) && type.includes("object"));
  return object && properties === undefined && additionalProperties !== false;
}

/**
 * The first `$ref` reached from the root that leads back into a definition it is inside (a
 * recursive schema), as the path of that `$ref`; null when there is none. Definitions are reached
 * only through a `$ref`, as the providers' converters read them.
 */
function recursiveReference(schema: Schema): string | null {
  const done = new Set<string>();
  const resolving = new Set<string>();
  const visit = (node: unknown, path: string): string | null => {
    if (!isSchema(node)) return null;
    if (typeof node.$ref === "string" && node.$ref.startsWith("#")) {
      const ref = node.$ref;
      if (resolving.has(ref)) return `${path}/$ref`;
      if (!done.has(ref)) {
        resolving.add(ref);
        const found = visit(resolveJsonPointer(schema, ref), path);
        resolving.delete(ref);
        if (found) return found;
        done.add(ref);
      }
    }
    for (const [child, childPath] of subschemas(node, path, false)) {
      const found = visit(child, childPath);
      if (found) return found;
    }
    return null;
  };
  return visit(schema, "#");
}

/**
 * Provider C: the AI SDK's converter resolves a `$ref` only to a direct child of the root's `$defs`
 * or `definitions` (`#/$defs/name`), and takes no recursive one; anything else it refuses before
 * sending. Refused when saved rather than on every call.
 */
export function providerCReferenceProblems(schema: Schema): string[] {
  const problems: string[] = [];
  const walk = (node: unknown, path: string): void => {
    if (!isSchema(node)) return;
    if (node.$ref !== undefined && !isRootDefinition(schema, node.$ref))
      problems.push(
        `${path}/$ref: provider C takes a $ref only to an entry of the root's $defs or definitions ("#/$defs/name")`,
      );
    for (const [child, childPath] of subschemas(node, path, true)) walk(child, childPath);
  };
  walk(schema, "#");
  if (problems.length > 0) return problems;
  const recursive = recursiveReference(schema);
  return recursive
    ? [`${recursive}: provider C takes no recursive $ref (a definition that refers to itself)`]
    : [];
}

function isRootDefinition(schema: Schema, ref: unknown): boolean {
  if (typeof ref !== "string") return false;
  const match = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
  if (!match?.[1] || !match[2]) return false;
  const definitions = schema[match[1]];
  return isSchema(definitions) && resolveJsonPointer(schema, ref) !== undefined;
}

/**
 * The `format` values provider C's structured output (the Gemini API's responseSchema) takes, by
 * type; it refuses any other with 400 INVALID_ARGUMENT on every call ("only 'enum' and 'date-time'
 * are supported for STRING type"). The AI SDK passes `format` through unchanged, so another is sent
 * in the description instead (provider-schema.ts).
 */
export const providerCFormats: Record<string, readonly string[]> = {
  string: ["date-time", "enum"],
  number: ["float", "double"],
  integer: ["int32", "int64"],
};

/**
 * What provider C's API refuses in one schema the AI SDK sends it (a call would always be its 400,
 * Sluice's 502): an `enum` or `const` holding an object or array (numbers and booleans are sent in
 * the description, provider-schema.ts); a schema without a type ("….type: must be specified"); an
 * array without `items` ("….items: missing field"); `array` or `object` in a list of types (the SDK
 * sends each alone, without its items or properties); an object without `properties` (a map through
 * `additionalProperties`, or a free-form object below the root: the SDK sends `{"type": "object"}`,
 * which the API refuses). A free-form root is sent as no schema at all (plain JSON mode), so it stays.
 */
export function providerCRules(
  record: Record<string, unknown>,
  types: unknown[],
  path: string,
  depth: number,
  problems: string[],
): void {
  const named = types.filter((type): type is string => typeof type === "string" && type !== "null");
  for (const keyword of ["enum", "const"] as const) {
    if (record[keyword] === undefined) continue;
    const values = keyword === "enum" && Array.isArray(record.enum) ? record.enum : [record[keyword]];
    // Numbers and booleans are sent to the model in the description (provider-schema.ts).
    if (values.some((value) => typeof value === "object" && value !== null))
      problems.push(
        `${path}/${keyword}: provider C takes ${keyword} values that are strings, numbers, booleans or null only`,
      );
  }
  // The Gemini API needs a type on every schema ("….type: must be specified"); the SDK gives one to
  // an enum, a const and a type list, and resolves a $ref.
  const typed = ["type", "anyOf", "oneOf", "enum", "const", "$ref"].some(
    (keyword) => record[keyword] !== undefined,
  );
  if (!typed)
    problems.push(
      `${path}: provider C needs a type here (or anyOf, oneOf, enum, const or $ref): it takes no schema without one`,
    );
  if (named.includes("array") && record.items === undefined && record.$ref === undefined)
    problems.push(
      `${path}: provider C takes an array only with items (the API answers "items: missing field")`,
    );
  // The SDK sends a list of several types as anyOf of each type alone, without its items or properties.
  if (named.length > 1 && named.some((type) => type === "array" || type === "object"))
    problems.push(
      `${path}/type: provider C takes an array or object type only on its own (or with null), not in a list with ${named.filter((type) => type !== "array" && type !== "object").join(", ") || "each other"}`,
    );
  if (named.includes("object") && record.$ref === undefined) {
    const properties = record.properties;
    const hasProperties =
      typeof properties === "object" && properties !== null && Object.keys(properties).length > 0;
    const freeFormRoot = depth === 0 && !record.additionalProperties;
    if (!hasProperties && !freeFormRoot)
      problems.push(
        `${path}: provider C takes an object only with properties (no map through additionalProperties, no free-form object)`,
      );
  }
}

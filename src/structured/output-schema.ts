import { Ajv, type ValidateFunction } from "ajv";
import type { ProviderId } from "../providers/provider-id.js";

/**
 * The project's output schema: a JSON Schema object restricted to the subset that the three
 * providers' structured-output modes accept, plus annotations (below). Checked when saved (422 with
 * the reasons), checked again before use, and every returned object is validated against it.
 */
const allowedKeywords = new Set([
  "type",
  "properties",
  "required",
  "items",
  "enum",
  "const",
  "additionalProperties",
  "anyOf",
  "$defs",
  "definitions",
  "$ref",
  "format",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "pattern",
  "nullable",
]);
/**
 * Annotation keywords, by the kind of value each takes: they describe the schema and constrain no
 * answer (Ajv collects or ignores them), so a schema pasted in with them is taken as it is. The
 * validator does not resolve `$ref`s against an `$id`, nor read `$schema`: a `$ref` points into the
 * document from its root, as it does for the providers. Each provider is sent only the annotations
 * its structured mode takes (`providerAnnotations`).
 */
const annotationKinds = new Map<string, "string" | "array" | "boolean" | "any value">([
  ["title", "string"],
  ["description", "string"],
  ["$comment", "string"],
  ["$id", "string"],
  ["$schema", "string"],
  ["examples", "array"],
  ["default", "any value"],
  ["deprecated", "boolean"],
  ["readOnly", "boolean"],
  ["writeOnly", "boolean"],
]);
/**
 * The annotations each provider's structured mode takes; the others are removed from what it is
 * sent. Provider A: its strict structured outputs refuse the others (400 "'examples' is not
 * permitted", "'default' is not permitted"); Sluice calls it non-strict and sends what strict mode
 * takes. Provider B: structured outputs take `title`, `description` and `default` (the AI SDK keeps
 * them there; its JSON-tool fallback sends the schema as it is). Provider C: the Gemini API's Schema
 * object has `title`, `description` and `default` among its fields, and an unknown field is its 400.
 * `description` guides the model, so every provider gets it.
 */
const providerAnnotations: Record<ProviderId, ReadonlySet<string>> = {
  "provider-a": new Set(["title", "description"]),
  "provider-b": new Set(["title", "description", "default"]),
  "provider-c": new Set(["title", "description", "default"]),
};
const allowedTypes = new Set(["object", "array", "string", "number", "integer", "boolean", "null"]);
const maxDepth = 10;
const maxSchemaBytes = 64 * 1024;
/**
 * How deeply objects and arrays may nest anywhere in the schema document, `default` and `const`
 * values included (docs/api.md). Checked iteratively before anything recursive (JSON.stringify, the
 * walk, Ajv) sees the schema: 27 KB of `[[[…]]]` would overflow their stack.
 */
export const maxSchemaNesting = 64;

/**
 * How many compiled validators are kept, and how many schemas one Ajv instance compiles before a
 * fresh one takes over. Ajv keeps everything it compiled (its schema cache and, beyond the reach of
 * `removeSchema`, every schema, validator and pattern in its code-generation scope), so its memory
 * is freed only by dropping the instance: at most two instances live, the current one and the one
 * before, so at most twice this many compiled schemas. Exported for the tests.
 */
export const validatorCacheLimit = 2000;

/** One Ajv instance and how many schemas it has compiled (refused ones included). */
type Generation = { ajv: Ajv; compiles: number };
const newGeneration = (): Generation => ({
  ajv: new Ajv({ allErrors: true, strict: false, validateFormats: false }),
  compiles: 0,
});
let current = newGeneration();
let previous: Generation | null = null;
/** By the schema's JSON, least recently used first (a hit moves its entry to the end). */
const compiled = new Map<string, { validate: ValidateFunction; generation: Generation }>();

/**
 * The `format` values provider C's structured output (the Gemini API's responseSchema) takes, by
 * type; it refuses any other with 400 INVALID_ARGUMENT on every call. The AI SDK passes `format`
 * through unchanged.
 */
const providerCFormats: Record<string, readonly string[]> = {
  string: ["date-time", "enum"],
  number: ["float", "double"],
  integer: ["int32", "int64"],
};

/**
 * Every reason the schema cannot be used; empty when it can. With a provider, that provider's
 * structured-output rules are checked too (provider C's, which its API would otherwise refuse on
 * every call, as a 502): a project's schema is checked with its provider wherever the two meet.
 */
export function checkOutputSchema(schema: unknown, provider?: ProviderId): string[] {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    return ["the output schema must be a JSON object"];
  }
  const tooDeep = deepestPath(schema, maxSchemaNesting);
  if (tooDeep !== null) return [`${tooDeep} nests objects and arrays deeper than ${maxSchemaNesting} levels`];
  const problems: string[] = [];
  if ((schema as Record<string, unknown>).type !== "object")
    problems.push('the root of the output schema must have "type": "object"');
  if (JSON.stringify(schema).length > maxSchemaBytes)
    problems.push(`the output schema must be under ${maxSchemaBytes} bytes`);
  walk(schema, "#", 0, problems, provider);
  if (problems.length === 0) problems.push(...referenceLoops(schema));
  if (problems.length === 0) {
    try {
      validatorFor(schema as Record<string, unknown>);
    } catch (error) {
      problems.push(
        error instanceof RangeError
          ? "the output schema does not compile: its $ref references recurse without end"
          : `the output schema does not compile: ${(error as Error).message}`,
      );
    }
  }
  return problems;
}

/** The JSON Pointer of the first value nested deeper than `limit` levels, else null; iterative. */
function deepestPath(root: unknown, limit: number): string | null {
  const pending: Array<[unknown, string, number]> = [[root, "#", 1]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [value, path, depth] = next;
    if (typeof value !== "object" || value === null) continue;
    if (depth > limit) return path;
    for (const [key, item] of Object.entries(value)) pending.push([item, `${path}/${key}`, depth + 1]);
  }
  return null;
}

/**
 * A `$ref` that leads back to itself through `$ref`s alone (`$defs.a: {"$ref": "#/$defs/a"}`)
 * names no schema: Ajv would recurse until the stack overflows. Only local references (`#…`) are
 * followed; the walk and the nesting limit above bound the document.
 */
function referenceLoops(root: object): string[] {
  const problems: string[] = [];
  const pending: Array<[unknown, string]> = [[root, "#"]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [node, path] = next;
    if (typeof node !== "object" || node === null) continue;
    const seen = new Set<unknown>([node]);
    for (let target = refTarget(root, node); target !== undefined; target = refTarget(root, target)) {
      if (target === node) {
        const ref = JSON.stringify((node as Record<string, unknown>).$ref);
        problems.push(`${path}/$ref ${ref} leads back to itself through $ref alone: it names no schema`);
      }
      if (seen.has(target)) break;
      seen.add(target);
    }
    for (const [key, item] of Object.entries(node)) pending.push([item, `${path}/${key}`]);
  }
  return problems;
}

/** The value a node's local `$ref` points to, or undefined (no `$ref`, not local, not found). */
function refTarget(root: object, node: unknown): unknown {
  const ref = typeof node === "object" && node !== null ? (node as Record<string, unknown>).$ref : undefined;
  if (typeof ref !== "string" || (ref !== "#" && !ref.startsWith("#/"))) return undefined;
  let target: unknown = root;
  for (const token of ref.slice(1).split("/").slice(1)) {
    if (typeof target !== "object" || target === null) return undefined;
    let key: string;
    try {
      key = decodeURIComponent(token).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      return undefined;
    }
    if (!Object.hasOwn(target, key)) return undefined;
    target = (target as Record<string, unknown>)[key];
  }
  return target;
}

function walk(
  node: unknown,
  path: string,
  depth: number,
  problems: string[],
  provider: ProviderId | undefined,
): void {
  if (typeof node !== "object" || node === null || Array.isArray(node)) {
    problems.push(`${path} must be a schema object`);
    return;
  }
  if (depth > maxDepth) {
    problems.push(`${path} nests deeper than ${maxDepth} levels`);
    return;
  }
  const record = node as Record<string, unknown>;
  for (const [keyword, value] of Object.entries(record)) {
    const kind = annotationKinds.get(keyword);
    if (kind) {
      const actual = Array.isArray(value) ? "array" : typeof value;
      if (kind !== "any value" && actual !== kind)
        problems.push(`${path}/${keyword} must be ${kind === "array" ? "an" : "a"} ${kind}`);
    } else if (!allowedKeywords.has(keyword))
      problems.push(`${path}: keyword "${keyword}" is not supported by the providers' structured output`);
  }
  const types = Array.isArray(record.type) ? record.type : record.type === undefined ? [] : [record.type];
  for (const type of types) {
    if (typeof type !== "string" || !allowedTypes.has(type))
      problems.push(`${path}: unknown type ${JSON.stringify(type)}`);
  }
  if (record.properties !== undefined) {
    if (
      typeof record.properties !== "object" ||
      record.properties === null ||
      Array.isArray(record.properties)
    ) {
      problems.push(`${path}/properties must be an object`);
    } else {
      for (const [name, child] of Object.entries(record.properties))
        walk(child, `${path}/properties/${name}`, depth + 1, problems, provider);
    }
  }
  if (
    record.required !== undefined &&
    (!Array.isArray(record.required) || record.required.some((name) => typeof name !== "string"))
  ) {
    problems.push(`${path}/required must be an array of property names`);
  } else if (record.required !== undefined) {
    requiredProperties(record, path, problems, provider);
  }
  if (provider === "provider-c") providerCRules(record, types, path, depth, problems);
  if (record.items !== undefined) walk(record.items, `${path}/items`, depth + 1, problems, provider);
  if (typeof record.additionalProperties === "object" && record.additionalProperties !== null) {
    walk(record.additionalProperties, `${path}/additionalProperties`, depth + 1, problems, provider);
  }
  if (record.anyOf !== undefined) {
    if (!Array.isArray(record.anyOf)) problems.push(`${path}/anyOf must be an array`);
    else {
      for (const [index, child] of record.anyOf.entries())
        walk(child, `${path}/anyOf/${index}`, depth + 1, problems, provider);
    }
  }
  for (const definitions of ["$defs", "definitions"] as const) {
    const value = record[definitions];
    if (value !== undefined && typeof value === "object" && value !== null) {
      for (const [name, child] of Object.entries(value))
        walk(child, `${path}/${definitions}/${name}`, depth + 1, problems, provider);
    }
  }
}

/**
 * A `required` name that `properties` does not define. Where the object takes no other property
 * (`additionalProperties: false`) no answer can hold it, so the schema can never be met: refused
 * for every provider. An open object may require a key it leaves free (a map's key), which JSON
 * Schema allows and providers A and B take; provider C's API refuses every such name.
 */
function requiredProperties(
  record: Record<string, unknown>,
  path: string,
  problems: string[],
  provider: ProviderId | undefined,
): void {
  const properties =
    typeof record.properties === "object" && record.properties !== null ? record.properties : {};
  const closed = record.additionalProperties === false;
  if (!closed && provider !== "provider-c") return;
  for (const [index, name] of (record.required as string[]).entries()) {
    if (Object.hasOwn(properties, name)) continue;
    problems.push(
      closed
        ? `${path}/required/${index}: ${JSON.stringify(name)} is not among the properties and additionalProperties is false, so no answer can have it`
        : `${path}/required/${index}: ${JSON.stringify(name)} is not among the properties (provider C requires a property for every required name)`,
    );
  }
}

/**
 * What provider C's API refuses in a schema the AI SDK sends it as is (format, enum, objects), so
 * a call would always be its 400 (Sluice's 502): a `format` it does not take; an `enum` or `const`
 * of anything but strings (the SDK sends numbers and booleans as `format: "enum"` with their text,
 * which the API takes for strings only); an object without `properties` (a map through
 * `additionalProperties`, or a free-form object below the root: the SDK sends `{"type": "object"}`,
 * which the API refuses). A free-form root is sent as no schema at all (plain JSON mode), so it stays.
 */
function providerCRules(
  record: Record<string, unknown>,
  types: unknown[],
  path: string,
  depth: number,
  problems: string[],
): void {
  const named = types.filter((type): type is string => typeof type === "string" && type !== "null");
  if (typeof record.format === "string") {
    const formatTypes = named.length > 0 ? named : ["string"];
    const allowed = formatTypes.flatMap((type) => providerCFormats[type] ?? []);
    if (!allowed.includes(record.format))
      problems.push(
        `${path}/format: provider C takes no format ${JSON.stringify(record.format)} for ${formatTypes.join("/")}${allowed.length > 0 ? ` (only ${allowed.join(", ")})` : ""}`,
      );
  }
  for (const keyword of ["enum", "const"] as const) {
    if (record[keyword] === undefined) continue;
    const values = keyword === "enum" && Array.isArray(record.enum) ? record.enum : [record[keyword]];
    if (values.some((value) => value !== null && typeof value !== "string"))
      problems.push(`${path}/${keyword}: provider C takes ${keyword} values that are strings only`);
  }
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

/**
 * The compiled validator of a schema, from a bounded LRU cache. When the current Ajv instance has
 * compiled `validatorCacheLimit` schemas, a new one takes over and the one before it is dropped,
 * with the validators it compiled: a schema still in use is compiled again, once, by a newer
 * instance. A few schemas in use never get there: they are compiled once.
 */
function validatorFor(schema: Record<string, unknown>): ValidateFunction {
  const key = JSON.stringify(schema);
  const hit = compiled.get(key);
  if (hit) {
    compiled.delete(key);
    compiled.set(key, hit);
    return hit.validate;
  }
  if (current.compiles >= validatorCacheLimit) {
    for (const [cachedKey, entry] of compiled) if (entry.generation === previous) compiled.delete(cachedKey);
    previous = current;
    current = newGeneration();
  }
  const generation = current;
  generation.compiles++;
  // Without `$id` one Ajv instance takes two projects' schemas that share one (it refuses an id it
  // holds), and a `$ref` below an `$id` is not read relative to it; `$schema` would name a meta-schema.
  const validate = generation.ajv.compile(
    eachSchema(schema, ({ $id: _id, $schema: _dialect, ...rest }) => rest) as Record<string, unknown>,
  );
  compiled.set(key, { validate, generation });
  if (compiled.size > validatorCacheLimit) {
    for (const oldest of compiled.keys()) {
      compiled.delete(oldest);
      break;
    }
  }
  return validate;
}

/**
 * Validates a model's output; the error strings say where and why. A value that would not survive
 * JSON serialisation is invalid too: JSON.parse reads `1e999` as Infinity, which Ajv takes for a
 * number and JSON.stringify would send as null, breaking the schema the answer was checked against.
 */
export function validateAgainstSchema(
  schema: Record<string, unknown>,
  value: unknown,
): { valid: boolean; errors: string[] } {
  const errors: string[] = [];
  nonFiniteNumbers(value, errors);
  const validate = validatorFor(schema);
  if (!validate(value)) {
    for (const error of validate.errors ?? [])
      errors.push(`${error.instancePath || "/"} ${error.message ?? "is invalid"}${detailOf(error.params)}`);
  }
  return { valid: errors.length === 0, errors };
}

/**
 * What the repair needs beyond Ajv's message: the extra key to drop, or the values allowed (at most
 * 200 characters of them).
 */
function detailOf(params: Record<string, unknown> | undefined): string {
  if (typeof params?.additionalProperty === "string") return `: ${JSON.stringify(params.additionalProperty)}`;
  if (Array.isArray(params?.allowedValues)) {
    const allowed = params.allowedValues.map((value) => JSON.stringify(value)).join(", ");
    return `: ${allowed.length > 200 ? `${allowed.slice(0, 200)}…` : allowed}`;
  }
  return "";
}

/**
 * Reports every number JSON cannot carry (Infinity, -Infinity, NaN), by its JSON Pointer. Iterative,
 * so a deeply nested answer cannot overflow the stack.
 */
function nonFiniteNumbers(root: unknown, errors: string[]): void {
  const pointerToken = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");
  const pending: Array<[unknown, string]> = [[root, ""]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [value, path] = next;
    if (typeof value === "number") {
      if (!Number.isFinite(value))
        errors.push(`${path || "/"} must be a finite number (JSON has no ${String(value)})`);
    } else if (Array.isArray(value)) {
      for (let index = value.length - 1; index >= 0; index--)
        pending.push([value[index], `${path}/${index}`]);
    } else if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value).reverse())
        pending.push([item, `${path}/${pointerToken(key)}`]);
    }
  }
}

/**
 * The schema as handed to the AI SDK for a provider: without the annotations that provider's
 * structured mode does not take (`providerAnnotations`; `description` stays, it guides the model),
 * and with `nullable: true` written as a type that takes null (`{"type": "string", "nullable": true}`
 * becomes `{"type": ["string", "null"]}`), the form every provider's converter carries over.
 * Providers B's and C's converters drop `nullable` itself, so the model could never answer null
 * where the schema (and Ajv, which validates the answer) allows it. Values (`default`, `const`,
 * `enum`) are copied as they are, and so are the names of properties and definitions; the
 * project's schema is not changed.
 */
export function schemaForProvider(
  schema: Record<string, unknown>,
  provider: ProviderId,
): Record<string, unknown> {
  const sent = providerAnnotations[provider];
  return eachSchema(schema, (node) =>
    nullableAsType(
      Object.fromEntries(
        Object.entries(node).filter(([keyword]) => !annotationKinds.has(keyword) || sent.has(keyword)),
      ),
    ),
  ) as Record<string, unknown>;
}

const subschemaMaps = new Set(["properties", "$defs", "definitions"]);
const subschemas = new Set(["items", "additionalProperties"]);

/**
 * A copy of the schema in which `rewrite` has made each schema object, deepest first, from a copy
 * of it (its subschemas already rewritten). Only keywords that hold schemas are followed: values
 * (`default`, `enum`, `examples`) and the names in `properties` or `$defs` are copied as they are.
 */
function eachSchema(
  node: unknown,
  rewrite: (schema: Record<string, unknown>) => Record<string, unknown>,
): unknown {
  if (typeof node !== "object" || node === null || Array.isArray(node)) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (subschemaMaps.has(key) && typeof value === "object" && value !== null && !Array.isArray(value)) {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, eachSchema(child, rewrite)]),
      );
    } else if (subschemas.has(key)) out[key] = eachSchema(value, rewrite);
    else if (key === "anyOf" && Array.isArray(value))
      out[key] = value.map((child) => eachSchema(child, rewrite));
    else out[key] = value;
  }
  return rewrite(out);
}

function nullableAsType(schema: Record<string, unknown>): Record<string, unknown> {
  const { nullable, ...out } = schema;
  // Ajv takes `nullable` only beside `type` (the schema does not compile otherwise), and an `enum`
  // still has to list null: the type is what changes.
  if (nullable !== true) return out;
  if (typeof out.type === "string" && out.type !== "null") out.type = [out.type, "null"];
  else if (Array.isArray(out.type) && !out.type.includes("null")) out.type = [...out.type, "null"];
  return out;
}

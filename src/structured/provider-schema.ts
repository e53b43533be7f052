import type { ProviderId } from "../providers/provider-id.js";
import { annotationKinds } from "./output-schema.js";
import { providerCFormats } from "./provider-limits.js";
import { eachSchema, nestingKeywords } from "./schema-walk.js";

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

/**
 * The schema as handed to the AI SDK for a provider: without the annotations that provider's
 * structured mode does not take (`providerAnnotations`; `description` stays, it guides the model),
 * and with `nullable: true` written as a type that takes null (`{"type": "string", "nullable": true}`
 * becomes `{"type": ["string", "null"]}`), the form every provider's converter carries over.
 * Providers B's and C's converters drop `nullable` itself, so the model could never answer null
 * where the schema (and Ajv, which validates the answer) allows it. For provider C, what its API
 * refuses or the SDK leaves out (bounds, a `format` it does not take, an `enum` or `const` of
 * numbers or booleans) is written into the description instead (`withBoundsDescribed`). A `oneOf`
 * is sent as `anyOf`, and a record's `propertyNames: {"type": "string"}` is left out
 * (`alternativesAsAnyOf`). Values (`default`, `const`, `enum`) are otherwise copied as they are, and
 * so are the names of properties and definitions; the project's schema is not changed, and the
 * answer is validated against it, `oneOf` included.
 */
export function schemaForProvider(
  schema: Record<string, unknown>,
  provider: ProviderId,
): Record<string, unknown> {
  const sent = providerAnnotations[provider];
  return eachSchema(schema, (node) => {
    const out = alternativesAsAnyOf(
      nullableAsType(
        Object.fromEntries(
          Object.entries(node).filter(([keyword]) => !annotationKinds.has(keyword) || sent.has(keyword)),
        ),
      ),
    );
    return provider === "provider-c" ? withBoundsDescribed(out) : out;
  }) as Record<string, unknown>;
}

/**
 * A node whose `enum` or `const` holds a number or a boolean, without them, typed by its values when
 * it had no type: the AI SDK sends such an enum as strings, which provider C's API refuses ("enum:
 * only allowed for STRING type"). The values go into the description; Ajv still checks them.
 */
function withoutNonStringValues(node: Record<string, unknown>): {
  node: Record<string, unknown>;
  values?: unknown[];
} {
  const values = Array.isArray(node.enum) ? node.enum : node.const !== undefined ? [node.const] : undefined;
  if (!values || values.every((value) => value === null || typeof value === "string")) return { node };
  const { enum: _enum, const: _const, ...rest } = node;
  if (rest.type === undefined) {
    const types = new Set(
      values.map((value) =>
        value === null
          ? "null"
          : typeof value === "number" && Number.isInteger(value)
            ? "integer"
            : typeof value,
      ),
    );
    if (types.has("number")) types.delete("integer");
    rest.type = types.size === 1 ? [...types][0] : [...types];
  }
  return { node: rest, values };
}

/**
 * The bounds the AI SDK leaves out of provider C's responseSchema (it carries `minLength` alone),
 * and a `format` the API refuses, written into the description it does carry, as
 * `@ai-sdk/anthropic` does for provider B: without them the model was never told a `maximum` or a
 * `pattern`, and an answer out of bounds cost a repair. Ajv still checks every bound.
 */
const providerCDescribedBounds = [
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "maxLength",
  "pattern",
  "minItems",
  "maxItems",
];

function withBoundsDescribed(given: Record<string, unknown>): Record<string, unknown> {
  const { node, values } = withoutNonStringValues(given);
  const bounds = values ? [`one of: ${values.map((value) => JSON.stringify(value)).join(", ")}`] : [];
  bounds.push(
    ...providerCDescribedBounds
      .filter((keyword) => node[keyword] !== undefined)
      .map((keyword) => {
        const value = node[keyword];
        return `${keyword.replace(/[A-Z]/g, (letter) => ` ${letter.toLowerCase()}`)}: ${typeof value === "string" ? value : JSON.stringify(value)}`;
      }),
  );
  // A `format` the API refuses ("only 'enum' and 'date-time' are supported for STRING type") is
  // described instead of sent: the model is told it, and Sluice checks no format anyway.
  const { format, ...schema } = node;
  const types = (Array.isArray(node.type) ? node.type : [node.type ?? "string"]).filter(
    (type) => type !== "null",
  );
  if (typeof format === "string" && !types.some((type) => providerCFormats[type as string]?.includes(format)))
    bounds.push(`format: ${format}`);
  else if (format !== undefined) schema.format = format;
  if (bounds.length === 0) return schema;
  const described = `${bounds.join("; ")}.`;
  const { description } = schema;
  return {
    ...schema,
    description:
      typeof description === "string" && description !== "" ? `${description}\n${described}` : described,
  };
}

/**
 * A node with its `oneOf` as `anyOf`, without `propertyNames`, and with a `$ref` that stepped into a
 * `oneOf` stepping into the `anyOf` sent instead. Provider A's structured outputs refuse `oneOf`
 * ("'oneOf' is not permitted") and list `anyOf` among the keywords they take; provider C's
 * responseSchema (the Gemini API's Schema object) has `anyOf` and no `oneOf` field, which the AI SDK
 * passes through as it is, so every call was the API's 400; the AI SDK already sends provider B's
 * structured outputs a `oneOf` as `anyOf`. The model may then give an answer that matches two
 * branches; Ajv, holding it to the project's `oneOf`, refuses it and the model is asked once more, as
 * for any other answer (docs/decisions/0021). The only `propertyNames` output-schema.ts lets through
 * is `{"type": "string"}`, which every JSON key meets; provider A's structured outputs do not take
 * the keyword, and the AI SDK leaves it out for provider B's and C's.
 */
function alternativesAsAnyOf(node: Record<string, unknown>): Record<string, unknown> {
  const { oneOf, propertyNames: _names, ...out } = node;
  if (oneOf !== undefined) out.anyOf = oneOf;
  if (typeof out.$ref === "string") out.$ref = referenceAsSent(out.$ref);
  return out;
}

/**
 * A local `$ref` with each step into a `oneOf` made a step into `anyOf`, as `alternativesAsAnyOf`
 * sends it; a property or definition named `oneOf` keeps its name, and so does anything past a
 * keyword that holds no schema (a `default`'s value).
 */
function referenceAsSent(ref: string): string {
  if (!ref.startsWith("#/")) return ref;
  let next: "keyword" | "member" | "value" = "keyword";
  const tokens = ref
    .slice(2)
    .split("/")
    .map((token) => {
      if (next === "member") {
        next = "keyword";
        return token;
      }
      if (next === "value") return token;
      // Past a keyword: a member (a property's or definition's name, an alternative's index), then
      // a schema; `items` and `additionalProperties` hold a schema; any other keyword a value.
      const nesting = nestingKeywords.get(token);
      next = nesting === undefined ? "value" : nesting === "schema" ? "keyword" : "member";
      return token === "oneOf" ? "anyOf" : token;
    });
  return `#/${tokens.join("/")}`;
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

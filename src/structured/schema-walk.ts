/** A schema as a walk reads it: a JSON object. */
export type Schema = Record<string, unknown>;

/** Whether `value` is a JSON object, which a schema (or a map of names to schemas) is. */
export const isSchema = (value: unknown): value is Schema =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * The keywords output-schema.ts lets a schema nest other schemas in, in document order, and how each
 * holds them: a map of names (of properties or definitions) to schemas, one schema, or a list of
 * alternatives. Every walk over a schema's subschemas reads them here.
 */
export const nestingKeywords: ReadonlyMap<string, "names" | "schema" | "list"> = new Map([
  ["properties", "names"],
  ["$defs", "names"],
  ["definitions", "names"],
  ["items", "schema"],
  ["additionalProperties", "schema"],
  ["anyOf", "list"],
  ["oneOf", "list"],
]);

/**
 * A copy of the schema in which `rewrite` has made each schema object, deepest first, from a copy
 * of it (its subschemas already rewritten). Only keywords that hold schemas are followed: values
 * (`default`, `enum`, `examples`) and the names in `properties` or `$defs` are copied as they are.
 */
export function eachSchema(
  node: unknown,
  rewrite: (schema: Record<string, unknown>) => Record<string, unknown>,
): unknown {
  if (!isSchema(node)) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    const nesting = nestingKeywords.get(key);
    if (nesting === "names" && isSchema(value)) {
      out[key] = Object.fromEntries(
        Object.entries(value).map(([name, child]) => [name, eachSchema(child, rewrite)]),
      );
    } else if (nesting === "schema") out[key] = eachSchema(value, rewrite);
    else if (nesting === "list" && Array.isArray(value))
      out[key] = value.map((child) => eachSchema(child, rewrite));
    else out[key] = value;
  }
  return rewrite(out);
}

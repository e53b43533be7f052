const subschemaMaps = new Set(["properties", "$defs", "definitions"]);
const subschemas = new Set(["items", "additionalProperties"]);

/**
 * A copy of the schema in which `rewrite` has made each schema object, deepest first, from a copy
 * of it (its subschemas already rewritten). Only keywords that hold schemas are followed: values
 * (`default`, `enum`, `examples`) and the names in `properties` or `$defs` are copied as they are.
 */
export function eachSchema(
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
    else if ((key === "anyOf" || key === "oneOf") && Array.isArray(value))
      out[key] = value.map((child) => eachSchema(child, rewrite));
    else out[key] = value;
  }
  return rewrite(out);
}

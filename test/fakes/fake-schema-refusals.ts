/**
 * What the real providers refuse in a structured-output schema before any inference, with their
 * recorded messages, so a schema Sluice lets through reaches the fake as it would reach them: the
 * provider's 400 (Sluice's 502) on every call. Provider A's non-strict `json_schema` refuses no
 * keyword (it ignores those it does not take), so only B and C have rules here.
 */

type Schema = Record<string, unknown>;

const isSchema = (value: unknown): value is Schema =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * Provider B's structured outputs (`output_config.format.schema`): at most 16 parameters with a type
 * list or `anyOf` across the schema (recorded: "Schemas contains too many parameters with union
 * types (19 parameters with type arrays or anyOf)…"). Counted over the document as sent.
 */
export function providerBSchemaRefusal(schema: unknown): string | null {
  let unions = 0;
  const visit = (node: unknown): void => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item);
      return;
    }
    if (!isSchema(node)) return;
    if ((Array.isArray(node.type) && node.type.length > 1) || Array.isArray(node.anyOf)) unions++;
    for (const [key, value] of Object.entries(node)) {
      if (["properties", "$defs", "definitions"].includes(key) && isSchema(value))
        Object.values(value).forEach(visit);
      else if (["items", "additionalProperties", "anyOf", "allOf"].includes(key)) visit(value);
    }
  };
  visit(schema);
  if (complexEnum(schema))
    return "output_config.format.schema: enum values must be strings, numbers, booleans or null";
  return unions > 16
    ? `Schemas contains too many parameters with union types (${unions} parameters with type arrays or anyOf). ` +
        "This causes exponential compilation cost. Reduce the number of nullable or union-typed parameters " +
        "(limit: 16 parameters with unions)."
    : null;
}

/**
 * Whether a schema sent to provider B's structured outputs holds an `enum` with an object or array
 * among its values, which provider B documents as unsupported ("complex types within enums"; its
 * unsupported features are a 400 before inference). The message is the fake's own, not a recorded one.
 */
function complexEnum(node: unknown): boolean {
  if (Array.isArray(node)) return node.some(complexEnum);
  if (!isSchema(node)) return false;
  if (Array.isArray(node.enum) && node.enum.some((value) => typeof value === "object" && value !== null))
    return true;
  return Object.entries(node).some(
    ([key, value]) =>
      (["properties", "$defs", "definitions"].includes(key) &&
        isSchema(value) &&
        Object.values(value).some(complexEnum)) ||
      (["items", "additionalProperties", "anyOf", "allOf"].includes(key) && complexEnum(value)),
  );
}

/** The fields of the Gemini API's Schema object; any other is "Unknown name". */
const geminiSchemaFields = new Set([
  "type",
  "format",
  "title",
  "description",
  "nullable",
  "enum",
  "maxItems",
  "minItems",
  "properties",
  "required",
  "minProperties",
  "maxProperties",
  "minLength",
  "maxLength",
  "pattern",
  "example",
  "anyOf",
  "propertyOrdering",
  "default",
  "items",
  "minimum",
  "maximum",
]);

/**
 * Provider C's `generationConfig.responseSchema` (the Gemini API's Schema, an OpenAPI subset), with
 * its recorded messages: an unknown field ("Invalid JSON payload received. Unknown name …"), a schema
 * without `type` ("….type: must be specified"), a string `format` other than `enum` and `date-time`
 * ("only 'enum' and 'date-time' are supported for STRING type"), an `enum` on another type ("….enum:
 * only allowed for STRING type", as the AI SDK sends a number's or boolean's), an array without `items` ("….items: missing field."),
 * an object whose `properties` are empty below the root ("should be non-empty for OBJECT type") and a
 * `required` name that is not a property ("property is not defined").
 */
export function providerCSchemaRefusal(schema: unknown): string | null {
  const problems: string[] = [];
  const unknown: string[] = [];
  const visit = (node: unknown, path: string, wirePath: string): void => {
    if (!isSchema(node)) return;
    for (const key of Object.keys(node))
      if (!geminiSchemaFields.has(key))
        unknown.push(
          `Invalid JSON payload received. Unknown name ${JSON.stringify(key)} at '${wirePath}': Cannot find field.`,
        );
    const type = typeof node.type === "string" ? node.type.toUpperCase() : undefined;
    if (type === undefined && !Array.isArray(node.anyOf))
      problems.push(`* ${path}.type: must be specified\n`);
    if (
      type === "STRING" &&
      node.format !== undefined &&
      node.format !== "enum" &&
      node.format !== "date-time"
    )
      problems.push(`* ${path}.format: only 'enum' and 'date-time' are supported for STRING type\n`);
    if (node.enum !== undefined && type !== "STRING")
      problems.push(`* ${path}.enum: only allowed for STRING type\n`);
    if (type === "ARRAY" && node.items === undefined) problems.push(`* ${path}.items: missing field.\n`);
    const properties = isSchema(node.properties) ? node.properties : {};
    if (type === "OBJECT" && node.properties !== undefined && Object.keys(properties).length === 0)
      problems.push(`* ${path}.properties: should be non-empty for OBJECT type\n`);
    if (Array.isArray(node.required))
      for (const [index, name] of node.required.entries())
        if (typeof name !== "string" || !Object.hasOwn(properties, name))
          problems.push(`* ${path}.required[${index}]: property is not defined\n`);
    for (const [index, [name, child]] of Object.entries(properties).entries())
      visit(child, `${path}.properties[${name}]`, `${wirePath}.properties[${index}].value`);
    if (node.items !== undefined) visit(node.items, `${path}.items`, `${wirePath}.items`);
    if (Array.isArray(node.anyOf))
      for (const [index, child] of node.anyOf.entries())
        visit(child, `${path}.any_of[${index}]`, `${wirePath}.any_of[${index}]`);
  };
  visit(
    schema,
    "GenerateContentRequest.generation_config.response_schema",
    "generation_config.response_schema",
  );
  if (unknown.length > 0) return unknown.join("\n");
  return problems.length > 0 ? problems.join("") : null;
}

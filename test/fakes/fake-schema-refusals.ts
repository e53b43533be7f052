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

/**
 * A provider's 400 for the structured-output schema it was sent, as recorded in public reports: what
 * the fake answers when a test enqueues it. Each names where it was seen; a provider's words that
 * could quote the schema (provider B's "Invalid schema" does) are shortened to what they open with.
 * No report was found of provider A's code for such a refusal other than null, nor of a code-less
 * provider C answer other than `INVALID_ARGUMENT`.
 */
export const recordedSchemaRefusals: Array<{
  provider: "provider-a" | "provider-b" | "provider-c";
  what: string;
  body: unknown;
}> = [
  {
    provider: "provider-a",
    // ag2ai/ag2#1990 (chat completions, 2025): the schema's `param`, a null code.
    what: "a schema it does not take",
    body: {
      error: {
        message:
          "Invalid schema for response_format 'response_format': 'json_object' is not valid under any of the given schemas.",
        type: "invalid_request_error",
        param: "response_format",
        code: null,
      },
    },
  },
  {
    provider: "provider-b",
    // anthropics/anthropic-sdk-python#1185 (2026): a schema compiled to too large a grammar.
    what: "a schema too complex for its grammar compiler",
    body: {
      type: "error",
      error: {
        type: "invalid_request_error",
        message:
          "The compiled grammar is too large, which would cause performance issues. Simplify your tool schemas or reduce the number of strict tools.",
      },
      request_id: "req_011CYFKFQUW16kvBsXKy4JSr",
    },
  },
  {
    provider: "provider-b",
    // langgenius/dify-official-plugins#3886 (2026): the path of the structured output's schema; the
    // real message goes on to quote the schema, left out here.
    what: "a schema its structured output does not take",
    body: {
      type: "error",
      error: {
        type: "invalid_request_error",
        message: "output_config.format.schema: Invalid schema: Schema type is missing for schema: {…}",
      },
    },
  },
  {
    provider: "provider-b",
    // anthropics/claude-code#86664 and #63673 (2026): a tool's `input_schema` (the AI SDK sends the
    // project's schema as its `json` tool where it gives a model no structured output).
    what: "a tool schema it does not take",
    body: {
      type: "error",
      error: {
        type: "invalid_request_error",
        message:
          "tools.0.custom.input_schema: JSON schema is invalid. It must match JSON Schema draft 2020-12 (https://json-schema.org/draft/2020-12). Learn more about tool use at https://platform.claude.com/docs/en/agents-and-tools/tool-use/overview.",
      },
      request_id: "req_011Ce2ZWqbB1mTx8WWqB4D8k",
    },
  },
  {
    provider: "provider-c",
    // googleapis/python-genai#660 (2025) for the words, bethington/ghidra-mcp#440 for the body.
    what: "a schema with too many states",
    body: {
      error: {
        code: 400,
        message:
          "The specified schema produces a constraint that has too many states for serving.  Typical causes of this error are schemas with lots of text (for example, very long property or enum names), schemas with long array length limits (especially when nested), or schemas using complex value matchers (for example, integers or numbers with minimum/maximum bounds or strings with complex formats like date-time)",
        status: "INVALID_ARGUMENT",
      },
    },
  },
  {
    provider: "provider-c",
    // googleapis/js-genai#882 and presenton/presenton#323 (2025), in the body every C 400 has.
    what: "a schema nested too deep",
    body: {
      error: {
        code: 400,
        message: "A schema in GenerationConfig in the request exceeds the maximum allowed nesting depth.",
        status: "INVALID_ARGUMENT",
      },
    },
  },
  {
    provider: "provider-c",
    // The messages providerCSchemaRefusal answers with: a field path in the response schema.
    what: "a schema field it does not take",
    body: {
      error: {
        code: 400,
        message:
          "* GenerateContentRequest.generation_config.response_schema.properties[tags].items: missing field.\n",
        status: "INVALID_ARGUMENT",
      },
    },
  },
];

/**
 * 400s that name the structured output but not the project's schema, or name nothing: Sluice's or
 * the AI SDK's to fix (or unknown), which stay the provider's failure. Recorded likewise.
 */
export const recordedOtherStructuredOutputRefusals: Array<{
  provider: "provider-a" | "provider-b" | "provider-c";
  what: string;
  body: unknown;
}> = [
  {
    provider: "provider-a",
    // epuerta9/deep-research-py#19 (2025): the response format's `type`, not its schema.
    what: "a response format type it does not know",
    body: {
      error: {
        message: "Invalid value: 'object'. Supported values are: 'json_object', 'json_schema', and 'text'.",
        type: "invalid_request_error",
        param: "response_format.type",
        code: "invalid_value",
      },
    },
  },
  {
    provider: "provider-b",
    // prism-php/prism#912 (2026): a field the API no longer takes, whatever the schema.
    what: "the old structured-output field",
    body: {
      type: "error",
      error: {
        type: "invalid_request_error",
        message:
          "output_format: This field is deprecated. Use 'output_config.format' instead. See https://platform.claude.com/docs/en/build-with-claude/structured-outputs for more information.",
      },
    },
  },
  {
    provider: "provider-c",
    // bethington/ghidra-mcp#440 (2026): no field named at all.
    what: "an invalid argument it does not name",
    body: {
      error: { code: 400, message: "Request contains an invalid argument.", status: "INVALID_ARGUMENT" },
    },
  },
  {
    provider: "provider-c",
    // google-gemini/gemini-cli#5923 (2025): a function declaration's depth (Sluice sends none).
    what: "a function declaration nested too deep",
    body: {
      error: {
        code: 400,
        message: "A FunctionDeclaration in the request exceeds the maximum allowed nesting depth.",
        status: "INVALID_ARGUMENT",
      },
    },
  },
];

import { resolveJsonPointer } from "./resolve-json-pointer.js";

type Schema = Record<string, unknown>;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/**
 * A model's answer without the keys that a closed object (`additionalProperties: false` beside
 * `properties`) does not list, wherever the schema that applies to a value is certain: the root,
 * through `properties`, `items`, a map's `additionalProperties` schema and a local `$ref`; never
 * inside `anyOf` or `oneOf`, where which branch the value is meant to match is not known. Provider C cannot be
 * told to leave them out, and provider A's non-strict mode is not held to it, so one extra key would
 * fail an otherwise valid answer. Each key removed is one that object's `additionalProperties: false`
 * refuses whatever else holds, so the removal never turns a valid answer invalid
 * (docs/decisions/0019). A copy; the answer is not changed.
 */
export function withoutUnlistedProperties(schema: Schema, answer: unknown): unknown {
  const keepListed = (node: unknown, value: unknown): unknown => {
    if (!isObject(node)) return value;
    let out = value;
    if (typeof node.$ref === "string" && node.$ref.startsWith("#"))
      out = keepListed(resolveJsonPointer(schema, node.$ref), out);
    if (Array.isArray(out))
      return node.items === undefined ? out : out.map((item) => keepListed(node.items, item));
    if (!isObject(out)) return out;
    const properties = isObject(node.properties) ? node.properties : {};
    const closed = node.additionalProperties === false && isObject(node.properties);
    const entries: Array<[string, unknown]> = [];
    for (const [key, item] of Object.entries(out)) {
      if (Object.hasOwn(properties, key)) entries.push([key, keepListed(properties[key], item)]);
      else if (!closed) entries.push([key, keepListed(node.additionalProperties, item)]);
    }
    return Object.fromEntries(entries);
  };
  try {
    return keepListed(schema, answer);
  } catch (error) {
    // An answer nested past the stack along a recursive $ref: left as it is, for validation to judge.
    if (error instanceof RangeError) return answer;
    throw error;
  }
}

import { resolveJsonPointer } from "./resolve-json-pointer.js";
import { isSchema, type Schema } from "./schema-walk.js";

/** The `$ref`s provider C takes (provider-limits.ts): to an entry of the root's `$defs` or `definitions`. */
const rootDefinition = /^#\/(?:\$defs|definitions)\/[^/]+$/;

/**
 * Provider C's schema with each `$ref` to a root definition written out, as the AI SDK writes it
 * out for the Gemini API (its Schema object has no `$ref`): the definition's keywords, then the
 * `$ref`'s siblings over them, along a chain of `$ref`s to its end. Each node is written once and
 * shared wherever it is named, so the work is linear in the schema; the AI SDK, handed the result,
 * sends what it would have sent, without following a `$ref`. It copies the set of the `$ref`s it is
 * inside at each one it follows, so a chain of them was quadratic: a 64 KiB schema every check
 * takes, a chain of 2,000 definitions, was ~1 s of the event loop a call, and 5 s with a definition
 * named twice by each of 14 more (on each attempt: twice with the repair). A `$ref` that leads back
 * into the definition it is in (refused with the schema) and one to anything else are left to the
 * AI SDK, which refuses them; the root's definitions stay for them.
 */
export function withReferencesWrittenOut(schema: Schema): Schema {
  const written = new Map<Schema, Schema>();
  /** The definitions being written out, from the root down to the node being written. */
  const inside = new Set<Schema>();
  const targetOf = (node: Schema): Schema | undefined => {
    const ref = node.$ref;
    if (typeof ref !== "string" || !rootDefinition.test(ref)) return undefined;
    const target = resolveJsonPointer(schema, ref);
    return isSchema(target) && !inside.has(target) ? target : undefined;
  };
  const write = (node: unknown): unknown => {
    if (!isSchema(node)) return node;
    const known = written.get(node);
    if (known) return known;
    const target = targetOf(node);
    let out: Schema;
    if (target) {
      inside.add(target);
      const { $ref: _ref, ...siblings } = node;
      out = { ...(write(target) as Schema), ...withSubschemasWritten(siblings, write) };
      inside.delete(target);
    } else out = withSubschemasWritten(node, write);
    written.set(node, out);
    return out;
  };
  const { $defs, definitions, ...root } = schema;
  const out = write(root) as Schema;
  return {
    ...out,
    ...($defs === undefined ? {} : { $defs }),
    ...(definitions === undefined ? {} : { definitions }),
  };
}

/** The keywords whose schemas the AI SDK converts for provider C, and how each holds them. */
const convertedKeywords = new Map<string, "names" | "schema or list" | "list">([
  ["properties", "names"],
  ["items", "schema or list"],
  ["allOf", "list"],
  ["anyOf", "list"],
  ["oneOf", "list"],
]);

function withSubschemasWritten(node: Schema, write: (node: unknown) => unknown): Schema {
  const out: Schema = { ...node };
  for (const [keyword, holds] of convertedKeywords) {
    const value = node[keyword];
    if (Array.isArray(value) && holds !== "names") out[keyword] = value.map(write);
    else if (isSchema(value))
      out[keyword] =
        holds === "names"
          ? Object.fromEntries(Object.entries(value).map(([name, child]) => [name, write(child)]))
          : write(value);
  }
  return out;
}

import { resolveJsonPointer } from "./resolve-json-pointer.js";
import { isSchema, type Schema } from "./schema-walk.js";

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
  const shapings = shapingsOf(schema);
  const keepListed = (node: unknown, value: unknown): unknown => {
    if (!isSchema(node)) return value;
    let out = value;
    for (const shaping of shapings(node)) out = keepOwn(shaping, out);
    return out;
  };
  /** What `node`'s own keywords keep of `value`, its `$ref` aside. */
  const keepOwn = (node: Schema, value: unknown): unknown => {
    if (Array.isArray(value))
      return node.items === undefined ? value : value.map((item) => keepListed(node.items, item));
    if (!isSchema(value)) return value;
    const properties = isSchema(node.properties) ? node.properties : {};
    const closed = node.additionalProperties === false && isSchema(node.properties);
    const entries: Array<[string, unknown]> = [];
    for (const [key, item] of Object.entries(value)) {
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

/** A schema whose own keywords reach into a value's items or properties, after those of `before`. */
interface Shaping {
  node: Schema;
  before: Shaping | null;
}

/**
 * The schemas that apply to a value where `node` does, along its chain of local `$ref`s, the
 * farthest first (each `$ref`'s target before the schema naming it), keeping only those that reach
 * into items or properties. Each chain is followed once for the whole answer: read again for each
 * value it applied to, a chain of 1,500 definitions made an answer of 10,000 items 15 to 46 s of the
 * event loop. A `$ref` loop (refused with the schema) ends the chain.
 */
function shapingsOf(schema: Schema): (node: Schema) => Schema[] {
  const known = new Map<Schema, Shaping | null>();
  const chainOf = (node: Schema): Shaping | null => {
    const links: Schema[] = [];
    const onChain = new Set<Schema>();
    let tail: Shaping | null = null;
    for (let at: unknown = node; isSchema(at) && !onChain.has(at); ) {
      const found = known.get(at);
      if (found !== undefined) {
        tail = found;
        break;
      }
      links.push(at);
      onChain.add(at);
      const ref = at.$ref;
      at = typeof ref === "string" && ref.startsWith("#") ? resolveJsonPointer(schema, ref) : undefined;
    }
    for (let index = links.length - 1; index >= 0; index--) {
      const link = links[index] as Schema;
      if (reachesIn(link)) tail = { node: link, before: tail };
      known.set(link, tail);
    }
    return tail;
  };
  return (node) => {
    const found = known.get(node);
    const order: Schema[] = [];
    for (let at = found === undefined ? chainOf(node) : found; at; at = at.before) order.push(at.node);
    return order.reverse();
  };
}

/** Whether a schema's own keywords apply schemas to a value's items or properties. */
function reachesIn(node: Schema): boolean {
  return node.items !== undefined || isSchema(node.properties) || isSchema(node.additionalProperties);
}

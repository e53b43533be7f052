import { shownMemberName } from "../admin/shown-name.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  forEachSchema,
  providerBStructuredOutputProblems,
  providerBUnionProblem,
  providerCReferenceProblems,
  providerCRules,
} from "./provider-limits.js";
import { resolveJsonPointer } from "./resolve-json-pointer.js";
import { shownSchemaName, shownSchemaProblem } from "./schema-name-shown.js";
import { validatorFor } from "./schema-validator.js";
import { nestingKeywords } from "./schema-walk.js";
import { unmeetableReason } from "./unmeetable-schema.js";

/**
 * The project's output schema: a JSON Schema object restricted to the subset that the three
 * providers' structured-output modes accept, plus annotations (below) and what Sluice rewrites into
 * that subset for them (provider-schema.ts): `oneOf`, sent as `anyOf`, and a record's
 * `propertyNames: {"type": "string"}`, left out (docs/decisions/0021). Checked when saved (422 with
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
  "oneOf",
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
 * its structured mode takes (`providerAnnotations` in provider-schema.ts).
 */
export const annotationKinds = new Map<string, "string" | "array" | "boolean" | "any value">([
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
const allowedTypes = new Set(["object", "array", "string", "number", "integer", "boolean", "null"]);
const maxDepth = 10;
/** The UTF-8 bytes of the schema's JSON (docs/structured.md). */
const maxSchemaBytes = 64 * 1024;
/**
 * How deeply objects and arrays may nest anywhere in the schema document, `default` and `const`
 * values included (docs/api.md). Checked iteratively before anything recursive (JSON.stringify, the
 * walk, Ajv) sees the schema: 27 KB of `[[[…]]]` would overflow their stack.
 */
export const maxSchemaNesting = 64;
/**
 * The alternatives the schema's `anyOf` and `oneOf` lists may hold in all (docs/structured.md). Ajv
 * writes code for each (~1.3 ms of compiling each, on the event loop: at a project's first call as
 * at its saving), nesting one inside the next: 2,500 in one list, 44 KB of schema, overflowed the
 * stack after ~3 s. 500 compile in well under a second; a union that wide is already past what a
 * model is asked to choose from.
 */
export const maxAlternatives = 500;
/**
 * How many schemas checking one answer may try in the worst case, each `$ref` counted as what it
 * names (docs/structured.md, decision 0041). An answer that fits none of a union's alternatives is
 * checked against each, on the event loop, so definitions whose two alternatives each name the next
 * double the work with each level while the alternatives as written grow by two (22 levels, 1.5 KB:
 * 5 s). A non-fitting answer was checked at ~3,000 to 5,000 schemas tried a millisecond, so this
 * bounds it near 20 to 35 ms; the schemas of the tests try at most ~2,500 (a 64 KiB
 * schema of plain properties ~1,200).
 */
export const maxSchemasTried = 100_000;

/**
 * Every reason the schema cannot be used; empty when it can. With a provider, that provider's
 * structured-output rules are checked too (provider C's, which its API would otherwise refuse on
 * every call, as a 502): a project's schema is checked with its provider wherever the two meet. With
 * a model, a rule that holds only for some of the provider's models (provider B's union limit and its
 * enum values) is checked for that one. The answer quotes them: a name of the schema that may be a
 * key is shown by its start and length only (schema-name-shown.ts), as in the admin API's 400s.
 */
export function checkOutputSchema(
  schema: unknown,
  provider?: ProviderId,
  model?: string,
  /**
   * Compiles the schema, throwing what Ajv throws: validatorFor, whose cache the call then finds it
   * in; a check of many stored schemas passes one that keeps nothing (compileUnkept).
   */
  compile: (schema: Record<string, unknown>) => unknown = validatorFor,
): string[] {
  const problems = schemaProblems(schema, compile, provider, model);
  return problems.length === 0 ? problems : problems.map(shownSchemaProblem);
}

function schemaProblems(
  schema: unknown,
  compile: (schema: Record<string, unknown>) => unknown,
  provider?: ProviderId,
  model?: string,
): string[] {
  if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
    return ["the output schema must be a JSON object"];
  }
  const tooDeep = deepestPath(schema, maxSchemaNesting);
  if (tooDeep !== null) return [`${tooDeep} nests objects and arrays deeper than ${maxSchemaNesting} levels`];
  const problems: string[] = [];
  if ((schema as Record<string, unknown>).type !== "object")
    problems.push('the root of the output schema must have "type": "object"');
  // Bytes, as the message says: `length` counts UTF-16 code units, half the bytes of "é".
  if (Buffer.byteLength(JSON.stringify(schema), "utf8") > maxSchemaBytes)
    problems.push(`the output schema must be at most ${maxSchemaBytes} bytes of JSON (UTF-8)`);
  const alternatives = alternativesIn(schema as Record<string, unknown>);
  if (alternatives > maxAlternatives)
    problems.push(
      `the output schema's anyOf and oneOf lists hold ${alternatives} alternatives in all: at most ${maxAlternatives}`,
    );
  const tried = schemasTried(schema as Record<string, unknown>);
  if (tried > maxSchemasTried)
    problems.push(
      `the output schema's $ref references make checking an answer try ${tried >= Number.MAX_SAFE_INTEGER ? "more than " : ""}${Math.min(tried, Number.MAX_SAFE_INTEGER)} schemas: at most ${maxSchemasTried}`,
    );
  walk(schema, "#", 0, problems, provider);
  if (problems.length === 0) problems.push(...referenceLoops(schema));
  if (problems.length === 0)
    problems.push(...providerLimits(schema as Record<string, unknown>, provider, model));
  if (problems.length === 0) {
    try {
      compile(schema as Record<string, unknown>);
    } catch (error) {
      problems.push(
        error instanceof RangeError
          ? "the output schema does not compile: its $ref references recurse without end"
          : `the output schema does not compile: ${(error as Error).message}`,
      );
    }
  }
  if (problems.length === 0) problems.push(...danglingReferences(schema));
  return problems;
}

/**
 * The local `$ref`s that name nothing the document holds, in document order. Ajv refuses most as it
 * compiles, but it steps into objects by any key, inherited ones included: `#/properties/constructor`
 * in a schema without such a property named the function every object inherits, which it took for a
 * schema any value matches, and the providers were sent the `$ref` dangling. Each is resolved by own
 * keys (resolveJsonPointer, as the checks above and the answer's shaping resolve it), in each schema
 * of the document (forEachSchema: a `default` or `const` value holding a `$ref` member is none).
 */
function danglingReferences(root: object): string[] {
  const problems: string[] = [];
  forEachSchema(root, (node, path) => {
    const ref = node.$ref;
    if (typeof ref === "string" && ref.startsWith("#") && resolveJsonPointer(root, ref) === undefined)
      problems.push(`${path}/$ref ${JSON.stringify(ref)} names nothing in the schema`);
  });
  return problems;
}

/** How many alternatives the `anyOf` and `oneOf` lists of every schema in the document hold in all. */
function alternativesIn(schema: Record<string, unknown>): number {
  let count = 0;
  forEachSchema(schema, (node) => {
    for (const list of [node.anyOf, node.oneOf]) if (Array.isArray(list)) count += list.length;
  });
  return count;
}

/**
 * How many schemas checking one answer may try at most: a schema counts 1 and what it applies to
 * the value (or its properties and items) counts in full, a `$ref` counting what it names. A `$ref`
 * to a schema the count is already inside (a recursive schema) counts 1: how deep it recurses is
 * the answer's, which the answer's size bounds. Each schema is counted once and remembered, and
 * iteratively (a chain of 2,000 `$ref`s is as deep), so the count is linear in the schema. Only the
 * keywords of `nestingKeywords` (definitions aside: they apply to no value) and `$ref` are followed;
 * the walk refuses every other keyword that applies a schema. Saturates at MAX_SAFE_INTEGER.
 */
function schemasTried(root: Record<string, unknown>): number {
  const counted = new Map<object, number>();
  const onPath = new Set<object>();
  type Frame = { node: object; children: unknown[]; next: number; sum: number };
  const frameOf = (node: object): Frame => {
    onPath.add(node);
    return { node, children: appliedSchemas(root, node), next: 0, sum: 1 };
  };
  const stack: Frame[] = [frameOf(root)];
  let result = 0;
  while (stack.length > 0) {
    const frame = stack[stack.length - 1] as Frame;
    if (frame.next < frame.children.length) {
      const child = frame.children[frame.next++];
      const known = typeof child !== "object" || child === null || onPath.has(child) ? 1 : counted.get(child);
      if (known === undefined) stack.push(frameOf(child as object));
      else frame.sum = Math.min(frame.sum + known, Number.MAX_SAFE_INTEGER);
      continue;
    }
    stack.pop();
    onPath.delete(frame.node);
    counted.set(frame.node, frame.sum);
    const parent = stack[stack.length - 1];
    if (parent) parent.sum = Math.min(parent.sum + frame.sum, Number.MAX_SAFE_INTEGER);
    else result = frame.sum;
  }
  return result;
}

/** The schemas a schema applies to a value or to its parts, the one its local `$ref` names last. */
function appliedSchemas(root: object, node: object): unknown[] {
  const applied: unknown[] = [];
  for (const [keyword, value] of Object.entries(node)) {
    const nesting = nestingKeywords.get(keyword);
    if (nesting === undefined || keyword === "$defs" || keyword === "definitions") continue;
    if (Array.isArray(value)) applied.push(...value);
    else if (nesting === "names" && typeof value === "object" && value !== null)
      applied.push(...Object.values(value));
    else applied.push(value);
  }
  const target = refTarget(root, node);
  if (target !== undefined) applied.push(target);
  return applied;
}

/** What the provider's structured mode refuses in the schema as a whole (provider-limits.ts). */
function providerLimits(
  schema: Record<string, unknown>,
  provider: ProviderId | undefined,
  model: string | undefined,
): string[] {
  if (provider === "provider-c") return providerCReferenceProblems(schema);
  if (provider === "provider-b") {
    const unions = providerBUnionProblem(schema, model);
    return [...providerBStructuredOutputProblems(schema, model), ...(unions ? [unions] : [])];
  }
  return [];
}

/** The JSON Pointer of the first value nested deeper than `limit` levels, else null; iterative. */
function deepestPath(root: unknown, limit: number): string | null {
  const pending: Array<[unknown, string, number]> = [[root, "#", 1]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [value, path, depth] = next;
    if (typeof value !== "object" || value === null) continue;
    if (depth > limit) return path;
    for (const [key, item] of Object.entries(value))
      pending.push([item, `${path}/${shownSchemaName(key)}`, depth + 1]);
  }
  return null;
}

/**
 * A `$ref` that leads back to itself through `$ref`s alone (`$defs.a: {"$ref": "#/$defs/a"}`)
 * names no schema: Ajv would recurse until the stack overflows. Only local references (`#…`) are
 * followed; the walk and the nesting limit above bound the document. Each node has at most one
 * `$ref`, so the nodes on such a loop are found by following each chain only as far as a node an
 * earlier chain reached: every `$ref` is resolved once. (Following every node's chain to its end
 * read a chain of n definitions n²/2 times: ~2 s of the event loop for a 64 KiB schema, checked
 * before every structured call.)
 */
function referenceLoops(root: object): string[] {
  // Every loop of $refs alone is a loop of steps that keep to the same value.
  const onValueLoop = nodesOnValueLoops(root);
  if (onValueLoop.size === 0) return [];
  const onLoop = nodesOnReferenceLoops(root);
  const problems: string[] = [];
  const pending: Array<[unknown, string]> = [[root, "#"]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [node, path] = next;
    if (typeof node !== "object" || node === null) continue;
    const ref = (node as Record<string, unknown>).$ref;
    if (onLoop.has(node))
      problems.push(
        `${path}/$ref ${JSON.stringify(ref)} leads back to itself through $ref alone: it names no schema`,
      );
    else if (onValueLoop.has(node) && ref !== undefined)
      problems.push(
        `${path}/$ref ${JSON.stringify(ref)} leads back to itself through $ref, anyOf and oneOf alone: checking an answer would never end`,
      );
    for (const [key, item] of Object.entries(node)) pending.push([item, `${path}/${shownSchemaName(key)}`]);
  }
  return problems;
}

/**
 * The nodes on a loop of steps that apply a schema to the same value again: a `$ref` to its target,
 * an `anyOf` or `oneOf` to each alternative. Checking a value against one recurses without end
 * (`{"anyOf":[{"$ref":"#/$defs/a"},…]}` as `a`): no step reaches into the value, as `properties` and
 * `items` do, where a recursive schema ends with the answer. Tarjan's strongly connected components,
 * without recursion: each node and step is visited once.
 */
function nodesOnValueLoops(root: object): Set<object> {
  const steps = (node: object): object[] => {
    const next: object[] = [];
    const target = refTarget(root, node);
    if (typeof target === "object" && target !== null) next.push(target);
    for (const list of [(node as Record<string, unknown>).anyOf, (node as Record<string, unknown>).oneOf])
      if (Array.isArray(list))
        for (const item of list) if (typeof item === "object" && item !== null) next.push(item);
    return next;
  };
  const order = new Map<object, number>();
  const low = new Map<object, number>();
  const open = new Set<object>();
  const opened: object[] = [];
  const onLoop = new Set<object>();
  const frames: Array<{ node: object; next: object[]; at: number }> = [];
  const enter = (node: object) => {
    order.set(node, order.size);
    low.set(node, order.size - 1);
    open.add(node);
    opened.push(node);
    frames.push({ node, next: steps(node), at: 0 });
  };
  const nodes: unknown[] = [root];
  for (let node = nodes.pop(); node !== undefined; node = nodes.pop()) {
    if (typeof node !== "object" || node === null) continue;
    nodes.push(...Object.values(node));
    if (order.has(node)) continue;
    enter(node);
    while (frames.length > 0) {
      const frame = frames[frames.length - 1] as (typeof frames)[number];
      const step = frame.next[frame.at++];
      if (step !== undefined) {
        if (!order.has(step)) enter(step);
        else if (open.has(step))
          low.set(frame.node, Math.min(low.get(frame.node) as number, order.get(step) as number));
        continue;
      }
      frames.pop();
      const parent = frames[frames.length - 1];
      if (parent)
        low.set(parent.node, Math.min(low.get(parent.node) as number, low.get(frame.node) as number));
      if (low.get(frame.node) !== order.get(frame.node)) continue;
      const component: object[] = [];
      for (let member = opened.pop(); member !== undefined; member = opened.pop()) {
        open.delete(member);
        component.push(member);
        if (member === frame.node) break;
      }
      if (component.length > 1 || frame.next.includes(frame.node))
        for (const member of component) onLoop.add(member);
    }
  }
  return onLoop;
}

/** The nodes whose `$ref` chain leads back to them; each `$ref` in the document is resolved once. */
function nodesOnReferenceLoops(root: object): Set<unknown> {
  const onLoop = new Set<unknown>();
  /** Each node reached so far: to the number of the chain that reached it first. */
  const reachedIn = new Map<unknown, number>();
  let chains = 0;
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const node = pending.pop();
    if (typeof node !== "object" || node === null) continue;
    for (const item of Object.values(node)) pending.push(item);
    if (reachedIn.has(node)) continue;
    const chain = chains++;
    const path: unknown[] = [];
    let at: unknown = node;
    while (typeof at === "object" && at !== null && !reachedIn.has(at)) {
      reachedIn.set(at, chain);
      path.push(at);
      at = refTarget(root, at);
    }
    // Back at a node of this chain: it and the nodes after it form a loop.
    if (reachedIn.get(at) === chain)
      for (let index = path.indexOf(at); index < path.length; index++) onLoop.add(path[index]);
  }
  return onLoop;
}

/** The value a node's local `$ref` points to, or undefined (no `$ref`, not local, not found). */
function refTarget(root: object, node: unknown): unknown {
  const ref = typeof node === "object" && node !== null ? (node as Record<string, unknown>).$ref : undefined;
  return typeof ref === "string" ? resolveJsonPointer(root, ref) : undefined;
}

/**
 * A property named `__proto__` cannot be answered: the providers' SDKs refuse an answer holding
 * that member (their JSON parsing takes it for a prototype pollution attempt) and their schema
 * converters drop the property, so a schema naming one failed every structured call, each
 * after a repair (two calls billed).
 */
const protoProperty =
  'a property named "__proto__" is not supported (JSON parsers refuse the member in an answer): rename it';

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
    } else if (keyword === "prefixItems") {
      problems.push(
        `${path}: a tuple (prefixItems, as z.tuple writes it) is not supported by the providers' structured output: use an object with a property for each position, or an array whose items share one schema`,
      );
    } else if (!allowedKeywords.has(keyword) && !(keyword === "propertyNames" && namesAnyString(value)))
      problems.push(
        `${path}: keyword ${shownMemberName(keyword)} is not supported by the providers' structured output`,
      );
  }
  if (record.anyOf !== undefined && record.oneOf !== undefined)
    problems.push(
      `${path}: anyOf and oneOf together are not supported (oneOf is sent to the providers as anyOf, and a schema has one list of alternatives)`,
    );
  const types = Array.isArray(record.type) ? record.type : record.type === undefined ? [] : [record.type];
  for (const type of types) {
    if (typeof type !== "string" || !allowedTypes.has(type))
      problems.push(`${path}: unknown type ${JSON.stringify(type)}`);
  }
  const unmeetable = unmeetableReason(record, types);
  if (unmeetable !== null) problems.push(`${path}: ${unmeetable}`);
  if (record.properties !== undefined) {
    if (
      typeof record.properties !== "object" ||
      record.properties === null ||
      Array.isArray(record.properties)
    ) {
      problems.push(`${path}/properties must be an object`);
    } else {
      for (const [name, child] of Object.entries(record.properties)) {
        if (name === "__proto__") problems.push(`${path}/properties/__proto__: ${protoProperty}`);
        else walk(child, `${path}/properties/${shownSchemaName(name)}`, depth + 1, problems, provider);
      }
    }
  }
  if (
    record.required !== undefined &&
    (!Array.isArray(record.required) || record.required.some((name) => typeof name !== "string"))
  ) {
    problems.push(`${path}/required must be an array of property names`);
  } else if (record.required !== undefined) {
    const index = (record.required as string[]).indexOf("__proto__");
    if (index >= 0 && !Object.hasOwn(record.properties ?? {}, "__proto__"))
      problems.push(`${path}/required/${index}: ${protoProperty}`);
    requiredProperties(record, path, problems, provider);
  }
  if (provider === "provider-c") providerCRules(record, types, path, depth, problems);
  // A tuple's `items: false` is refused with its prefixItems, above.
  if (record.items !== undefined && !(record.items === false && record.prefixItems !== undefined))
    walk(record.items, `${path}/items`, depth + 1, problems, provider);
  if (typeof record.additionalProperties === "object" && record.additionalProperties !== null) {
    walk(record.additionalProperties, `${path}/additionalProperties`, depth + 1, problems, provider);
  }
  for (const alternatives of ["anyOf", "oneOf"] as const) {
    const value = record[alternatives];
    if (value === undefined) continue;
    if (!Array.isArray(value)) problems.push(`${path}/${alternatives} must be an array`);
    else {
      for (const [index, child] of value.entries())
        walk(child, `${path}/${alternatives}/${index}`, depth + 1, problems, provider);
    }
  }
  for (const definitions of ["$defs", "definitions"] as const) {
    const value = record[definitions];
    if (value !== undefined && typeof value === "object" && value !== null) {
      for (const [name, child] of Object.entries(value))
        walk(child, `${path}/${definitions}/${shownSchemaName(name)}`, depth + 1, problems, provider);
    }
  }
}

/**
 * Whether a `propertyNames` schema is `{"type": "string"}`, as Zod writes it for a record: JSON's
 * keys are strings, so it constrains nothing, and is not sent (provider A's structured outputs list
 * `propertyNames` among the keywords they do not take). One that constrains the names is refused.
 */
function namesAnyString(value: unknown): boolean {
  return (
    typeof value === "object" &&
    value !== null &&
    Object.keys(value).length === 1 &&
    (value as Record<string, unknown>).type === "string"
  );
}

/**
 * A `required` name that `properties` does not define. Where the object takes no other property
 * (`additionalProperties: false`) no answer can hold it, so the schema can never be met: refused
 * for every provider. An open object may require a key it leaves free (a map's key), which JSON
 * Schema allows and provider A takes; provider C's API refuses every such name, and provider B's
 * structured outputs, which the AI SDK sends every object closed (provider-limits.ts).
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
        ? `${path}/required/${index}: ${shownMemberName(name)} is not among the properties and additionalProperties is false, so no answer can have it`
        : `${path}/required/${index}: ${shownMemberName(name)} is not among the properties (provider C requires a property for every required name)`,
    );
  }
}

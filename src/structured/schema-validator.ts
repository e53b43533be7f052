import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import type { Ajv, Options, ValidateFunction } from "ajv";
import { eachSchema } from "./schema-walk.js";

/**
 * A schema's `pattern`s run on the model's output, which a client steers through its input: with
 * V8's usual (backtracking) engine, `^(a+)+$` or `^(\w+\s?)*$` takes seconds to minutes on a few
 * dozen characters, on the event loop, stalling every request of the instance. So patterns are
 * compiled for V8's linear-time engine (the `l` flag, behind a V8 flag in Node 20, turned on here
 * once; it changes no other regular expression). That engine takes no backreferences, lookarounds or
 * Unicode mode: a pattern needing them is refused when the schema is saved, and so is one whose
 * meaning would change without Unicode mode (property escapes `\p{…}`, code point escapes `\u{…}`,
 * characters beyond U+FFFF). What remains differs only in that `.` and negated classes count a
 * character beyond U+FFFF (an emoji) as two.
 */
setFlagsFromString("--enable-experimental-regexp-engine");
const unicodeOnly = /\\[pP]\{|\\u\{|[\u{10000}-\u{10FFFF}]/u;
type RegExpEngine = NonNullable<NonNullable<Options["code"]>["regExp"]>;
const linearRegExp: RegExpEngine = Object.assign(
  (pattern: string): RegExp => {
    let linear: RegExp;
    try {
      new RegExp(pattern, "u");
      if (unicodeOnly.test(pattern)) throw new Error("Unicode mode");
      linear = new RegExp(pattern, "l");
    } catch {
      throw new Error(
        `pattern ${JSON.stringify(pattern)} cannot be matched in linear time: backreferences, lookarounds, ` +
          "property escapes (\\p{…}), \\u{…} escapes and characters beyond U+FFFF are not supported",
      );
    }
    return linear;
  },
  { code: "linearRegExp" },
);

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
/**
 * Ajv is loaded with the first schema compiled, not at start: loading it took ~70 ms of CPU here, of a
 * start of the embedded default that answers /health (and every proxied call) without it
 * (docs/decisions/0005). Ajv is CommonJS, so `require` loads it synchronously, as the one instance
 * a static import would give.
 */
let AjvClass: typeof Ajv | undefined;
const newGeneration = (): Generation => {
  AjvClass ??= (createRequire(import.meta.url)("ajv") as typeof import("ajv")).Ajv;
  return {
    ajv: new AjvClass({
      allErrors: true,
      strict: false,
      validateFormats: false,
      code: { regExp: linearRegExp },
      // Ajv's own console output (a schema whose generated code fails to compile is printed whole,
      // ~1 MB for a wide union) bypasses the log; the error it throws is answered instead.
      logger: false,
    }),
    compiles: 0,
  };
};
let current: Generation | null = null;
let previous: Generation | null = null;
/** By the schema's JSON, least recently used first (a hit moves its entry to the end). */
const compiled = new Map<string, { validate: ValidateFunction; generation: Generation }>();

/**
 * The compiled validator of a schema, from a bounded LRU cache. When the current Ajv instance has
 * compiled `validatorCacheLimit` schemas, a new one takes over and the one before it is dropped,
 * with the validators it compiled: a schema still in use is compiled again, once, by a newer
 * instance. A few schemas in use never get there: they are compiled once.
 */
export function validatorFor(schema: Record<string, unknown>): ValidateFunction {
  const key = JSON.stringify(schema);
  const hit = compiled.get(key);
  if (hit) {
    compiled.delete(key);
    compiled.set(key, hit);
    return hit.validate;
  }
  current ??= newGeneration();
  if (current.compiles >= validatorCacheLimit) {
    for (const [cachedKey, entry] of compiled) if (entry.generation === previous) compiled.delete(cachedKey);
    previous = current;
    current = newGeneration();
  }
  const generation = current;
  const validate = compileIn(generation, schema);
  compiled.set(key, { validate, generation });
  if (compiled.size > validatorCacheLimit) {
    for (const oldest of compiled.keys()) {
      compiled.delete(oldest);
      break;
    }
  }
  return validate;
}

/** How many schemas one scratch Ajv instance compiles (compileUnkept) before a fresh one takes over. */
const scratchLimit = 25;
let scratch: Generation | null = null;

/**
 * Compiles `schema` as validatorFor does (throwing as it throws), but keeps nothing: for a check of
 * many schemas each used once (`sluice projects check`), which through validatorFor would fill its
 * cache, and the Ajv instances behind it, with thousands of validators no call uses (1.4 GB for
 * 5,000 schemas of 20 KB). A scratch Ajv instance of its own is dropped every `scratchLimit` schemas.
 */
export function compileUnkept(schema: Record<string, unknown>): void {
  if (scratch === null || scratch.compiles >= scratchLimit) scratch = newGeneration();
  compileIn(scratch, schema);
}

/**
 * `schema` compiled by `generation`'s Ajv instance, counted against it. Without `$id` one Ajv
 * instance takes two projects' schemas that share one (it refuses an id it holds), and a `$ref`
 * below an `$id` is not read relative to it; `$schema` would name a meta-schema.
 */
function compileIn(generation: Generation, schema: Record<string, unknown>): ValidateFunction {
  generation.compiles++;
  return generation.ajv.compile(
    eachSchema(schema, ({ $id: _id, $schema: _dialect, ...rest }) => rest) as Record<string, unknown>,
  );
}

/**
 * Validates a model's output; the error strings say where and why. A value that would not survive
 * JSON serialisation is invalid too: JSON.parse reads `1e999` as Infinity, which Ajv takes for a
 * number and JSON.stringify would send as null, breaking the schema the answer was checked against;
 * and so is one nested more than maxAnswerDepth deep (`tooDeep`: only that is said of it).
 */
export function validateAgainstSchema(
  schema: Record<string, unknown>,
  value: unknown,
): { valid: boolean; errors: string[]; tooDeep?: true } {
  const errors: string[] = [];
  // Not given to Ajv, whose validators recurse along a recursive $ref as deep as the value goes.
  if (!nonFiniteNumbers(value, errors)) return { valid: false, errors, tooDeep: true };
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
 * The objects and arrays an answer may nest, the outermost one counted: as deep as a request body
 * these endpoints take (jsonBodyLimits). The AI SDK parses an answer of any depth, but JSON.stringify
 * overflows the stack a few thousand levels down, as many clients' parsers do far sooner.
 */
export const maxAnswerDepth = 64;

/**
 * Reports every number JSON cannot carry (Infinity, -Infinity, NaN), by its JSON Pointer; false,
 * with the first object or array nested more than maxAnswerDepth deep reported, when the value nests
 * that deep (what is below it is not read). Iterative, so a deeply nested answer cannot overflow the
 * stack.
 */
function nonFiniteNumbers(root: unknown, errors: string[]): boolean {
  const pointerToken = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");
  const pending: Array<[unknown, string, number]> = [[root, "", 0]];
  for (let next = pending.pop(); next; next = pending.pop()) {
    const [value, path, depth] = next;
    if (typeof value === "number") {
      if (!Number.isFinite(value))
        errors.push(`${path || "/"} must be a finite number (JSON has no ${String(value)})`);
    } else if (typeof value === "object" && value !== null && depth >= maxAnswerDepth) {
      errors.push(`${path || "/"} nests objects and arrays more than ${maxAnswerDepth} deep`);
      return false;
    } else if (Array.isArray(value)) {
      for (let index = value.length - 1; index >= 0; index--)
        pending.push([value[index], `${path}/${index}`, depth + 1]);
    } else if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value).reverse())
        pending.push([item, `${path}/${pointerToken(key)}`, depth + 1]);
    }
  }
  return true;
}

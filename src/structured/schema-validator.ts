import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import type { Ajv, ErrorObject, Options, ValidateFunction } from "ajv";
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

/**
 * The mismatches of one answer the repair's listing looks for; past it, the search stops (the answer
 * has more). Ajv with allErrors builds an error object for each (and Sluice a string), whatever the
 * answer's size: 100,000 wrong items were 100,000 of each, ~370 ms of the event loop and ~36 MiB on
 * every attempt, and a million ten times that, for a repair prompt that names 50 (listedProblems).
 */
export const maxMismatchesFound = 1000;

/**
 * One Ajv instance stopping at an answer's first mismatch (whether it is valid), another finding
 * its mismatches up to maxMismatchesFound for the repair (built with the first schema that needs
 * it), and how many schemas they have compiled (refused ones included).
 */
type Generation = { ajv: Ajv; listing: Ajv | null; compiles: number };
/**
 * Ajv is loaded with the first schema compiled, not at start: loading it took ~70 ms of CPU here, of a
 * start of the embedded default that answers /health (and every proxied call) without it
 * (docs/decisions/0005). Ajv is CommonJS, so `require` loads it synchronously, as the one instance
 * a static import would give.
 */
let AjvClass: typeof Ajv | undefined;
const newAjv = (allErrors: boolean): Ajv => {
  AjvClass ??= (createRequire(import.meta.url)("ajv") as typeof import("ajv")).Ajv;
  return new AjvClass({
    allErrors,
    strict: false,
    validateFormats: false,
    // A property is the answer's own member or absent: an inherited one (`constructor`, `toString`)
    // was read as the value of a property so named, and an answer leaving it out failed its type.
    ownProperties: true,
    code: allErrors ? { regExp: linearRegExp, process: stoppingPastMaxMismatches } : { regExp: linearRegExp },
    // Ajv's own console output (a schema whose generated code fails to compile is printed whole,
    // ~1 MB for a wide union) bypasses the log; the error it throws is answered instead.
    logger: false,
  });
};
const newGeneration = (): Generation => ({ ajv: newAjv(false), listing: null, compiles: 0 });

/**
 * A listing validator's code, made to throw its errors so far (`{ [pastMaxMismatches]: vErrors }`)
 * once it holds more than maxMismatchesFound: Ajv has no such option. Its generated code counts
 * every error it adds in `errors` (`errors++;`, or `errors = vErrors.length;` after a referenced
 * schema's), which is where the check goes (the test of a large wrong answer fails if Ajv's code
 * changes). The throw may come inside an `anyOf` whose later alternative the value would have
 * matched: such a validator only lists the mismatches of an answer the other found invalid.
 */
function stoppingPastMaxMismatches(code: string): string {
  return code.replace(
    /\berrors\+\+;|\berrors = vErrors\.length;/g,
    (step) => `${step}if(errors>${maxMismatchesFound}){throw {${pastMaxMismatches}:vErrors};}`,
  );
}
const pastMaxMismatches = "sluicePastMaxMismatches";
let current: Generation | null = null;
let previous: Generation | null = null;
/** By the schema's JSON, least recently used first (a hit moves its entry to the end). */
const compiled = new Map<string, CompiledSchema>();

/** A schema's validator, and its listing one once an answer needed it. */
interface CompiledSchema {
  validate: ValidateFunction;
  generation: Generation;
  list?: ValidateFunction;
}

/**
 * The compiled validator of a schema, from a bounded LRU cache. When the current Ajv instance has
 * compiled `validatorCacheLimit` schemas, a new one takes over and the one before it is dropped,
 * with the validators it compiled: a schema still in use is compiled again, once, by a newer
 * instance. A few schemas in use never get there: they are compiled once.
 */
export function validatorFor(schema: Record<string, unknown>): ValidateFunction {
  return compiledFor(schema).validate;
}

function compiledFor(schema: Record<string, unknown>): CompiledSchema {
  const key = JSON.stringify(schema);
  const hit = compiled.get(key);
  if (hit) {
    compiled.delete(key);
    compiled.set(key, hit);
    return hit;
  }
  current ??= newGeneration();
  if (current.compiles >= validatorCacheLimit) {
    for (const [cachedKey, entry] of compiled) if (entry.generation === previous) compiled.delete(cachedKey);
    previous = current;
    current = newGeneration();
  }
  const generation = current;
  const entry: CompiledSchema = { validate: compileIn(generation, generation.ajv, schema), generation };
  compiled.set(key, entry);
  if (compiled.size > validatorCacheLimit) {
    for (const oldest of compiled.keys()) {
      compiled.delete(oldest);
      break;
    }
  }
  return entry;
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
  compileIn(scratch, scratch.ajv, schema);
}

/**
 * `schema` compiled by `generation`'s Ajv instance, counted against it. Without `$id` one Ajv
 * instance takes two projects' schemas that share one (it refuses an id it holds), and a `$ref`
 * below an `$id` is not read relative to it; `$schema` would name a meta-schema.
 */
function compileIn(generation: Generation, ajv: Ajv, schema: Record<string, unknown>): ValidateFunction {
  generation.compiles++;
  return ajv.compile(
    eachSchema(schema, ({ $id: _id, $schema: _dialect, ...rest }) => rest) as Record<string, unknown>,
  );
}

/**
 * Validates a model's output; the error strings say where and why. A value that would not survive
 * JSON serialisation is invalid too: JSON.parse reads `1e999` as Infinity, which Ajv takes for a
 * number and JSON.stringify would send as null, breaking the schema the answer was checked against;
 * and so is one nested more than maxAnswerDepth deep (`tooDeep`: only that is said of it). Whether
 * it is valid is decided at the first mismatch; an invalid one is searched for its mismatches up to
 * maxMismatchesFound (`moreErrors` when it has more). `keyword` names the first mismatch's kind
 * without its path or value (for the operator's log): Ajv's keyword, `finite` or `maxDepth`.
 */
export function validateAgainstSchema(
  schema: Record<string, unknown>,
  value: unknown,
): { valid: boolean; errors: string[]; keyword?: string; tooDeep?: true; moreErrors?: true } {
  const errors: string[] = [];
  // Not given to Ajv, whose validators recurse along a recursive $ref as deep as the value goes.
  const numbers = nonFiniteNumbers(value, errors);
  if (numbers === "tooDeep") return { valid: false, errors, keyword: "maxDepth", tooDeep: true };
  const nonFinite = errors.length > 0 ? { keyword: "finite" } : {};
  const entry = compiledFor(schema);
  if (entry.validate(value))
    return numbers === "more"
      ? { valid: false, errors, ...nonFinite, moreErrors: true }
      : { valid: errors.length === 0, errors, ...nonFinite };
  const { found, more } = mismatches(entry, schema, value);
  const room = maxMismatchesFound - errors.length;
  for (const error of found.slice(0, room))
    errors.push(`${error.instancePath || "/"} ${error.message ?? "is invalid"}${detailOf(error.params)}`);
  const first = "keyword" in nonFinite ? nonFinite : { keyword: keywordOf(found[0]) };
  return more || numbers === "more" || found.length > room
    ? { valid: false, errors, ...first, moreErrors: true }
    : { valid: false, errors, ...first };
}

/** An Ajv error's keyword (`required`, `type`, `additionalProperties`): a word of Ajv's, else `other`. */
function keywordOf(error: ErrorObject | undefined): string {
  const keyword = error?.keyword;
  return typeof keyword === "string" && /^\$?[A-Za-z]{1,40}$/.test(keyword) ? keyword : "other";
}

/**
 * An invalid answer's mismatches, up to maxMismatchesFound (`more` past it), from the schema's
 * listing validator; the first one alone when that does not compile.
 */
function mismatches(
  entry: CompiledSchema,
  schema: Record<string, unknown>,
  value: unknown,
): { found: ErrorObject[]; more: boolean } {
  const first = entry.validate.errors ?? [];
  let list: ValidateFunction;
  try {
    entry.generation.listing ??= newAjv(true);
    entry.list ??= compileIn(entry.generation, entry.generation.listing, schema);
    list = entry.list;
  } catch {
    return { found: first, more: false };
  }
  try {
    list(value);
    return { found: list.errors ?? first, more: false };
  } catch (error) {
    const stopped = (error as Record<string, unknown> | null)?.[pastMaxMismatches];
    if (!Array.isArray(stopped)) throw error;
    return { found: stopped as ErrorObject[], more: true };
  }
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
 * Reports the numbers JSON cannot carry (Infinity, -Infinity, NaN), by their JSON Pointers, up to
 * maxMismatchesFound ("more" when there are more); "tooDeep", with the first object or array nested
 * more than maxAnswerDepth deep reported, when the value nests that deep (what is below it is not
 * read). Iterative, so a deeply nested answer cannot overflow the stack: one frame an object or
 * array, its pointer written only when something in it is reported (a path string for every value
 * was most of the walk's time and memory on an answer of 100,000 items).
 */
function nonFiniteNumbers(root: unknown, errors: string[]): "ok" | "more" | "tooDeep" {
  let more = false;
  const pointerToken = (key: string) => key.replace(/~/g, "~0").replace(/\//g, "~1");
  const frames: Frame[] = [];
  /** The pointer of the value at `key` in the object or array at `parent` ("" for the root). */
  const pointer = (parent: (() => string) | null, key: string | number) =>
    parent === null ? "" : `${parent()}/${typeof key === "number" ? key : pointerToken(key)}`;
  /** Reads `value` at `key` of `parent`, whose pointer is written only when it is reported. */
  const visit = (value: unknown, parent: (() => string) | null, key: string | number): boolean => {
    if (typeof value === "number") {
      if (Number.isFinite(value)) return true;
      if (errors.length < maxMismatchesFound)
        errors.push(`${pointer(parent, key) || "/"} must be a finite number (JSON has no ${String(value)})`);
      else more = true;
    } else if (typeof value === "object" && value !== null) {
      if (frames.length >= maxAnswerDepth) {
        errors.push(
          `${pointer(parent, key) || "/"} nests objects and arrays more than ${maxAnswerDepth} deep`,
        );
        return false;
      }
      const items = Array.isArray(value) ? (value as unknown[]) : null;
      const keys = items ? null : Object.keys(value);
      const path = () => pointer(parent, key);
      frames.push({ items, keys, object: value as Record<string, unknown>, next: 0, path });
    }
    return true;
  };
  if (!visit(root, null, "")) return "tooDeep";
  for (let frame = frames.at(-1); frame; frame = frames.at(-1)) {
    const at = frame.next++;
    const length = frame.items ? frame.items.length : (frame.keys?.length ?? 0);
    if (at >= length) {
      frames.pop();
      continue;
    }
    const { path: parent, items, keys, object } = frame;
    const key = items ? at : (keys?.[at] ?? "");
    const value = items ? items[at] : object[key as string];
    if (!visit(value, parent, key)) return "tooDeep";
  }
  return more ? "more" : "ok";
}

/** An object or array nonFiniteNumbers is reading: its items or keys, and the next to read. */
interface Frame {
  items: unknown[] | null;
  keys: string[] | null;
  object: Record<string, unknown>;
  next: number;
  path: () => string;
}

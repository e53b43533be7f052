import {
  closesObjects,
  eachMember,
  jsonStart,
  keyIs,
  lastMembers,
  quotedValueAfterKey,
  skipSpaces,
  stringEnd,
  stringStart,
  valueEnd,
} from "../providers/json-bytes.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  objectField,
  usageFromProvider,
  usageFromProviderA,
  usageFromProviderB,
  usageFromProviderC,
} from "../providers/usage-from-json.js";
import { emptyUsage, type TokenUsage } from "../usage/token-usage.js";
import { ByteEnds } from "./byte-ends.js";
import { serviceTierMember } from "./service-tier-member.js";
import type { MeterReading } from "./usage-meter.js";

/** What is kept of a larger body: its start (where the model is read) and its end (the usage). */
const headBytes = 4096;
const tailBytes = 64 * 1024;

/**
 * What a JSON body says: `ends` of one over the cap, else the `whole` body (null when empty);
 * `ended`: the provider ended the answer cleanly (not cut).
 */
export function fromJson(
  provider: ProviderId,
  ends: ByteEnds | null,
  whole: Buffer | null,
  ended = false,
): MeterReading {
  if (ends !== null) return fromBodyEnds(provider, ends.head(), ends.tail());
  if (whole === null) return { usage: emptyUsage(), model: null };
  // A body cut short may end inside a tool call whose input (the model's) spells a usage object:
  // only the body's own, a top-level member, is its usage. A whole one's is the last that only
  // members and the body's closing brace follow (lastUsageObject).
  const quick = fromUsageObject(provider, whole, whole, ended ? bodyUsageObject : topLevelUsageObject);
  if (quick) return quick;
  // A Gemini JSON-array stream: its last element's usageMetadata holds the totals; the array is not parsed.
  // A usageMetadata key written with escapes is not found by its bytes: an array without the plain
  // key but with such a key is walked as a cut one is (keyIs decodes keys).
  if (provider === "provider-c" && isArray(whole))
    return ended &&
      (whole.lastIndexOf(usageKeys[provider]) >= 0 || !hasEscapedKey(whole, usageKeys[provider]))
      ? fromGeminiArray(whole)
      : fromCutGeminiArray(whole);
  // Without the usage key anywhere a whole parse finds no usage either, and a large body (a
  // batch of Gemini embeddings, a file, audio) would stall the event loop for milliseconds; unless
  // the key is written with escapes (`"\u0075sage"`: JSON no provider sends, but JSON), which only
  // a body with a `\u` in it is searched for (hasEscapedKey).
  if (whole.lastIndexOf(usageKeys[provider]) < 0 && !hasEscapedKey(whole, usageKeys[provider]))
    return { usage: emptyUsage(), model: headModel(provider, whole, true) };
  try {
    return fromJsonBody(provider, JSON.parse(whole.toString("utf8")));
  } catch {
    return { usage: emptyUsage(), model: null };
  }
}

/**
 * Whether the JSON object or array `body` holds a key that is `key`'s name written with a `\u`
 * escape. Each `\u` found (a native search) is in a string, which is read to its end: a key is
 * followed by a colon, and its name is decoded and compared (keyIs: at most 6 bytes a character).
 * The next search starts after that string: the work stays linear in the body.
 */
function hasEscapedKey(body: Buffer, key: Buffer): boolean {
  const first = body[jsonStart(body)];
  if (first !== 0x7b /* { */ && first !== 0x5b /* [ */) return false;
  const name = key.toString("latin1", 1, key.length - 1);
  for (let at = body.indexOf(unicodeEscape); at > 0; at = body.indexOf(unicodeEscape, at)) {
    const end = stringEnd(body, at - 1);
    if (end < 0) return false;
    // The string's opening quote: the last quote before the `\u`, unless that is an escaped one
    // (then the string holds a quote, and is no usage key).
    const start = body.lastIndexOf(0x22 /* " */, at - 1);
    try {
      if (
        body[skipSpaces(body, end)] === 0x3a /* : */ &&
        body[start - 1] !== 0x5c &&
        keyIs(body, start, end, name)
      )
        return true;
    } catch {
      // An escape that does not decode: no key JSON.parse reads.
    }
    at = end;
  }
  return false;
}

const unicodeEscape = Buffer.from("\\u");

/**
 * A body over the cap: from here on only copies of its first and last bytes are kept, and the
 * chunks are let go. Every chunk passes the head until it is full; only the chunks that reach into
 * the last `tailBytes` need to pass the ring.
 */
export function keepEnds(chunks: Buffer[]): ByteEnds {
  const ends = new ByteEnds(headBytes, tailBytes);
  let fromTail = chunks.length;
  for (let covered = 0; fromTail > 0 && covered < tailBytes; )
    covered += (chunks[--fromTail] as Buffer).length;
  for (let index = 0; index < fromTail; index++) ends.pushHead(chunks[index] as Buffer);
  for (let index = fromTail; index < chunks.length; index++) ends.push(chunks[index] as Buffer);
  return ends;
}

/** Usage from the ends of a body over the cap; nothing when the usage object is not whole in the tail. */
function fromBodyEnds(provider: ProviderId, head: Buffer, tail: Buffer): MeterReading {
  if (provider === "provider-c" && isArray(head)) return fromGeminiArray(tail);
  return fromUsageObject(provider, head, tail) ?? { usage: emptyUsage(), model: null };
}

export const usageKeys: Record<ProviderId, Buffer> = {
  "provider-a": Buffer.from('"usage"'),
  "provider-b": Buffer.from('"usage"'),
  "provider-c": Buffer.from('"usageMetadata"'),
};
/** For event text (SSE): the key that names the model, and its value (1–200 bytes, no escapes). */
export const modelPatterns: Record<ProviderId, RegExp> = {
  "provider-a": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-b": /"model"\s*:\s*"([^"\\]{1,200})"/,
  "provider-c": /"modelVersion"\s*:\s*"([^"\\]{1,200})"/,
};
/** The same keys for bodies, found on the bytes (quotedValueAfterKey: what the pattern would find). */
const modelKeys: Record<ProviderId, Buffer> = {
  "provider-a": Buffer.from('"model"'),
  "provider-b": Buffer.from('"model"'),
  "provider-c": Buffer.from('"modelVersion"'),
};

/** The model named in `body[from..limit)` (null when none), without decoding the text around it. */
export function modelIn(provider: ProviderId, body: Buffer, from: number, limit: number): string | null {
  return quotedValueAfterKey(body, modelKeys[provider], from, limit);
}

/**
 * The model the body names: found in its first bytes, where providers A and B put it. A `whole`
 * body that holds more before it (a Responses API answer's long `instructions`, say) has its
 * top-level members walked, so the model is the one a stream of the same answer reports; the walk
 * reads every byte of nested values in JavaScript, so a body beyond `walkBytes` is read from its
 * last bytes first (a batch of float embeddings, whose `model` follows its `data`), and else walked
 * only as far as `walkBytes` of nested values take it (leadingModel). Only a top-level `model` is
 * the answer's: a Responses API answer echoes the app's `tools` and `metadata` after its usage, and
 * a `"model"` in them (`metadata: {model: "x"}`) named the row's model, unpriced or a cheaper one's.
 */
function headModel(provider: ProviderId, body: Buffer, whole: boolean): string | null {
  const head = modelIn(provider, body, 0, headBytes);
  if (head !== null) return head;
  if (!whole || provider === "provider-c" || body.length <= headBytes) return null;
  if (body.length <= walkBytes) return topLevelModel(body, "model");
  return tailModel(body, modelKeys[provider]) ?? leadingModel(body);
}

const walkBytes = 256 * 1024;

/**
 * The `model` of a body's last `headBytes` that is a member of the object the body is (only whole
 * members and its closing brace follow it: closesObjects), the last such; null when none is. Inside
 * a string a quote is escaped, so the key's bytes match only a key or a string value.
 */
function tailModel(body: Buffer, key: Buffer): string | null {
  const from = body.length - headBytes;
  for (let at = body.lastIndexOf(key); at >= from; at = at === 0 ? -1 : body.lastIndexOf(key, at - 1)) {
    const open = valueAfterKey(body, at + key.length);
    if (open < 0 || body[open] !== 0x22 /* " */) continue;
    const end = stringEnd(body, open);
    if (end < 0 || !closesObjects(body, end, 1)) continue;
    return nameIn(body, open, end);
  }
  return null;
}

/**
 * The first top-level `model` member of the JSON object `body` is, found by walking its members
 * from the start: a string value is passed over by a native search whatever its length, an object or
 * array read byte by byte, at most `walkBytes` of them in all (then null: the walk stops). Null too
 * when the body is no JSON object.
 */
function leadingModel(body: Buffer): string | null {
  let nested = 0;
  let model: string | null = null;
  try {
    eachMember(body, jsonStart(body), (keyStart, keyEnd, start) => {
      if (keyIs(body, keyStart, keyEnd, "model")) {
        model = body[start] === 0x22 /* " */ ? nameIn(body, start, stringEnd(body, start)) : null;
        return true;
      }
      if (body[start] !== 0x7b /* { */ && body[start] !== 0x5b /* [ */) return false;
      // The member's value is walked again by eachMember: only when it ends within the budget.
      const end = valueEnd(body, start, Math.min(body.length, start + walkBytes - nested));
      if (end < 0) return true;
      nested += end - start;
      return false;
    });
  } catch {
    // A key with an escape that does not decode: no JSON the provider sends.
  }
  return model;
}

/** The string in `body[open..end)` (quotes included), decoded, when it is 1 to 200 characters; else null. */
function nameIn(body: Buffer, open: number, end: number): string | null {
  if (end < 0) return null;
  try {
    const value: unknown = JSON.parse(body.toString("utf8", open, end));
    return typeof value === "string" && value.length > 0 && value.length <= 200 ? value : null;
  } catch {
    return null;
  }
}

/** The string value of the object's last top-level member `name` (of 200 characters at most); null when none. */
function topLevelModel(body: Buffer, name: string): string | null {
  try {
    const [model] = lastMembers(body, jsonStart(body), name);
    if (model === null || body[model.start] !== 0x22 /* " */) return null;
    const value: unknown = JSON.parse(body.toString("utf8", model.start, model.end));
    return typeof value === "string" && value.length <= 200 ? value : null;
  } catch {
    return null;
  }
}

/**
 * The cheap path for a JSON response: parse only its top-level usage object (the last one in the
 * body; inside string values a quote would be escaped, so `"usage"` cannot match there) and read
 * the model with a pattern, working on the bytes rather than a string of the whole body. Null when
 * the body does not look like that; the caller then parses the whole body. `head` is the body's
 * start and `body` the body, or of a body over the cap its last bytes (where the key cannot match
 * inside a string either, wherever they start).
 */
function fromUsageObject(
  provider: ProviderId,
  head: Buffer,
  body: Buffer,
  find: (body: Buffer, key: Buffer) => UsageObject | null = bodyUsageObject,
): { usage: TokenUsage; model: string | null } | null {
  if (provider === "provider-c" && isArray(head)) return null;
  const found = find(body, usageKeys[provider]);
  if (!found) return null;
  // Provider A names the tier that served the call beside the usage object, not in it.
  const usage =
    provider === "provider-a"
      ? usageFromProviderA(found.value, serviceTierMember(body, 0, found))
      : usageFromProvider[provider](found.value);
  if (!usage) return null;
  // Provider C names the model after its usage; a server that names it before (a compatible one)
  // has the whole body's top-level members walked for it, as the model's function call arguments
  // may spell a modelVersion too.
  const model =
    provider === "provider-c"
      ? (modelIn(provider, body, found.end, body.length) ??
        (head === body && body.length <= walkBytes ? topLevelModel(body, "modelVersion") : null))
      : headModel(provider, head, head === body);
  return { usage, model };
}

/** The usage object of a JSON body, or of its last bytes: a member of the object the body is. */
function bodyUsageObject(body: Buffer, key: Buffer): UsageObject | null {
  return lastUsageObject(body, key, 1);
}

/**
 * The last `<key>: {…}` object in `body` that is the answer's own, parsed alone (the body around it
 * may be large; inside string values a quote is escaped, so the key cannot match there). The
 * answer's own is a member of the object the text is, or of one of its members' (`depth` 2: an
 * event's `response` or `message`): only whole members and closing braces follow it to the end
 * (closesObjects), which is read from the object's end, a few members where the usage ends the
 * answer. Null when there is none, it is cut or it does not parse.
 *
 * A later key of that name is passed over when it is nested deeper (in the `tools` a Responses API
 * object echoes after its usage, as a compatible server may write them: an app's JSON Schema that
 * spells a `usage` object, with counts of its own in an example), or its value is no object (a
 * Responses API `metadata` entry named "usage"). At most `maxPassedObjects` objects or `null`s are
 * passed over, each read to its end and its object's: past them the text is read once from its end
 * back (lastMemberObject).
 * A `null` that is the answer's own is its saying it has none (a queued or failed Responses API
 * object): the keys before it are in the `tools` it echoes, whose schemas the app wrote.
 */
export function lastUsageObject(body: Buffer, key: Buffer, depth: 1 | 2): UsageObject | null {
  let passed = 0;
  for (let at = body.lastIndexOf(key); at > 0; at = body.lastIndexOf(key, at - 1)) {
    const open = valueAfterKey(body, at + key.length);
    if (open < 0) continue;
    if (body[open] === 0x7b /* { */) {
      const end = valueEnd(body, open);
      if (end < 0) return null; // cut: the object that holds the rest is no usage either
      if (closesObjects(body, end, depth, 1)) return parsedObject(body, open, end);
      if (++passed === maxPassedObjects) return lastMemberObject(body, key, depth);
    } else if (isNullAt(body, open)) {
      if (closesObjects(body, open + 4, depth, 1)) return null;
      // Each read to its object's end as well: as many as the app's schemas spell were quadratic.
      if (++passed === maxPassedObjects) return lastMemberObject(body, key, depth);
    }
  }
  return null;
}

/**
 * lastUsageObject's answer where the keys of that name after the answer's own are many (the app's
 * tool schemas, echoed after a Responses API object's `tool_usage`, may spell any number of
 * them): the text is read once from its end back to the first such key, as serviceTierMember reads
 * a tier. Going back, each closing brace or bracket opens a level and its opening one leaves it,
 * and a string is stepped over whole. The member taken is the last key of that name whose value,
 * an object or `null`, is within 1 to `depth` levels of the end, all objects; the closing bytes
 * after it are then checked as lastUsageObject checks them (closesObjects). Null when there is
 * none, its value is `null` or does not parse, or the text is no JSON.
 */
function lastMemberObject(body: Buffer, key: Buffer, depth: 1 | 2): UsageObject | null {
  const first = body.indexOf(key);
  const name = key.toString("latin1", 1, key.length - 1);
  /** The offsets of the closing bytes met going back whose opening ones are not met yet. */
  const levels: number[] = [];
  let objects = 0;
  // The value a member of the answer's object met last (going back) has, while the tokens before it
  // may be its colon and key: its first offset (-1: none) and the offset past it.
  let valueStart = -1;
  let valueEnd = 0;
  let colon = false;
  try {
    for (let at = body.length - 1; at >= first && first >= 0; ) {
      const byte = body[at] as number;
      if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) {
        at--;
        continue;
      }
      if (byte === 0x3a /* : */) {
        colon = valueStart >= 0;
        at--;
        continue;
      }
      if (byte === 0x22 /* " */) {
        const start = stringStart(body, at);
        if (start < 0) return null;
        if (colon && keyIs(body, start, at + 1, name)) {
          if (!closesObjects(body, valueEnd, depth, 1) || body[valueStart] !== 0x7b /* { */) return null;
          return parsedObject(body, valueStart, valueEnd);
        }
        valueStart = -1;
        colon = false;
        at = start - 1;
        continue;
      }
      valueStart = -1;
      colon = false;
      if (byte === 0x7d /* } */ || byte === 0x5d /* ] */) {
        levels.push(at);
        if (byte === 0x7d) objects++;
      } else if (byte === 0x7b /* { */ || byte === 0x5b /* [ */) {
        const closing = levels.pop();
        if (closing === undefined || body[closing] !== byte + 2) return null; // `{`..`}`, `[`..`]`
        if (byte === 0x7b) {
          objects--;
          if (isOwn(levels.length, objects, depth)) {
            valueStart = at;
            valueEnd = closing + 1;
          }
        }
      } else if (
        byte === 0x6c /* l */ &&
        at >= 3 &&
        isNullAt(body, at - 3) &&
        isOwn(levels.length, objects, depth)
      ) {
        valueStart = at - 3;
        valueEnd = at + 1;
        at -= 4;
        continue;
      }
      at--;
    }
  } catch {
    // A key with an escape that does not decode: no JSON the provider sends.
  }
  return null;
}

const maxPassedObjects = 8;

/** Whether a value inside `levels` levels, `objects` of them objects, is a member of the answer's object (1 to `depth` levels, all objects). */
function isOwn(levels: number, objects: number, depth: number): boolean {
  return levels >= 1 && levels <= depth && objects === levels;
}

/** Whether `null` starts at `at`. */
function isNullAt(body: Buffer, at: number): boolean {
  return at + 4 <= body.length && body.compare(nullValue, 0, 4, at, at + 4) === 0;
}

const nullValue = Buffer.from("null");

/**
 * The last top-level `<key>: {…}` member of the JSON object `body` holds, whole and parsed, found by
 * walking its members (each byte read once, the usage object's twice) up to its end or where it is
 * cut short: a key of that name nested deeper (a tool call's input, a function call's arguments) is
 * not it. Null when there is none, or `body` is no JSON object.
 */
function topLevelUsageObject(body: Buffer, key: Buffer): UsageObject | null {
  const name = key.toString("latin1", 1, key.length - 1);
  const open = jsonStart(body);
  if (body[open] !== 0x7b /* { */) return null;
  let found: UsageObject | null = null;
  try {
    eachMember(body, open, (keyStart, keyEnd, start) => {
      if (body[start] === 0x7b /* { */ && keyIs(body, keyStart, keyEnd, name)) {
        const end = valueEnd(body, start);
        if (end >= 0) found = parsedObject(body, start, end) ?? found;
      }
      return false;
    });
  } catch {
    // A key with an escape that does not decode: no JSON the provider sends.
  }
  return found;
}

/**
 * The offset of the value after a key that ends at `from` (`<key> : value`, with any spaces); -1
 * when no colon follows.
 */
function valueAfterKey(body: Buffer, from: number): number {
  const colon = skipSpaces(body, from);
  return body[colon] === 0x3a /* : */ ? skipSpaces(body, colon + 1) : -1;
}

/** A usage object found in a body: its value, and the offsets of its opening and closing braces. */
export type UsageObject = { value: unknown; start: number; end: number };

/** The offset of the `{` that follows the key at `at` (`<key> : {`); -1 when no object follows. */
function objectOpenAfterKey(body: Buffer, at: number, keyLength: number): number {
  const open = valueAfterKey(body, at + keyLength);
  return open >= 0 && body[open] === 0x7b /* { */ ? open : -1;
}

/** The object in `body[open..end)`, parsed (`end` of the result is its closing brace); null when it does not parse. */
function parsedObject(body: Buffer, open: number, end: number): UsageObject | null {
  try {
    return { value: JSON.parse(body.toString("utf8", open, end)), start: open, end: end - 1 };
  } catch {
    return null;
  }
}

/** Whether the JSON text starts an array (after any whitespace). */
function isArray(body: Buffer): boolean {
  return body[skipSpaces(body, 0)] === 0x5b /* [ */;
}

function fromJsonBody(provider: ProviderId, body: unknown): { usage: TokenUsage; model: string | null } {
  const model = (value: unknown) => (typeof value === "string" ? value : null);
  switch (provider) {
    case "provider-a": {
      const usage = usageFromProviderA(objectField(body, "usage"), objectField(body, "service_tier"));
      return { usage: usage ?? emptyUsage(), model: model(objectField(body, "model")) };
    }
    case "provider-b":
      return {
        usage: usageFromProviderB(objectField(body, "usage")) ?? emptyUsage(),
        model: model(objectField(body, "model")),
      };
    case "provider-c":
      return {
        usage: usageFromProviderC(objectField(body, "usageMetadata")) ?? emptyUsage(),
        model: model(objectField(body, "modelVersion")),
      };
  }
}

/**
 * Usage from a Gemini JSON-array stream (`[{…},{…}]`) kept whole but cut short (the provider or the
 * client broke it off): the usageMetadata of the last element that has one whole, a member of the
 * element itself. The elements are walked member by member (eachMember: each byte read once, a
 * usageMetadata's twice, only those objects parsed): a usageMetadata nested deeper, in a function
 * call's arguments (which the model writes, and a prompt can steer), is not the element's, also
 * where the cut leaves it as the last whole one; the SSE form of the same stream (whose unfinished last event is not read) never takes
 * it either. The walk stops where the body stops being an array of objects (never so from the
 * provider), with what it found before. An array that ended cleanly is whole, and its last
 * usageMetadata is its last element's own: it is read from the end (fromGeminiArray).
 */
function fromCutGeminiArray(body: Buffer): MeterReading {
  let found: { object: UsageObject; usage: TokenUsage } | null = null;
  try {
    let at = skipSpaces(body, skipSpaces(body, 0) + 1); // past the `[`
    while (body[at] === 0x7b /* { */) {
      const element = elementUsage(body, at);
      const usage = element.usage && usageFromProviderC(element.usage.value);
      if (element.usage && usage) found = { object: element.usage, usage };
      if (element.end < 0) break; // cut inside the element: nothing whole follows
      at = skipSpaces(body, element.end);
      if (body[at] !== 0x2c /* , */) break;
      at = skipSpaces(body, at + 1);
    }
  } catch {
    // A key with an escape that does not decode: no JSON the provider sends.
  }
  if (found === null) return failedIf(endsWithErrorElement(body, 0), { usage: emptyUsage(), model: null });
  const { object, usage } = found;
  // Each element names the model after its usage object; else the first element that names it.
  const model =
    modelIn("provider-c", body, object.end, object.end + 2000) ??
    modelIn("provider-c", body, 0, object.start + 2000);
  return failedIf(endsWithErrorElement(body, object.end), { usage, model });
}

const usageMetadataName = "usageMetadata";

/**
 * Walks the members of the array element that opens at `open` (eachMember): its own last
 * usageMetadata object that is whole and parses (null when none), and the offset just past the
 * element (-1 when it is cut short, or is no JSON object). Throws on a key with an escape that does
 * not decode.
 */
function elementUsage(body: Buffer, open: number): { usage: UsageObject | null; end: number } {
  let usage: UsageObject | null = null;
  const end = eachMember(body, open, (keyStart, keyEnd, start) => {
    if (body[start] === 0x7b /* { */ && keyIs(body, keyStart, keyEnd, usageMetadataName)) {
      const objectEnd = valueEnd(body, start);
      if (objectEnd > start) usage = parsedObject(body, start, objectEnd) ?? usage;
    }
    return false;
  });
  return { usage, end };
}

/**
 * Usage from a Gemini JSON-array stream that ended cleanly, or from the last bytes of one over the
 * kept size (whose start, and so the depth of each key, is not kept), read from the end: the last
 * usageMetadata object that is complete (a cut may go through the last one).
 *
 * The keys are tried from the last, and the work stays linear in the body: an object found cut
 * (it opens at `cutFrom` and never closes) is inside every earlier object that reaches it, so an
 * earlier object is read only up to there, and is cut too when it has not closed by then. A cut
 * body with many nested keys (a function call's arguments) is thus walked once, not once per key.
 * An object that closes but does not parse (never so in a well-formed answer) is given up after
 * `maxUnparsedObjects` of them, each of which may have been read to the end.
 *
 * An array whose last element is the provider's error (`{"error":…}`, what the SSE form sends as
 * an event, isStreamErrorEvent) is read as failed. It follows the last usage object, so only the
 * bytes after that are searched for it (endsWithErrorElement).
 */
function fromGeminiArray(body: Buffer): MeterReading {
  const key = usageKeys["provider-c"];
  let cutFrom = body.length;
  let unparsed = 0;
  for (
    let at = body.lastIndexOf(key);
    at >= 0 && unparsed < maxUnparsedObjects;
    at = at === 0 ? -1 : body.lastIndexOf(key, at - 1)
  ) {
    const open = objectOpenAfterKey(body, at, key.length);
    if (open < 0) continue;
    const end = valueEnd(body, open, cutFrom);
    if (end < 0) {
      cutFrom = Math.min(cutFrom, open);
      continue;
    }
    const found = parsedObject(body, open, end);
    const usage = found && usageFromProviderC(found.value);
    if (found && usage) {
      // Each element names the model after its usage object; else the first element that names it.
      const model =
        modelIn("provider-c", body, found.end, found.end + 2000) ?? modelIn("provider-c", body, 0, at + 2000);
      return failedIf(endsWithErrorElement(body, found.end), { usage, model });
    }
    unparsed++;
  }
  return failedIf(endsWithErrorElement(body, 0), { usage: emptyUsage(), model: null });
}

function failedIf(failed: boolean, reading: MeterReading): MeterReading {
  if (failed) reading.failed = true;
  return reading;
}

const errorKey = Buffer.from('"error"');

/**
 * Whether the array's last element, found after `from`, is an error object: `{"error"` (any spaces)
 * that closes where the array does (before `]` and the body's end, or at the end of a body cut
 * after it). Outside a string such bytes open an object whose first key is `error` (inside one the
 * quotes would be escaped). The search goes forward, so the first such object found holds any later
 * one; an object that is not the last element is stepped over whole: each byte is read once.
 */
function endsWithErrorElement(body: Buffer, from: number): boolean {
  for (let at = body.indexOf(errorKey, from); at >= 0; ) {
    const open = spacesBefore(body, at) - 1;
    if (body[open] !== 0x7b /* { */) {
      at = body.indexOf(errorKey, at + errorKey.length);
      continue;
    }
    const end = valueEnd(body, open);
    if (end < 0) return false; // cut inside it: the object that holds the rest is no error element
    const close = skipSpaces(body, end);
    if (
      close === body.length ||
      (body[close] === 0x5d /* ] */ && skipSpaces(body, close + 1) === body.length)
    )
      return true;
    at = body.indexOf(errorKey, end);
  }
  return false;
}

/** The offset of the JSON whitespace that ends just before `at` (`at` when there is none). */
function spacesBefore(body: Buffer, at: number): number {
  let index = at;
  while (index > 0) {
    const byte = body[index - 1];
    if (byte !== 0x20 && byte !== 0x0a && byte !== 0x0d && byte !== 0x09) break;
    index--;
  }
  return index;
}

const maxUnparsedObjects = 8;

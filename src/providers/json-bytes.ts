/**
 * Walking JSON text in a Buffer without parsing it: what the usage meter (reading one object out of
 * a large body), the stream usage option and the adapters reading a request's model (finding one
 * member's bytes) need. Offsets are
 * byte offsets; a value that is cut short (the body ends inside it) gives -1.
 */

/**
 * Where the JSON text in `body` starts: past a leading UTF-8 byte order mark, which RFC 8259 lets a
 * parser skip (and the providers' parsers do), and past whitespace. `JSON.parse` of the text as
 * `toString` decodes it refuses the mark (U+FEFF is no JSON whitespace), so a reader that did not
 * skip it would take a body the provider reads for no JSON at all.
 */
export function jsonStart(body: Buffer): number {
  return skipSpaces(body, byteOrderMarkLength(body));
}

/** 3 when `body` starts with a UTF-8 byte order mark, else 0. */
export function byteOrderMarkLength(body: Buffer): number {
  return body[0] === 0xef && body[1] === 0xbb && body[2] === 0xbf ? 3 : 0;
}

/** The offset of the first byte at or after `from` that is not JSON whitespace. */
export function skipSpaces(body: Buffer, from: number): number {
  let index = from;
  while (body[index] === 0x20 || body[index] === 0x0a || body[index] === 0x0d || body[index] === 0x09)
    index++;
  return index;
}

/**
 * The offset just past the value that starts at `at` (strings inside skipped); -1 when cut. Only
 * the bytes before `limit` are read: a string, object or array that does not end before it counts
 * as cut, and a number, true, false or null ends there at the latest.
 */
export function valueEnd(body: Buffer, at: number, limit = body.length): number {
  const first = body[at];
  if (first === 0x22 /* " */) return stringEnd(body, at, limit);
  if (first === 0x7b /* { */ || first === 0x5b /* [ */) {
    let depth = 0;
    for (let index = at; index < limit; index++) {
      const byte = body[index];
      if (byte === 0x22) {
        const end = stringEnd(body, index, limit);
        if (end < 0) return -1;
        index = end - 1;
      } else if (byte === 0x7b || byte === 0x5b) depth++;
      else if ((byte === 0x7d || byte === 0x5d) && --depth === 0) return index + 1;
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter.
  let index = at;
  while (index < limit && !delimiters.has(body[index] as number)) index++;
  return index;
}

/**
 * The offset just past the string that opens at `at`; -1 when cut (no closing quote before
 * `limit`). Jumps to the next quote (a native search): a quote is the string's end unless an odd
 * run of backslashes escapes it. After an escaped quote the next bytes are read one by one, so a
 * string dense with escaped quotes (a body made of them) costs no search per quote; a string
 * without them, the common case, costs one search.
 */
export function stringEnd(body: Buffer, at: number, limit = body.length): number {
  // `index` never starts inside an escape: backslashes before it are accounted for.
  let index = at + 1;
  for (;;) {
    const quote = body.indexOf(0x22 /* " */, index);
    if (quote < 0 || quote >= limit) return -1;
    let backslashes = 0;
    while (quote - 1 - backslashes >= index && body[quote - 1 - backslashes] === 0x5c /* \ */) backslashes++;
    if (backslashes % 2 === 0) return quote + 1;
    index = quote + 1;
    const stop = Math.min(index + 32, limit);
    for (; index < stop; index++) {
      const byte = body[index];
      if (byte === 0x22) return index + 1;
      if (byte === 0x5c) index++;
    }
    if (index >= limit) return -1;
  }
}

const delimiters = new Set([0x2c, 0x7d, 0x5d, 0x20, 0x0a, 0x0d, 0x09]);

/**
 * Whether `body` from `from` on, the text after a JSON value, closes `fewest` to `depth` objects and
 * ends: a member of the object a JSON text is (`depth` 1), or of one of its members' objects (2: an
 * event's `response`), is followed so; a value nested deeper, or in an array, is followed by more
 * closing braces or by a bracket. Read in one pass, byte by byte (the members after a usage object
 * are a few short ones), counting the closing bytes that are no nested value's; a string longer
 * than a few bytes is jumped over by the native search (stringEnd).
 */
export function closesObjects(body: Buffer, from: number, depth: number, fewest = depth): boolean {
  let closed = 0;
  let nested = 0;
  for (let at = from; at < body.length; at++) {
    const byte = body[at];
    if (byte === 0x22 /* " */) {
      at = shortStringEnd(body, at) - 1;
      if (at < 0) return false;
    } else if (byte === 0x7b /* { */ || byte === 0x5b /* [ */) nested++;
    else if (byte === 0x7d /* } */ || byte === 0x5d /* ] */) {
      if (nested > 0) nested--;
      else if (byte === 0x5d || ++closed > depth) return false;
    }
  }
  return closed >= fewest && nested === 0;
}

/** stringEnd, with the first bytes read here: a native search costs more than a short key's bytes. */
function shortStringEnd(body: Buffer, at: number): number {
  const stop = Math.min(at + 48, body.length);
  for (let index = at + 1; index < stop; index++) {
    const byte = body[index];
    if (byte === 0x22 /* " */) return index + 1;
    if (byte === 0x5c /* \ */) index++;
  }
  return stringEnd(body, at);
}

/** A value's bytes: `start` to `end` (exclusive). */
export interface Span {
  start: number;
  end: number;
}

/**
 * The offset of the quote that opens the string whose closing quote is at `close`; -1 when the
 * text before it holds none (a body's last bytes that begin inside a string). A quote inside a
 * string is escaped, an odd run of backslashes before it; the opening one has none.
 */
export function stringStart(body: Buffer, close: number): number {
  let at = close - 1;
  while (at >= 0) {
    const quote = previousQuote(body, at);
    if (quote < 0) return -1;
    let backslashes = 0;
    while (quote - 1 - backslashes >= 0 && body[quote - 1 - backslashes] === 0x5c /* \ */) backslashes++;
    if (backslashes % 2 === 0) return quote;
    at = quote - 1;
  }
  return -1;
}

/**
 * The offset of the last quote at or before `at`, or -1. The keys and values around the member
 * looked for (a tier, a usage object) are short: the first bytes are looked at here, a longer string (a message's content) is left to
 * Buffer's native search, whose call costs more than a few bytes read in JavaScript.
 */
function previousQuote(body: Buffer, at: number): number {
  const near = Math.max(0, at - 32);
  for (let index = at; index >= near; index--) if (body[index] === 0x22 /* " */) return index;
  return near === 0 ? -1 : body.lastIndexOf(0x22 /* " */, near - 1);
}

/**
 * The values of the last members named `first` and `second` of the object that opens at `open`,
 * as byte offsets (`end` exclusive); null for a name it lacks. Keys are compared as bytes, or
 * decoded when they hold an escape. Throws when the text is not a JSON object's.
 */
export function lastMembers(
  body: Buffer,
  open: number,
  first: string,
  second = "",
): [Span | null, Span | null] {
  const found: [Span | null, Span | null] = [null, null];
  const end = eachMember(body, open, (keyStart, keyEnd, start) => {
    if (keyIs(body, keyStart, keyEnd, first)) found[0] = { start, end: valueEnd(body, start) };
    else if (second !== "" && keyIs(body, keyStart, keyEnd, second))
      found[1] = { start, end: valueEnd(body, start) };
    return false;
  });
  if (end < 0) throw new SyntaxError("not a JSON object");
  return found;
}

/**
 * Walks the members of the object that opens at `open`, up to its end or the first value cut short:
 * `visit` gets each key's bytes (quotes included) and where its value starts, and stops the walk by
 * answering true. Returns the offset just past the object's closing brace when the walk reached it,
 * else -1 (stopped, or the text is cut short or no JSON object's). Throws on a key with an escape
 * that does not decode.
 */
export function eachMember(
  body: Buffer,
  open: number,
  visit: (keyStart: number, keyEnd: number, start: number) => boolean,
): number {
  let at = skipSpaces(body, open + 1);
  if (body[at] === 0x7d /* } */) return at + 1;
  for (;;) {
    if (body[at] !== 0x22 /* " */) return -1;
    const keyEnd = valueEnd(body, at);
    if (keyEnd < 0) return -1;
    const colon = skipSpaces(body, keyEnd);
    if (body[colon] !== 0x3a /* : */) return -1;
    const start = skipSpaces(body, colon + 1);
    if (visit(at, keyEnd, start)) return -1;
    const end = valueEnd(body, start);
    if (end <= start) return -1;
    at = skipSpaces(body, end);
    if (body[at] !== 0x2c /* , */) return body[at] === 0x7d /* } */ ? at + 1 : -1;
    at = skipSpaces(body, at + 1);
  }
}

/**
 * Whether the key string at `start`..`end` (quotes included) is `name` (ASCII), as `JSON.parse`
 * reads the key. A key without escapes is compared as bytes. One with escapes is decoded on the fly
 * against `name`, up to the first difference, with no string made for it (a `JSON.parse` per key
 * let a body of a million escaped keys hold the event loop for most of a second). An escape is at most 6 bytes (`\u0073`) for one UTF-16
 * code unit of `name`, so a key longer than 6 times `name` cannot be it; a `\u` pair of surrogates
 * is two code units, compared one by one as `JSON.parse` makes them. Throws on an escape that does
 * not decode before the first difference (one after it does not change the answer, and such a body
 * is no JSON for the provider either).
 */
export function keyIs(body: Buffer, start: number, end: number, name: string): boolean {
  const close = end - 1;
  const length = close - start - 1;
  if (length < name.length || length > 6 * name.length) return false;
  let at = start + 1;
  for (let index = 0; index < name.length; index++) {
    if (at >= close) return false;
    let unit = body[at] as number;
    if (unit === 0x5c /* \ */) {
      unit = escapedUnit(body, at, close);
      at += body[at + 1] === 0x75 /* u */ ? 6 : 2;
    } else at++;
    if (unit !== name.charCodeAt(index)) return false;
  }
  return at === close;
}

/** The UTF-16 code unit the escape at `at` (its backslash) stands for; throws when it is none. */
function escapedUnit(body: Buffer, at: number, close: number): number {
  switch (body[at + 1]) {
    case 0x22 /* " */:
    case 0x5c /* \ */:
    case 0x2f /* / */:
      return body[at + 1] as number;
    case 0x62 /* b */:
      return 0x08;
    case 0x66 /* f */:
      return 0x0c;
    case 0x6e /* n */:
      return 0x0a;
    case 0x72 /* r */:
      return 0x0d;
    case 0x74 /* t */:
      return 0x09;
    case 0x75 /* u */:
      return hexUnit(body, at + 2, close);
    default:
      throw new SyntaxError("Bad escape in a JSON string");
  }
}

/** The code unit of the 4 hex digits at `at` (a `\\u` escape's), before `close`; throws when cut or not hex. */
function hexUnit(body: Buffer, at: number, close: number): number {
  let unit = 0;
  for (let index = at; index < at + 4; index++) {
    const digit = index < close ? hexDigit(body[index] as number) : -1;
    if (digit < 0) throw new SyntaxError("Bad \\u escape in a JSON string");
    unit = unit * 16 + digit;
  }
  return unit;
}

function hexDigit(byte: number): number {
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  if (byte >= 0x61 && byte <= 0x66) return byte - 0x57;
  if (byte >= 0x41 && byte <= 0x46) return byte - 0x37;
  return -1;
}

/**
 * The first `<key>\s*:\s*"<value>"` in `body[from..limit)` whose value is 1 to 200 bytes with no
 * quote or backslash: exactly what `/<key>\s*:\s*"([^"\\]{1,200})"/` finds in
 * `body.toString("latin1", from, limit)` (`\s` is 09–0d, 20 and a0 in latin1), without decoding
 * the text around it. `key` includes its quotes (`"model"`). The value is decoded as UTF-8, as JSON
 * is written (`"modèle"`, not `"modÃ¨le"`); one of ASCII bytes alone, nearly every one, as latin1,
 * which reads them the same and is faster. Null when there is none.
 */
export function quotedValueAfterKey(body: Buffer, key: Buffer, from: number, limit: number): string | null {
  const end = Math.min(limit, body.length);
  // Searched only up to `end`: a large body without the key in its first bytes is not scanned.
  const text = end < body.length ? body.subarray(0, end) : body;
  for (let at = text.indexOf(key, from); at >= 0 && at + key.length <= end; at = text.indexOf(key, at + 1)) {
    let index = regexSpaces(body, at + key.length, end);
    if (index >= end || body[index] !== 0x3a /* : */) continue;
    index = regexSpaces(body, index + 1, end);
    if (index >= end || body[index] !== 0x22 /* " */) continue;
    const start = index + 1;
    let stop = start;
    // Every byte of the value OR'ed: under 0x80, it is ASCII.
    let bits = 0;
    while (stop < end && stop - start <= maxValueBytes) {
      const byte = body[stop] as number;
      if (byte === 0x22 || byte === 0x5c /* \ */) break;
      bits |= byte;
      stop++;
    }
    if (stop > start && stop - start <= maxValueBytes && stop < end && body[stop] === 0x22)
      return body.toString(bits < 0x80 ? "latin1" : "utf8", start, stop);
  }
  return null;
}

const maxValueBytes = 200;

/** Past the bytes a regular expression's `\s` matches in latin1 text, from `from` up to `end`. */
function regexSpaces(body: Buffer, from: number, end: number): number {
  let index = from;
  for (; index < end; index++) {
    const byte = body[index] as number;
    if (!((byte >= 0x09 && byte <= 0x0d) || byte === 0x20 || byte === 0xa0)) break;
  }
  return index;
}

import { decodeContent } from "./content-coding.js";
import type { DecompressingMeter } from "./decompressing-meter.js";
import type { UsageMeter } from "./usage-meter.js";

const noBytes = Buffer.alloc(0);
const star = 0x2a;

/**
 * Masks the provider key Sluice injected wherever a provider's answer quotes it back: a compatible
 * server that echoes the request in its error, say, would otherwise hand the whole key to a client
 * that holds only a share of it. Each occurrence becomes as many `*`, so the body keeps its length
 * (and any content-length stays true). Used on answers that are not a success (3xx, 4xx, 5xx), which
 * are small; a success passes untouched. A key with a character encoders escape (keyMayBeEscaped) is
 * also found escaped (escapedKeyRanges): JSON's `\/` or `\u002B`, a URL's `%2B`, each of its bytes
 * masked. The last bytes of each chunk that may begin a key (`key.length - 1`, or six times the key's
 * length when it may be escaped: `\uXXXX` for each character) are held back until the next chunk or
 * the end shows whether a key starts in them. The meter reads the provider's own bytes.
 */
export class ReflectedKeyMask {
  private held: Buffer = noBytes;
  private readonly escapable: boolean;
  /** The most bytes a quote of the key takes, less one: what each chunk holds back. */
  private readonly keep: number;

  constructor(
    private readonly key: Buffer,
    private readonly meter: UsageMeter | DecompressingMeter | null,
  ) {
    this.escapable = keyMayBeEscaped(key.toString("latin1"));
    this.keep = (this.escapable ? longestEscape : 1) * key.length - 1;
  }

  /** The bytes to forward now (null: none yet). */
  pass(chunk: Buffer): Buffer | null {
    this.meter?.push(chunk);
    let data = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    let at = data.indexOf(this.key);
    const escapes = this.escapable && (data.includes(backslash) || data.includes(percent));
    // A copy before masking: the meter (a decompressor) may still hold the provider's chunk.
    if ((at !== -1 || escapes) && data === chunk) data = Buffer.from(chunk);
    let cut = Math.max(0, data.length - this.keep);
    if (escapes) {
      // A quote that begins in the bytes held back is masked once the data holds all it may take
      // (six bytes a character), with the next chunk or at the end: now, with its start more than
      // `keep` bytes before the data's end, it is.
      const { starts, held } = maskQuotes(data, at, this.key, cut);
      // The held bytes begin with a whole character, never inside an escape, so that the next
      // chunk's search reads the escapes in them as they are; or with the first quote held.
      cut = Math.min(firstAtOrAfter(starts, cut), held);
    } else
      for (; at !== -1; at = data.indexOf(this.key, at + this.key.length))
        data.fill(star, at, at + this.key.length);
    this.held = data.subarray(cut);
    return cut > 0 ? data.subarray(0, cut) : null;
  }

  /**
   * What is still held at the end of the body. A body cut inside a quote of the key (a
   * content-length that ends there, a connection closed there) ends on the key's first bytes: that
   * end is masked from `minCutQuote` bytes on, fewer being a provider's public prefix at most. For a
   * key that may be escaped, so is an end that reads as the key's first characters (escapes undone,
   * the last maybe cut short: cutEscapedQuoteLength), counted in the key's characters it gives away.
   */
  end(): Buffer | null {
    if (this.held.length === 0) return null;
    // A copy (once a body, of fewer bytes than six keys): the held bytes may be the
    // provider's chunk, which the meter may still hold.
    const rest = Buffer.from(this.held);
    this.held = noBytes;
    // The quotes pass held back as they were: the body ended, they go on no further.
    if (this.escapable) maskQuotes(rest, rest.indexOf(this.key), this.key, rest.length);
    let quoted = cutQuoteLength(rest, this.key);
    if (this.escapable && (rest.includes(backslash) || rest.includes(percent)))
      quoted = Math.max(quoted, cutEscapedQuoteLength(rest, this.key));
    if (quoted > 0) rest.fill(star, rest.length - quoted);
    return rest;
  }
}

/**
 * A header value with every occurrence of the key replaced (header values have no length to keep),
 * also one written escaped (a redirect's `location: …?key=q8%2BZr…`) when `escapable`: whether the
 * key may be (keyMayBeEscaped), which a caller masking every header of an answer asks once.
 */
export function maskKeyInHeader(value: string, key: string, escapable = keyMayBeEscaped(key)): string {
  // For the providers' own keys (never escapable) the search for the key is all a header value pays.
  if (!escapable || !(value.includes("%") || value.includes("\\")))
    return value.includes(key) ? value.replaceAll(key, "[redacted]") : value;
  // Searched escaped before any plain quote is replaced, as ReflectedKeyMask.maskQuotes does: a key
  // ending in `\` or `%` is quoted plain at the start of its escaped quote.
  const { ranges } = escapedKeyRanges(Buffer.from(value, "latin1"), Buffer.from(key, "latin1"));
  for (let at = value.indexOf(key); at !== -1; at = value.indexOf(key, at + key.length))
    ranges.push([at, at + key.length]);
  if (ranges.length === 0) return value;
  let out = "";
  let from = 0;
  for (const [start, end] of merged(ranges)) {
    out += `${value.slice(from, start)}[redacted]`;
    from = end;
  }
  return out + value.slice(from);
}

/**
 * Whether `text` quotes the key, as it is or escaped as a JSON string or a URL writes it
 * (maskKeyInHeader's search): a name a provider's answer gives (its model) that a row or a message
 * would keep, from a compatible server that echoes the request into it.
 */
export function quotesKey(text: string, key: string): boolean {
  return key !== "" && maskKeyInHeader(text, key) !== text;
}

/**
 * The fewest of the key's first bytes a body's end is masked for: a provider's public prefix is at
 * most seven (`sk-proj`, `AIzaSy` and one more), and text that long is no key's by chance.
 */
const minCutQuote = 8;

/** The length of the longest end of `data` that is the key's beginning, from minCutQuote bytes; 0 if none. */
function cutQuoteLength(data: Buffer, key: Buffer): number {
  for (let length = Math.min(data.length, key.length - 1); length >= minCutQuote; length--)
    if (data.compare(key, 0, length, data.length - length) === 0) return length;
  return 0;
}

const backslash = 0x5c;
const percent = 0x25;
/** The longest escape of one character: JSON's `\uXXXX`. */
const longestEscape = 6;
/** Characters no JSON or URL encoder escapes: a key of these alone is only ever quoted as it is. */
const neverEscaped = /^[A-Za-z0-9._-]*$/;

/**
 * Whether some encoder may write the key otherwise than as its bytes: it holds a character that
 * JSON escapes (`"`, `\`; `/` as `\/` in PHP's json_encode; `+`, `<`, `>`, `&`, `'` as `\u002B`…
 * in .NET's and Go's) or a URL percent-encodes. The providers' own keys (letters, digits, `-`, `_`)
 * never are; a key of a compatible server, such as one made with `openssl rand -base64`, may be.
 */
export function keyMayBeEscaped(key: string): boolean {
  return !neverEscaped.test(key);
}

/** The value of JSON's two-character escapes (`\/`, `\n`…), by their second byte. */
const shortEscapes = new Map([
  [0x22, 0x22],
  [0x5c, 0x5c],
  [0x2f, 0x2f],
  [0x62, 0x08],
  [0x66, 0x0c],
  [0x6e, 0x0a],
  [0x72, 0x0d],
  [0x74, 0x09],
]);

function hexDigit(byte: number | undefined): number {
  if (byte === undefined) return -1;
  if (byte >= 0x30 && byte <= 0x39) return byte - 0x30;
  const lower = byte | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

/** The value of the `digits` hex digits at `at`, or -1. */
function hexAt(data: Buffer, at: number, digits: number): number {
  let value = 0;
  for (let index = 0; index < digits; index++) {
    const digit = hexDigit(data[at + index]);
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

/**
 * `data` read left to right as characters, a JSON string escape (`\/`, `\"`, `\\`, `\u002B` in
 * any case) or a percent-escape (`%2B`, `%2b`) each one character: `text`, a byte per character;
 * `starts`, the offset where each character begins, and `data.length` last. A `\u` escape past
 * latin1 reads as 0, which no key holds (the admin input takes printable ASCII). An escape cut short
 * by the data's end (`\u00`, `%2`) reads as its bytes, each one character. `escapes`: which kinds
 * are undone (readingsOf); a kind not undone reads as its bytes.
 */
function readEscaped(data: Buffer, escapes: Escapes = "both"): { text: Buffer; starts: Uint32Array } {
  const text = Buffer.allocUnsafe(data.length);
  const starts = new Uint32Array(data.length + 1);
  let characters = 0;
  for (let at = 0; at < data.length; characters++) {
    starts[characters] = at;
    const byte = data[at] as number;
    let value = byte;
    let size = 1;
    if (byte === backslash && escapes !== "url") {
      const next = data[at + 1];
      const short = next === undefined ? undefined : shortEscapes.get(next);
      const unicode = next === 0x75 ? hexAt(data, at + 2, 4) : -1;
      if (short !== undefined) {
        value = short;
        size = 2;
      } else if (unicode >= 0) {
        value = unicode > 0xff ? 0 : unicode;
        size = 6;
      }
    } else if (byte === percent && escapes !== "json") {
      const escaped = hexAt(data, at + 1, 2);
      if (escaped >= 0) {
        value = escaped;
        size = 3;
      }
    }
    text[characters] = value;
    at += size;
  }
  starts[characters] = data.length;
  return { text: text.subarray(0, characters), starts: starts.subarray(0, characters + 1) };
}

/** Which escapes a reading of the data undoes: both kinds, or JSON's alone, or a URL's alone. */
type Escapes = "both" | "json" | "url";

/**
 * The readings `data` is searched in. Read with both kinds of escape, a quote that mixes them is
 * found, but text before a quote may begin an escape of the kind its encoder does not write, which
 * takes in the quote's first characters: a literal `%` before a JSON quote of a key that begins
 * with two hex digits (`100%ab+Zr\/…` reads `%ab` as one character), `\u00` before a URL's; and a
 * key may hold one (`q8%41+…`, which JSON leaves as it is). Where the data holds both a `\` and a
 * `%`, it is also read as JSON alone and as a URL alone would decode it (the first reading's
 * characters begin where theirs do: neither kind's escape holds the other's first byte); else the
 * one reading is either of them.
 */
function readingsOf(data: Buffer): Escapes[] {
  return data.includes(backslash) && data.includes(percent) ? ["both", "json", "url"] : ["both"];
}

/**
 * Where `data` quotes the key escaped: `data` read as characters (readEscaped, in each of
 * readingsOf) and searched for the key. `ranges`: the `[start, end)` byte offsets of each quote found
 * in each reading (the same quote may be found in several, and quotes may overlap: `merged`);
 * `starts`: as the first reading's readEscaped.
 */
function escapedKeyRanges(data: Buffer, key: Buffer): { ranges: [number, number][]; starts: Uint32Array } {
  const readings = readingsOf(data);
  let starts: Uint32Array | null = null;
  const ranges: [number, number][] = [];
  for (const escapes of readings) {
    const reading = readEscaped(data, escapes);
    starts ??= reading.starts;
    const { text } = reading;
    for (let found = text.indexOf(key); found !== -1; found = text.indexOf(key, found + key.length))
      ranges.push([reading.starts[found] as number, reading.starts[found + key.length] as number]);
  }
  return { ranges, starts: starts as Uint32Array };
}

/**
 * Masks in `data` every quote of the key, plain (the first at `at`) and escaped (escapedKeyRanges),
 * but those that begin at or after `from`: the caller holds those back, as the next chunk may show
 * them to go on (a key ending in `\` or `%`, possible only for a compatible server's printable-
 * ASCII key, is quoted plain at the start of its escaped quote: `…Ab\` of `…Ab\\`, `…Ab%2` of
 * `…Ab%252`; masked now, the escape's rest would reach the client with the next chunk), and the
 * next search reads them whole. The escaped search runs before any plain quote is masked, for the
 * same reason. `held`: where the first quote left as it is begins (the data's length if none);
 * `starts`: as escapedKeyRanges gives them.
 */
function maskQuotes(
  data: Buffer,
  at: number,
  key: Buffer,
  from: number,
): { starts: Uint32Array; held: number } {
  const { ranges, starts } = escapedKeyRanges(data, key);
  for (; at !== -1; at = data.indexOf(key, at + key.length)) ranges.push([at, at + key.length]);
  let held = data.length;
  for (const [start, end] of ranges)
    if (start < from) data.fill(star, start, end);
    else held = Math.min(held, start);
  return { starts, held };
}

/** The ranges sorted, those that overlap or touch made one. */
function merged(ranges: [number, number][]): [number, number][] {
  ranges.sort((a, b) => a[0] - b[0]);
  const out: [number, number][] = [];
  for (const [start, end] of ranges) {
    const last = out[out.length - 1];
    if (last !== undefined && start <= last[1]) last[1] = Math.max(last[1], end);
    else out.push([start, end]);
  }
  return out;
}

/**
 * The length in bytes of the longest end of `data` that quotes the key's first characters escaped
 * (minCutQuote of them or more, fewer than all): `data` read as characters (readEscaped), its end
 * the key's first `n`, maybe followed by an escape the end cut short that may still write the
 * key's next character (`\`, `\u00`, `%`, `%2` before a `+`). 0 if none. The count is of the
 * key's characters, which are what a client decoding the end would learn, not of the bytes that
 * write them: `\u0071\u0038` gives away two, however long it is.
 */
function cutEscapedQuoteLength(data: Buffer, key: Buffer): number {
  let longest = 0;
  for (const escapes of readingsOf(data))
    longest = Math.max(longest, cutQuoteInReading(data, key, readEscaped(data, escapes)));
  return longest;
}

/** cutEscapedQuoteLength in one reading of `data`. */
function cutQuoteInReading(
  data: Buffer,
  key: Buffer,
  { text, starts }: { text: Buffer; starts: Uint32Array },
): number {
  // Where the whole characters end: at the data's end, or before an escape cut short (at most five
  // bytes, `\uXXX`, each read as a character of its own).
  let longest = 0;
  for (let whole = text.length; whole >= 0 && data.length - (starts[whole] as number) <= 5; whole--) {
    const unfinished = data.subarray(starts[whole] as number);
    for (let length = Math.min(whole, key.length - 1); length >= minCutQuote; length--) {
      const start = whole - length;
      if (
        text.compare(key, 0, length, start, whole) === 0 &&
        (unfinished.length === 0 || mayBeginEscapeOf(unfinished, key[length] as number))
      ) {
        longest = Math.max(longest, data.length - (starts[start] as number));
        break;
      }
    }
  }
  return longest;
}

/** Whether `bytes` (1 to 5 of them) begin an escape of `character` that they do not finish. */
function mayBeginEscapeOf(bytes: Buffer, character: number): boolean {
  const hex = character.toString(16).padStart(2, "0");
  const text = bytes.toString("latin1").toLowerCase();
  return [`\\u00${hex}`, `%${hex}`].some((whole) => whole.length > text.length && whole.startsWith(text));
}

/** The first of the ascending `starts` at or after `offset` (the last is the data's length). */
function firstAtOrAfter(starts: Uint32Array, offset: number): number {
  let low = 0;
  let high = starts.length - 1;
  while (low < high) {
    const middle = (low + high) >> 1;
    if ((starts[middle] as number) < offset) low = middle + 1;
    else high = middle;
  }
  return starts[low] as number;
}

/**
 * The most compressed bytes of an error answer held to be decoded and masked, and the most it may
 * decode to: a provider's error is a few hundred bytes; one past either is not forwarded at all.
 */
export const maxCompressedErrorBytes = 1024 * 1024;
const maxDecodedErrorBytes = 8 * 1024 * 1024;
/** How much of a decoded error body is masked at once (CompressedKeyMask.end). */
const maskedSliceBytes = 64 * 1024;

/**
 * `ReflectedKeyMask` for an error answer the provider compressed though Sluice asks for `identity`:
 * the key is not in the compressed bytes as they are, and the client decodes them. The whole body
 * is held, decoded at its end (decodeContent: last coding first, off the event loop) and masked,
 * and the client gets it decoded (the caller drops the content-encoding and content-length). A body
 * in a coding Sluice cannot undo, one that does not decode, or one past the caps is not forwarded:
 * the client gets the status and headers with an empty body, never bytes it cannot check. The
 * meter reads the provider's bytes.
 */
export class CompressedKeyMask {
  private held: Buffer[] = [];
  private heldBytes = 0;

  constructor(
    private readonly key: Buffer,
    private readonly contentEncoding: string,
    private readonly meter: UsageMeter | DecompressingMeter | null,
  ) {}

  pass(chunk: Buffer): null {
    this.meter?.push(chunk);
    this.heldBytes += chunk.length;
    if (this.heldBytes <= maxCompressedErrorBytes) this.held.push(chunk);
    else this.held = [];
    return null;
  }

  /**
   * The body decoded and masked, once zlib (on libuv's thread pool, off the event loop) has decoded
   * it; null for nothing to forward. Never rejects.
   */
  async end(): Promise<Buffer | null> {
    if (this.heldBytes > maxCompressedErrorBytes || this.heldBytes === 0) return null;
    const held = Buffer.concat(this.held);
    this.held = [];
    let body: Buffer;
    try {
      body = await decodeContent(held, this.contentEncoding, maxDecodedErrorBytes);
    } catch {
      return null;
    }
    // In slices, as the provider's chunks would come: the search for an escaped key reads each
    // into a copy and an offset a byte, which for the whole of an 8 MiB body would take 40 MiB.
    const mask = new ReflectedKeyMask(this.key, null);
    const parts: Buffer[] = [];
    for (let at = 0; at < body.length; at += maskedSliceBytes) {
      const part = mask.pass(body.subarray(at, at + maskedSliceBytes));
      if (part) parts.push(part);
    }
    const rest = mask.end();
    if (rest) parts.push(rest);
    return parts.length === 0 ? null : Buffer.concat(parts);
  }
}

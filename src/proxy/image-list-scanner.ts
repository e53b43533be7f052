import type { UsageMeter } from "./usage-meter.js";

/**
 * What an image generation's JSON answer says, read while it streams through: how many entries of
 * its top-level image list (provider A `data`, provider C `predictions`) hold an image, and the
 * top-level `size` and `quality` strings (provider A's gpt-image models name the ones they used).
 */
export interface ImageListReading {
  /** Entries of the list that hold an image member (one of the call's `imageKeys`). */
  images: number;
  /** The top-level object ended: `images` is the whole answer's, not a cut one's. */
  complete: boolean;
  size: string | null;
  quality: string | null;
}

const quote = 0x22;
const backslash = 0x5c;
/** Longest key or captured value kept; a longer one matches nothing. */
const captureCap = 64;

/**
 * A byte walker for an answer of several megabytes of base64 that keeps nothing of it and parses
 * nothing: strings are jumped from quote to quote with a native search (base64 holds no quote), so
 * only the few structural bytes are looked at in JavaScript. It follows the nesting depth across
 * chunk boundaries; only the keys of the top-level object (depth 1) and of the list's entries
 * (depth 3) are compared, and only the `size` and `quality` values are kept. Key names are compared
 * as sent: a provider does not escape its own member names.
 */
export class ImageListScanner {
  private depth = 0;
  private inString = false;
  /** Inside a string: the next byte is escaped (a backslash ended the previous chunk). */
  private escaped = false;
  /** At depth 1 or in a list entry (depth 3): the next string is a key. */
  private expectKey = false;
  /** What the string being read is: a key of depth 1 or 3, a kept value, or nothing to keep. */
  private role: "key1" | "key3" | "value" | null = null;
  private captured = "";
  private member: string | null = null;
  private inList = false;
  /** The list entry being read is an object (whose keys are compared). */
  private entryIsObject = false;
  private entryHasImage = false;
  /** The answer is no JSON object: nothing more is read. */
  private stopped = false;
  private readonly reading: ImageListReading = { images: 0, complete: false, size: null, quality: null };

  constructor(
    private readonly list: string,
    private readonly imageKeys: readonly string[],
  ) {}

  push(chunk: Buffer): void {
    let index = 0;
    while (index < chunk.length && !this.stopped && !this.reading.complete) {
      if (this.inString) index = this.inStringFrom(chunk, index);
      else index = this.structure(chunk, index);
    }
  }

  result(): ImageListReading {
    return { ...this.reading };
  }

  /** Reads string bytes from `from`; returns the offset after the closing quote, or the chunk's end. */
  private inStringFrom(chunk: Buffer, from: number): number {
    let start = from;
    if (this.escaped) {
      this.escaped = false;
      this.capture(chunk, start, start + 1);
      start++;
    }
    for (let at = chunk.indexOf(quote, start); at >= 0; at = chunk.indexOf(quote, at + 1)) {
      // A backslash run that starts before `start` was dealt with: `start` is not escaped.
      let backslashes = 0;
      while (at - 1 - backslashes >= start && chunk[at - 1 - backslashes] === backslash) backslashes++;
      if (backslashes % 2 === 0) {
        this.capture(chunk, start, at);
        this.endString();
        return at + 1;
      }
    }
    let trailing = 0;
    while (chunk.length - 1 - trailing >= start && chunk[chunk.length - 1 - trailing] === backslash)
      trailing++;
    this.escaped = trailing % 2 === 1;
    this.capture(chunk, start, chunk.length);
    return chunk.length;
  }

  private capture(chunk: Buffer, from: number, to: number): void {
    if (this.role === null || from >= to || this.captured.length > captureCap) return;
    this.captured += chunk.toString("latin1", from, Math.min(to, from + captureCap + 1));
  }

  private endString(): void {
    this.inString = false;
    const text = this.captured.length > captureCap ? null : this.captured;
    if (this.role === "key1") this.member = text;
    else if (this.role === "key3" && text !== null && !this.entryHasImage && this.imageKeys.includes(text)) {
      this.entryHasImage = true;
      this.reading.images++;
    } else if (this.role === "value" && text !== null) {
      if (this.member === "size") this.reading.size = text;
      else this.reading.quality = text;
    }
    this.role = null;
  }

  /** Reads structure from `from` up to the next string's first byte, or the chunk's end. */
  private structure(chunk: Buffer, from: number): number {
    for (let index = from; index < chunk.length; index++) {
      const byte = chunk[index] as number;
      if (byte === quote) {
        this.startString();
        return index + 1;
      }
      if (byte === 0x7b /* { */ || byte === 0x5b /* [ */) this.open(byte);
      else if (byte === 0x7d /* } */ || byte === 0x5d /* ] */) this.close();
      else if (byte === 0x3a /* : */) this.expectKey = false;
      else if (byte === 0x2c /* , */)
        this.expectKey = this.depth === 1 || (this.depth === 3 && this.inList && this.entryIsObject);
      else if (this.depth === 0 && byte !== 0x20 && byte !== 0x0a && byte !== 0x0d && byte !== 0x09)
        this.stopped = true; // a top level that is no object
      if (this.stopped || this.reading.complete) return chunk.length;
    }
    return chunk.length;
  }

  private startString(): void {
    this.inString = true;
    this.captured = "";
    if (this.depth === 0) this.stopped = true;
    else if (this.depth === 1 && this.expectKey) this.role = "key1";
    else if (this.depth === 3 && this.inList && this.expectKey) this.role = "key3";
    else if (this.depth === 1 && (this.member === "size" || this.member === "quality")) this.role = "value";
    else this.role = null;
  }

  private open(byte: number): void {
    this.depth++;
    if (this.depth === 1) {
      if (byte !== 0x7b) this.stopped = true;
      this.expectKey = true;
    } else if (this.depth === 2 && byte === 0x5b && this.member === this.list) {
      this.inList = true;
    } else if (this.depth === 3 && this.inList) {
      this.entryHasImage = false;
      this.entryIsObject = byte === 0x7b;
      this.expectKey = this.entryIsObject;
    }
  }

  private close(): void {
    if (this.depth === 0) {
      this.stopped = true; // a top level that is no object
      return;
    }
    this.depth--;
    if (this.depth === 0) this.reading.complete = true;
    else if (this.depth === 1) this.inList = false;
    // After a value: a `,` or the end follows, not a key.
    if (this.depth === 1 || this.depth === 3) this.expectKey = false;
  }
}

/**
 * The meter of an image generation's answer: the usage meter's reading (the answer's tokens) and
 * the scanner's, from the same chunks. Only image calls are metered through it.
 */
export function withImageList(
  meter: UsageMeter,
  scanner: { push(chunk: Buffer): void; end?(): void; result(): ImageListReading },
): UsageMeter {
  return {
    push(chunk) {
      meter.push(chunk);
      scanner.push(chunk);
    },
    end() {
      meter.end();
      scanner.end?.();
    },
    finish: () => ({ ...meter.finish(), images: scanner.result() }),
  };
}

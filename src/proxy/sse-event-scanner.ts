import { ByteEnds } from "./byte-ends.js";
import { compactParts } from "./compact-parts.js";
import type { SseEventTap } from "./usage-meter.js";

/** How much of an event over the cap is kept: enough to read a model at its start, usage at its end. */
const cutHeadBytes = 4096;
const cutTailBytes = 64 * 1024;

/**
 * An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"): fed raw
 * chunks in arrival order, it calls `onEvent` for each dispatched event. Chunks may split anywhere,
 * even inside a UTF-8 character or between CR and LF. It holds only the current partial line and
 * event, so a stream is never buffered: an event larger than `maxEventBytes` (its data so far, and
 * the line being read with all its bytes, whatever its field, however it is chunked) is cut, i.e. only the
 * first 4 KiB and the last 64 KiB of its data are kept (in fixed buffers), and `onEvent` gets those
 * as `data` (decoded) and `cutTail` (raw bytes, possibly starting inside a character). A line that
 * alone is over the cap is never held whole: a data line streams through those buffers, any
 * other line is dropped.
 *
 * Lines are found with `indexOf` (memchr) and read where they lie in the chunk: only a line split
 * across chunks is copied, and only `data` values are decoded.
 *
 * `onEventEnd`, when given, hears every blank line (each ends an event, dispatched or not), after
 * `onEvent` for it: `at` is the index of the blank line's CR or LF in the chunk being pushed (a blank
 * line never spans chunks). A CR there may be followed by an LF, in this chunk or at the next one's
 * start. This is what a caller that forwards the stream needs to find events in the bytes.
 */
export class SseEventScanner {
  /** The start of a line split across chunks. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  /**
   * The event's data values: the first, and any after it. Nearly every event has one data line;
   * an array per event cost an allocation and its growth on every event (docs/decisions/0005).
   */
  private firstData: string | undefined;
  private moreData: string[] | null = null;
  /** The bytes of the data values so far. */
  private dataBytes = 0;
  private eventName: string | undefined;
  private afterCarriageReturn = false;
  /** Set once the current event went over the cap: the first and last bytes of its data. */
  private cut: ByteEnds | null = null;
  private cutDataLines = 0;
  /** A line over the cap alone: the rest of it streams into `cut` (data) or is dropped (other). */
  private longLine: "data" | "other" | null = null;
  /** The bytes of a leading byte order mark matched so far; -1 once the stream's start is past. */
  private markBytes = 0;

  constructor(
    private readonly onEvent: (event: string | undefined, data: string, cutTail?: Buffer) => void,
    private readonly maxEventBytes = 1024 * 1024,
    private readonly onEventEnd?: (at: number) => void,
  ) {}

  push(chunk: Buffer): void {
    // (An empty chunk between a CR and its LF would end the CR's wait for it: the LF, a second line end.)
    if (chunk.length === 0) return;
    let start = this.markBytes < 0 ? 0 : this.skipByteOrderMark(chunk);
    // The LF of a CRLF split across chunks ends no second line.
    if (this.afterCarriageReturn && chunk[0] === 0x0a) start = 1;
    this.afterCarriageReturn = false;
    // The next CR and the next LF, each searched for again only once passed: a search from every
    // line to the chunk's end (for an LF in a chunk of CR-ended lines) read the chunk once per line.
    let carriageReturn = chunk.indexOf(0x0d, start);
    let lineFeed = chunk.indexOf(0x0a, start);
    while (start < chunk.length) {
      if (carriageReturn >= 0 && carriageReturn < start) carriageReturn = chunk.indexOf(0x0d, start);
      if (lineFeed >= 0 && lineFeed < start) lineFeed = chunk.indexOf(0x0a, start);
      const end =
        carriageReturn >= 0 && (lineFeed < 0 || carriageReturn < lineFeed) ? carriageReturn : lineFeed;
      if (end < 0) {
        this.keepPartial(chunk.subarray(start));
        return;
      }
      if (this.partialBytes > 0) {
        this.keepPartial(chunk.subarray(start, end));
        if (this.longLine === null) {
          const line = this.partial.length === 1 ? (this.partial[0] as Buffer) : Buffer.concat(this.partial);
          this.partial = [];
          this.partialBytes = 0;
          this.takeLine(line, 0, line.length);
        } else {
          this.longLine = null;
          this.partialBytes = 0;
        }
      } else this.takeLine(chunk, start, end);
      start = end + 1;
      if (chunk[end] === 0x0d) {
        if (start === chunk.length) this.afterCarriageReturn = true;
        else if (chunk[start] === 0x0a) start++;
      }
    }
  }

  /**
   * The stream ended: an unterminated event is not dispatched (WHATWG). With `dispatchLast` it is,
   * as a client that reads it does at a clean end (openai's SSEDecoder): its last line, if the
   * stream ended inside it, is a line, and the event is dispatched as a blank line would dispatch it
   * (`onEventEnd` is not called: no blank line came). Only work at the end: nothing per chunk.
   */
  end(dispatchLast = false): void {
    if (dispatchLast) {
      // A line over the cap alone (`longLine`) is in `cut` already, or was dropped.
      if (this.longLine === null && this.partialBytes > 0) {
        const line = this.partial.length === 1 ? (this.partial[0] as Buffer) : Buffer.concat(this.partial);
        this.partial = [];
        this.partialBytes = 0;
        this.takeLine(line, 0, line.length);
      }
      this.dispatch();
    }
    this.partial = [];
    this.partialBytes = 0;
    this.longLine = null;
    this.resetEvent();
  }

  /**
   * Where the stream's first chunks start once one leading byte order mark is skipped (WHATWG: "one
   * leading U+FEFF BYTE ORDER MARK character must be ignored"; a .NET server's UTF-8 writer sends
   * one): else the first line's field name would be `\uFEFFdata` and its event lost. Bytes that
   * only began like a mark are the first line's.
   */
  private skipByteOrderMark(chunk: Buffer): number {
    const before = this.markBytes;
    let matched = before;
    let at = 0;
    while (matched < byteOrderMark.length && at < chunk.length && chunk[at] === byteOrderMark[matched]) {
      matched++;
      at++;
    }
    if (matched < byteOrderMark.length && at === chunk.length) {
      this.markBytes = matched; // all of it may still be the mark's start
      return at;
    }
    this.markBytes = -1;
    if (matched === byteOrderMark.length) return at;
    if (before > 0) this.keepPartial(byteOrderMark.subarray(0, before));
    return 0;
  }

  private keepPartial(part: Buffer): void {
    if (part.length === 0) return;
    this.partialBytes += part.length;
    // (During a long line the count stays over the cap, so its parts go to overCap too.)
    if (this.partialBytes + this.dataBytes > this.maxEventBytes) {
      this.overCap(part);
      return;
    }
    this.holdPart(part);
  }

  /** Copied: a view would keep alive the whole socket read it points into. */
  private holdPart(part: Buffer): void {
    const copy = Buffer.from(part);
    this.partial.push(copy);
    compactParts(this.partial, copy);
  }

  /**
   * The line in progress took the event over the cap: the event is cut (its data so far moves to
   * the fixed buffers). If the line alone is over the cap it is not held either: a data line
   * streams into the cut event from here on, any other line is dropped.
   */
  private overCap(part: Buffer): void {
    if (this.longLine !== null) {
      if (this.longLine === "data") this.cut?.push(part);
      return;
    }
    this.holdPart(part);
    if (this.cut === null) this.cutEvent();
    if (this.partialBytes <= this.maxEventBytes) return;
    const line = Buffer.concat(this.partial, this.partialBytes);
    this.partial = [];
    if (line[0] === 0x64 /* d */ && hasField(line, 0, line.length, dataField)) {
      this.longLine = "data";
      this.keepCutLine(line.subarray(valueStart(line, 4, line.length)));
    } else this.longLine = "other";
  }

  private cutEvent(): void {
    this.cut = new ByteEnds(cutHeadBytes, cutTailBytes);
    this.cutDataLines = this.dataLines();
    // (Rare: only when several data lines or a split one pass the cap; at most the cap is encoded.)
    const data = this.joinedData();
    if (data !== undefined) this.cut.push(Buffer.from(data));
    this.firstData = undefined;
    this.moreData = null;
    this.dataBytes = 0;
  }

  /** One more data value of a cut event; values are joined with LF, as in the event's data. */
  private keepCutLine(value: Buffer): void {
    if (this.cut === null) this.cutEvent();
    const cut = this.cut as ByteEnds;
    if (this.cutDataLines++ > 0) cut.push(lineFeedByte);
    cut.push(value);
  }

  /** One complete line, `line[start..end)` without its line end. */
  private takeLine(line: Buffer, start: number, end: number): void {
    if (start === end) {
      this.dispatch();
      this.onEventEnd?.(end);
      return;
    }
    // The line counts against the cap with all its bytes, whatever its field, as it does when it
    // comes in pieces (keepPartial): an event is cut, or kept whole, whatever the chunks it came in.
    if (this.cut === null && end - start + this.dataBytes > this.maxEventBytes) this.cutEvent();
    // Field name: up to the first colon (a line starting with one is a comment).
    const first = line[start];
    if (first === 0x64 /* d */ && hasField(line, start, end, dataField)) {
      const from = valueStart(line, start + 4, end);
      if (this.cut === null) {
        // Each line after the first counts the LF that joins it, as the joined data holds it: an
        // empty `data:` line is not free, so a stream of them that never ends its event is cut like
        // any event past the cap.
        const bytes = end - from + (this.firstData !== undefined ? 1 : 0);
        const value = line.toString("utf8", from, end);
        if (this.firstData === undefined) this.firstData = value;
        else if (this.moreData === null) this.moreData = [value];
        else this.moreData.push(value);
        this.dataBytes += bytes;
      } else this.keepCutLine(line.subarray(from, end));
    } else if (
      first === 0x65 /* e */ &&
      hasField(line, start, end, eventField) &&
      end - start <= this.maxEventBytes
    ) {
      this.eventName = line.toString("utf8", valueStart(line, start + 5, end), end);
    }
  }

  private dispatch(): void {
    if (this.cut !== null) this.dispatchCut(this.cut);
    else {
      const data = this.joinedData();
      if (data !== undefined) this.onEvent(this.eventName, data);
    }
    this.resetEvent();
  }

  private dataLines(): number {
    return this.firstData === undefined ? 0 : 1 + (this.moreData?.length ?? 0);
  }

  /** The data values joined with LF, as the event's data is; undefined when it has none. */
  private joinedData(): string | undefined {
    if (this.firstData === undefined || this.moreData === null) return this.firstData;
    return `${this.firstData}\n${this.moreData.join("\n")}`;
  }

  private dispatchCut(cut: ByteEnds): void {
    if (this.cutDataLines > 0) this.onEvent(this.eventName, cut.head().toString("utf8"), cut.tail());
  }

  private resetEvent(): void {
    this.firstData = undefined;
    this.moreData = null;
    this.dataBytes = 0;
    this.eventName = undefined;
    this.cut = null;
  }
}

const byteOrderMark = Buffer.from([0xef, 0xbb, 0xbf]);
const dataField = Buffer.from("data");
const eventField = Buffer.from("event");
const lineFeedByte = Buffer.from("\n");

/** Whether the line's field name is exactly `name`: the name, then a colon or the line's end. */
function hasField(line: Buffer, start: number, end: number, name: Buffer): boolean {
  const after = start + name.length;
  if (after > end || (after < end && line[after] !== 0x3a)) return false;
  for (let index = 0; index < name.length; index++) if (line[start + index] !== name[index]) return false;
  return true;
}

/** Where the value starts: after the colon and one optional space. */
function valueStart(line: Buffer, afterName: number, end: number): number {
  if (afterName === end) return end;
  const value = afterName + 1;
  return value < end && line[value] === 0x20 ? value + 1 : value;
}

/**
 * The scanner of a metered stream: `onEvent` reads each event. With a tap, the tap hears each event
 * after it, and whether it was a whole event that gave a new reading (`reading()` changed).
 */
export function meteredEventScanner(
  onEvent: (event: string | undefined, data: string, cutTail?: Buffer) => void,
  reading: () => unknown,
  tap: SseEventTap | undefined,
): SseEventScanner {
  if (tap === undefined) return new SseEventScanner(onEvent);
  return new SseEventScanner(
    (event, data, cutTail) => {
      const before = reading();
      onEvent(event, data, cutTail);
      tap.onEvent(data, cutTail === undefined && reading() !== before);
    },
    undefined,
    (at) => tap.onEventEnd(at),
  );
}

/**
 * What is left of an event over the cap: its name, the first bytes of its data (decoded) and the
 * last bytes (raw, possibly starting inside a character).
 */
export type CutEventHandler = (event: string | undefined, head: string, tail: Buffer) => void;

/** How much of an event over the cap is kept: enough to read a model at its start, usage at its end. */
const cutHeadBytes = 4096;
const cutTailBytes = 64 * 1024;

// The rest of a line that went over the cap alone: streamed into the cut event's data, or dropped.
const notLong = 0;
const longData = 1;
const longOther = 2;

/**
 * An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"): fed raw
 * chunks in arrival order, it calls `onEvent` for each dispatched event. Chunks may split anywhere,
 * even inside a UTF-8 character or between CR and LF. It holds only the current partial line and
 * event, so a stream is never buffered: once an event passes `maxEventBytes`, only the first 4 KiB
 * and the last 64 KiB of its data are kept (fixed buffers) and it goes to `onCutEvent` instead
 * (dropped without one). A single line over the cap is not kept at all: a data line streams
 * through those buffers, any other line is dropped.
 *
 * Lines are found with `indexOf` (memchr) and read where they lie in the chunk: only a line split
 * across chunks is copied, and only `data` values are decoded.
 */
export class SseEventScanner {
  /** The start of a line split across chunks. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  private data: string[] = [];
  /** The bytes of the data values so far. */
  private dataBytes = 0;
  private eventName: string | undefined;
  private afterCarriageReturn = false;
  /** Set once the current event went over the cap: the first and last bytes of its data. */
  private cut: ByteEnds | null = null;
  private cutDataLines = 0;
  private longLine = notLong;

  constructor(
    private readonly onEvent: (event: string | undefined, data: string) => void,
    private readonly onCutEvent: CutEventHandler | null = null,
    private readonly maxEventBytes = 1024 * 1024,
  ) {}

  push(chunk: Buffer): void {
    let start = 0;
    // The LF of a CRLF split across chunks ends no second line.
    if (this.afterCarriageReturn && chunk[0] === 0x0a) start = 1;
    this.afterCarriageReturn = false;
    let carriageReturn = chunk.indexOf(0x0d, start);
    while (start < chunk.length) {
      if (carriageReturn >= 0 && carriageReturn < start) carriageReturn = chunk.indexOf(0x0d, start);
      const lineFeed = chunk.indexOf(0x0a, start);
      const end =
        carriageReturn >= 0 && (lineFeed < 0 || carriageReturn < lineFeed) ? carriageReturn : lineFeed;
      if (end < 0) {
        this.keepPartial(chunk.subarray(start));
        return;
      }
      if (this.partialBytes > 0 || this.longLine !== notLong) this.endPartial(chunk.subarray(start, end));
      else this.takeLine(chunk, start, end);
      start = end + 1;
      if (chunk[end] === 0x0d) {
        if (start === chunk.length) this.afterCarriageReturn = true;
        else if (chunk[start] === 0x0a) start++;
      }
    }
  }

  /** The stream ended: an unterminated event is not dispatched (WHATWG). */
  end(): void {
    this.partial = [];
    this.partialBytes = 0;
    this.longLine = notLong;
    this.resetEvent();
  }

  private keepPartial(part: Buffer): void {
    if (part.length === 0) return;
    if (this.longLine !== notLong) {
      if (this.longLine === longData) this.cut?.push(part);
      return;
    }
    // Copied: a view would keep alive the whole socket read it points into.
    this.partial.push(Buffer.from(part));
    this.partialBytes += part.length;
    if (this.partialBytes + this.dataBytes > this.maxEventBytes) this.overCap();
  }

  /** The last part of a line split across chunks (or of a long line) has come. */
  private endPartial(rest: Buffer): void {
    this.keepPartial(rest);
    if (this.longLine !== notLong) {
      this.longLine = notLong;
      return;
    }
    const line = this.partial.length === 1 ? (this.partial[0] as Buffer) : Buffer.concat(this.partial);
    this.partial = [];
    this.partialBytes = 0;
    this.takeLine(line, 0, line.length);
  }

  /**
   * The line in progress took the event over the cap: the event is cut (its data so far moves to
   * the fixed buffers). If the line alone is over the cap it is not kept either: a data line
   * streams into the cut event from here on, any other line is dropped.
   */
  private overCap(): void {
    if (this.cut === null) this.cutEvent();
    if (this.partialBytes <= this.maxEventBytes) return;
    const line = Buffer.concat(this.partial, this.partialBytes);
    this.partial = [];
    this.partialBytes = 0;
    if (line[0] === 0x64 /* d */ && hasField(line, 0, line.length, dataField)) {
      this.longLine = longData;
      this.keepCutLine(line.subarray(valueStart(line, 4, line.length)));
    } else this.longLine = longOther;
  }

  private cutEvent(): void {
    this.cut = new ByteEnds(cutHeadBytes, cutTailBytes);
    this.cutDataLines = this.data.length;
    // (Over the cap only by a split line or many data lines: rare, and at most the cap is encoded.)
    if (this.data.length > 0) this.cut.push(Buffer.from(this.data.join("\n")));
    this.data = [];
    this.dataBytes = 0;
  }

  /** One more data value of a cut event; lines are joined with LF, as in the event's data. */
  private keepCutLine(value: Buffer): void {
    const cut = this.cut as ByteEnds;
    if (this.cutDataLines++ > 0) cut.push(lineFeed);
    cut.push(value);
  }

  /** One complete line, `line[start..end)` without its line end. */
  private takeLine(line: Buffer, start: number, end: number): void {
    if (start === end) {
      this.dispatch();
      return;
    }
    // Field name: up to the first colon (a line starting with one is a comment).
    const first = line[start];
    if (first === 0x64 /* d */ && hasField(line, start, end, dataField)) {
      const from = valueStart(line, start + 4, end);
      if (this.cut === null && end - from + this.dataBytes > this.maxEventBytes) this.cutEvent();
      if (this.cut !== null) this.keepCutLine(line.subarray(from, end));
      else {
        this.data.push(line.toString("utf8", from, end));
        this.dataBytes += end - from;
      }
    } else if (first === 0x65 /* e */ && hasField(line, start, end, eventField)) {
      if (end - start <= this.maxEventBytes)
        this.eventName = line.toString("utf8", valueStart(line, start + 5, end), end);
    }
  }

  private dispatch(): void {
    if (this.cut !== null) {
      if (this.cutDataLines > 0)
        this.onCutEvent?.(this.eventName, this.cut.head().toString("utf8"), this.cut.tail());
    } else if (this.data.length > 0)
      this.onEvent(this.eventName, this.data.length === 1 ? (this.data[0] as string) : this.data.join("\n"));
    this.resetEvent();
  }

  private resetEvent(): void {
    this.data = [];
    this.dataBytes = 0;
    this.eventName = undefined;
    this.cut = null;
    this.cutDataLines = 0;
  }
}

/**
 * The first and the last bytes of a byte stream too long to keep whole, copied into two buffers of
 * fixed size (the tail a ring): memory stays the same however much passes through, and no pushed
 * chunk is referenced afterwards.
 */
export class ByteEnds {
  private readonly first: Buffer;
  private firstLength = 0;
  private readonly ring: Buffer;
  /** Bytes that went through the ring. */
  private ringTotal = 0;

  constructor(headBytes: number, tailBytes: number) {
    this.first = Buffer.allocUnsafe(headBytes);
    this.ring = Buffer.allocUnsafe(tailBytes);
  }

  push(bytes: Buffer): void {
    this.pushHead(bytes);
    this.pushTail(bytes);
  }

  /** Bytes for the head only: the caller knows they are not among the last ones. */
  pushHead(bytes: Buffer): void {
    if (this.firstLength < this.first.length) this.firstLength += bytes.copy(this.first, this.firstLength);
  }

  private pushTail(bytes: Buffer): void {
    const capacity = this.ring.length;
    // Only the last `capacity` bytes can stay; the ones before would be overwritten at once.
    let from = Math.max(0, bytes.length - capacity);
    this.ringTotal += from;
    while (from < bytes.length) {
      const copied = bytes.copy(this.ring, this.ringTotal % capacity, from);
      from += copied;
      this.ringTotal += copied;
    }
  }

  /** The first bytes (up to `headBytes`). */
  head(): Buffer {
    return this.first.subarray(0, this.firstLength);
  }

  /** The last bytes (up to `tailBytes`), oldest first. */
  tail(): Buffer {
    const capacity = this.ring.length;
    if (this.ringTotal <= capacity) return this.ring.subarray(0, this.ringTotal);
    const at = this.ringTotal % capacity;
    return Buffer.concat([this.ring.subarray(at), this.ring.subarray(0, at)], capacity);
  }
}

const dataField = Buffer.from("data");
const eventField = Buffer.from("event");
const lineFeed = Buffer.from("\n");

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

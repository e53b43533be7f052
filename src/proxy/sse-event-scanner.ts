/**
 * An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"): fed raw
 * chunks in arrival order, it calls `onEvent` for each dispatched event. Chunks may split anywhere,
 * even inside a UTF-8 character or between CR and LF. It holds only the current partial line and
 * event; an event larger than `maxEventBytes` is dropped, so a stream is never buffered.
 *
 * Lines are found with `indexOf` (memchr) and read where they lie in the chunk: only a line split
 * across chunks is copied, and only `data` values are decoded.
 */
export class SseEventScanner {
  /** The start of a line split across chunks. */
  private partial: Buffer[] = [];
  private partialBytes = 0;
  private data: string[] = [];
  private dataBytes = 0;
  private eventName: string | undefined;
  private afterCarriageReturn = false;
  private oversized = false;

  constructor(
    private readonly onEvent: (event: string | undefined, data: string) => void,
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
      if (this.partialBytes > 0) {
        this.keepPartial(chunk.subarray(start, end));
        const line = this.partial.length === 1 ? (this.partial[0] as Buffer) : Buffer.concat(this.partial);
        this.partial = [];
        this.partialBytes = 0;
        // (A line that went over the cap was dropped, and so is its event.)
        if (!this.oversized) this.takeLine(line, 0, line.length);
      } else this.takeLine(chunk, start, end);
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
    this.resetEvent();
  }

  private keepPartial(part: Buffer): void {
    if (part.length === 0) return;
    this.partialBytes += part.length;
    if (this.oversized || this.partialBytes + this.dataBytes > this.maxEventBytes) {
      this.oversized = true;
      this.partial = [];
      // Still counted, so the line's end is not mistaken for an empty line.
      this.partialBytes = 1;
      return;
    }
    // Copied: a view would keep alive the whole socket read it points into.
    this.partial.push(Buffer.from(part));
  }

  /** One complete line, `line[start..end)` without its line end. */
  private takeLine(line: Buffer, start: number, end: number): void {
    if (start === end) {
      this.dispatch();
      return;
    }
    if (this.oversized) return;
    if (end - start + this.dataBytes > this.maxEventBytes) {
      this.oversized = true;
      return;
    }
    // Field name: up to the first colon (a line starting with one is a comment).
    const first = line[start];
    if (first === 0x64 /* d */ && hasField(line, start, end, dataField)) {
      const value = line.toString("utf8", valueStart(line, start + 4, end), end);
      this.data.push(value);
      this.dataBytes += value.length;
    } else if (first === 0x65 /* e */ && hasField(line, start, end, eventField)) {
      this.eventName = line.toString("utf8", valueStart(line, start + 5, end), end);
    }
  }

  private dispatch(): void {
    if (!this.oversized && this.data.length > 0)
      this.onEvent(this.eventName, this.data.length === 1 ? (this.data[0] as string) : this.data.join("\n"));
    this.resetEvent();
  }

  private resetEvent(): void {
    this.data = [];
    this.dataBytes = 0;
    this.eventName = undefined;
    this.oversized = false;
  }
}

const dataField = Buffer.from("data");
const eventField = Buffer.from("event");

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

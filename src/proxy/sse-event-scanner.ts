/**
 * An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"): fed raw
 * chunks in arrival order, it calls `onEvent` for each dispatched event. Chunks may split anywhere,
 * even inside a UTF-8 character or between CR and LF. It holds only the current partial line and
 * event; an event larger than `maxEventBytes` is dropped, so a stream is never buffered.
 */
export class SseEventScanner {
  private line: Buffer[] = [];
  private lineBytes = 0;
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
    for (let index = 0; index < chunk.length; index++) {
      const byte = chunk[index];
      if (byte !== 0x0a && byte !== 0x0d) continue;
      if (byte === 0x0a && this.afterCarriageReturn && index === start && this.lineBytes === 0) {
        // The LF of a CRLF split across chunks (or right after a CR line end).
        this.afterCarriageReturn = false;
        start = index + 1;
        continue;
      }
      this.appendLine(chunk.subarray(start, index));
      this.endLine();
      this.afterCarriageReturn = byte === 0x0d;
      if (byte === 0x0d && chunk[index + 1] === 0x0a) {
        index++;
        this.afterCarriageReturn = false;
      }
      start = index + 1;
    }
    if (start < chunk.length) {
      this.afterCarriageReturn = false;
      this.appendLine(chunk.subarray(start));
    }
  }

  /** The stream ended: an unterminated event is not dispatched (WHATWG). */
  end(): void {
    this.line = [];
    this.lineBytes = 0;
    this.resetEvent();
  }

  private appendLine(part: Buffer): void {
    if (part.length === 0) return;
    this.lineBytes += part.length;
    if (this.lineBytes + this.dataBytes > this.maxEventBytes) {
      this.oversized = true;
      this.line = [];
      return;
    }
    this.line.push(Buffer.from(part));
  }

  private endLine(): void {
    const line = this.line.length === 1 ? (this.line[0] as Buffer) : Buffer.concat(this.line);
    const empty = this.lineBytes === 0;
    this.line = [];
    this.lineBytes = 0;
    if (empty) {
      this.dispatch();
      return;
    }
    if (this.oversized || line[0] === 0x3a) return;
    const text = line.toString("utf8");
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") {
      this.data.push(value);
      this.dataBytes += value.length;
    } else if (field === "event") this.eventName = value;
  }

  private dispatch(): void {
    if (!this.oversized && this.data.length > 0) this.onEvent(this.eventName, this.data.join("\n"));
    this.resetEvent();
  }

  private resetEvent(): void {
    this.data = [];
    this.dataBytes = 0;
    this.eventName = undefined;
    this.oversized = false;
  }
}

import { objectField, usageFromProviderA } from "../providers/usage-from-json.js";
import { compactParts } from "./compact-parts.js";
import type { SseEventTap, UsageMeter } from "./usage-meter.js";

/**
 * The longest event held back to be judged. Provider A's usage chunk is well under 1 KiB; an event
 * that grows past this passes on as it arrives and is forwarded whatever it turns out to be.
 */
const maxHeldBytes = 64 * 1024;
const lineFeed = 0x0a;
const carriageReturn = 0x0d;
/** A cheap first look, so that a stream whose every chunk reports usage is not parsed chunk by chunk. */
const emptyChoices = /"choices"\s*:\s*\[\s*\]/;
const noBytes = Buffer.alloc(0);

/**
 * Hides provider A's usage chunk from a client that did not ask for it. Sluice sets
 * `stream_options.include_usage` on streamed chat completions (stream-usage-option.ts) so it can
 * record their usage; the provider then adds one event the client never asked for, a chunk whose
 * `choices` is empty and whose `usage` is set, just before `data: [DONE]` (clients that read
 * `choices[0]` of every chunk fail on it). The meter still reads that event; this filter drops it
 * from the bytes forwarded, and forwards every other byte unchanged, in order. The event is known
 * exactly: the meter took usage from it, and its JSON is an object whose `choices` is an empty
 * array and whose `usage` is an object.
 *
 * It hears the meter's own scanner (no second SSE parse): each event's data and where each event
 * ends in the chunk. A chunk's complete events are forwarded at once; only the start of an event
 * that has not ended yet is held back (copied) until its end decides it, so the stream still goes
 * on event by event as the provider sends it. An event that grows past `maxHeldBytes` is no
 * longer held and is forwarded whatever it is. Used only when Sluice set the option itself.
 */
export class InjectedUsageFilter implements SseEventTap {
  /** The meter that reads the stream, with this filter hearing its events. */
  readonly meter: UsageMeter;
  /** The chunk being passed. */
  private chunk: Buffer = noBytes;
  /** Where the event in progress starts in `chunk` (at its start, it may have begun earlier: see `held`). */
  private eventStart = 0;
  /** Where the bytes of `chunk` to forward start that are not in `out` yet. */
  private keptFrom = 0;
  /** What to forward of the chunk being passed, in order. */
  private readonly out: Buffer[] = [];
  /** The event in progress as it arrived in earlier chunks (copies), until its end decides it. */
  private held: Buffer[] = [];
  private heldBytes = 0;
  /** The event in progress outgrew `maxHeldBytes`: forwarded as it comes, whatever it is. */
  private passing = false;
  /** The event that has just been dispatched is the usage chunk. */
  private usageEvent = false;
  /**
   * The last event ended with a CR that ended its chunk: an LF that starts the next chunk is the
   * rest of its line end, forwarded or dropped with it. Null when not.
   */
  private lineFeedOf: "kept" | "dropped" | null = null;

  constructor(createMeter: (tap: SseEventTap) => UsageMeter) {
    this.meter = createMeter(this);
  }

  /** Meters `chunk` and returns what of it to forward now; null when nothing is. */
  pass(chunk: Buffer): Buffer | null {
    if (chunk.length === 0) return null;
    this.chunk = chunk;
    this.eventStart = 0;
    this.keptFrom = 0;
    if (this.lineFeedOf !== null) {
      if (chunk[0] === lineFeed) {
        this.eventStart = 1;
        if (this.lineFeedOf === "dropped") this.keptFrom = 1;
      }
      this.lineFeedOf = null;
    }
    this.meter.push(chunk); // calls onEvent and onEventEnd for each event that ends in the chunk
    const eventStart = this.eventStart;
    if (!this.passing && eventStart < chunk.length) {
      const tail = chunk.length - eventStart;
      if (this.heldBytes + tail <= maxHeldBytes) {
        // Copied: a view would keep alive the whole socket read it points into.
        const copy = Buffer.from(chunk.subarray(eventStart));
        this.held.push(copy);
        compactParts(this.held, copy);
        this.heldBytes += tail;
        return this.collect(eventStart);
      }
      // Too long to be the usage chunk: what was held goes first, and the rest as it comes.
      this.passing = true;
      this.releaseHeld();
    }
    return this.collect(chunk.length);
  }

  /**
   * At the stream's clean end, after the meter's `end` (which may dispatch the unterminated last
   * event to `onEvent`, as the openai SDK does): that event as the provider sent it, or null when
   * there is none or it is the usage chunk, which is dropped as any other one is.
   */
  end(): Buffer | null {
    if (this.usageEvent) {
      this.usageEvent = false;
      this.held = [];
      this.heldBytes = 0;
      return null;
    }
    if (this.heldBytes === 0) return null;
    const rest = Buffer.concat(this.held, this.heldBytes);
    this.held = [];
    this.heldBytes = 0;
    return rest;
  }

  onEvent(data: string, usageRead: boolean): void {
    // Only an event the meter took usage from can be the one: the others cost nothing more here.
    if (usageRead && !this.passing) this.usageEvent = isUsageChunk(data);
  }

  onEventEnd(at: number): void {
    const chunk = this.chunk;
    let end = at + 1;
    const carriage = chunk[at] === carriageReturn;
    // Only a CR that ends the chunk may have its LF at the next one's start (an LF after a CRLF
    // that ends the chunk is a blank line of its own).
    const lineFeedOwed = carriage && end === chunk.length;
    if (carriage && end < chunk.length && chunk[end] === lineFeed) end++;
    if (this.usageEvent) {
      // Dropped: what came before it goes, then nothing of it, held or here.
      if (this.keptFrom < this.eventStart) this.out.push(this.chunk.subarray(this.keptFrom, this.eventStart));
      this.keptFrom = end;
      this.held = [];
      this.heldBytes = 0;
      this.usageEvent = false;
      if (lineFeedOwed) this.lineFeedOf = "dropped";
    } else {
      this.releaseHeld(); // an event begun in an earlier chunk is kept: its start goes first
      if (lineFeedOwed) this.lineFeedOf = "kept";
    }
    this.eventStart = end;
    this.passing = false;
  }

  /** Forwards the held start of the event in progress (nothing of this chunk is in `out` before it). */
  private releaseHeld(): void {
    if (this.heldBytes === 0) return;
    for (const part of this.held) this.out.push(part);
    this.held = [];
    this.heldBytes = 0;
  }

  /** What to forward of the chunk: `out`, then its bytes from `keptFrom` up to `until`. */
  private collect(until: number): Buffer | null {
    const chunk = this.chunk;
    this.chunk = noBytes;
    const out = this.out;
    if (out.length === 0) {
      if (this.keptFrom === 0 && until === chunk.length) return chunk; // the usual case: all of it
      return this.keptFrom < until ? chunk.subarray(this.keptFrom, until) : null;
    }
    if (this.keptFrom < until) out.push(chunk.subarray(this.keptFrom, until));
    const bytes = out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out);
    out.length = 0;
    return bytes;
  }
}

/** Provider A's usage chunk: a chunk object whose `choices` is empty and whose `usage` is an object. */
function isUsageChunk(data: string): boolean {
  if (!emptyChoices.test(data)) return false;
  try {
    const chunk: unknown = JSON.parse(data);
    const choices = objectField(chunk, "choices");
    return (
      Array.isArray(choices) &&
      choices.length === 0 &&
      usageFromProviderA(objectField(chunk, "usage")) !== null
    );
  } catch {
    return false;
  }
}

import {
  type BrotliDecompress,
  createBrotliDecompress,
  createGunzip,
  createInflate,
  createInflateRaw,
  type Gunzip,
  type Inflate,
  type InflateRaw,
} from "node:zlib";
import { contentCodings, type ZlibFormat } from "./content-coding.js";
import type { MeterReading, UsageMeter } from "./usage-meter.js";

/**
 * The most decompressed bytes read of one response: a body that inflates beyond it (a zip bomb, say)
 * is read up to there, as a cut stream is. It bounds the decompressor's work on libuv's thread pool
 * and the meter's on the event loop; memory is bounded by the meter itself.
 */
export const maxDecompressedBytes = 64 * 1024 * 1024;

/**
 * The most compressed bytes one response's decompressor may have waiting before its meter says it
 * is full (the exchange then pauses the provider until it has caught up): a provider that sends
 * faster than libuv's thread pool decodes would otherwise have Sluice queue its whole body, up to
 * the 64 MiB it may decode to, and more for one that does not decode to much.
 */
const maxQueuedBytes = 1024 * 1024;

/** A usage meter behind a decompressor: it knows what it saw only once the decompressor has caught up. */
export interface DecompressingMeter {
  /** Every response chunk as the provider sent it (compressed), in order. Always taken. */
  push(chunk: Buffer): void;
  /**
   * More than `maxQueuedBytes` wait for the decompressor: the caller should send no more (pause
   * the provider) until `whenRoom` calls back. Never true once nothing more is read.
   */
  readonly full: boolean;
  /** Calls `resume` once the decompressor has caught up (or stopped reading). Only when `full`. */
  whenRoom(resume: () => void): void;
  /**
   * The answer ended cleanly: the meter's `end` follows at finish, once the decompressor has caught
   * up, if it decoded the body to its end (not after a corrupt or truncated body, or the cap).
   */
  end(): void;
  /** What was seen: at the end, or after a cut stream, a corrupt body or the cap. Never rejects. */
  finish(): Promise<MeterReading>;
}

type Decoder = Gunzip | Inflate | InflateRaw | BrotliDecompress;

/** Chunks smaller than this are written to the decoder together, up to this many bytes at once. */
const batchBytes = 16 * 1024;

/**
 * The meter for a response whose `content-encoding` is not empty: Sluice asks for `identity`, and a
 * provider (or a compatible server) that answers gzip, deflate or br anyway is read through a
 * streaming decompressor fed a copy of each chunk, while the client gets the provider's bytes. The
 * meter's own bounds apply to the decompressed bytes, and at most `maxBytes` of them are read.
 * `identity` is the meter itself; a coding it cannot undo (several, or an unknown one) is no meter.
 */
export function decompressingMeter(
  meter: UsageMeter,
  contentEncoding: string,
  maxBytes = maxDecompressedBytes,
  maxQueued = maxQueuedBytes,
): UsageMeter | DecompressingMeter | null {
  const coding = contentEncoding.trim().toLowerCase();
  if (coding === "identity") return meter;
  const format = contentCodings.get(coding);
  return format
    ? new DecoderTap(meter, (first) => streamDecoders[format(first)](), maxBytes, maxQueued)
    : null;
}

/** Whether a meter is one behind a decompressor (its queue may fill: see `full`). */
export function isDecompressing(meter: UsageMeter | DecompressingMeter | null): meter is DecompressingMeter {
  return meter instanceof DecoderTap;
}

const streamDecoders: Record<ZlibFormat, () => Decoder> = {
  gzip: () => createGunzip(),
  deflate: () => createInflate(),
  "deflate-raw": () => createInflateRaw(),
  br: () => createBrotliDecompress(),
};

class DecoderTap implements DecompressingMeter {
  private decoder: Decoder | null = null;
  private decoded = 0;
  /** Small chunks not yet written to the decoder (copies), `batched` bytes of it. */
  private batch: Buffer | null = null;
  private batched = 0;
  /** Nothing more is read: the decoder failed, reached the cap, or ended. */
  private stopped = false;
  /** The caller waiting for the decompressor to catch up (whenRoom). */
  private waiting: (() => void) | null = null;
  /** The decoder ended: it decoded the whole body (no error, not cut at the cap). */
  private decodedAll = false;
  /** The answer ended cleanly (`end`). */
  private ended = false;
  private settle: () => void = () => {};
  private readonly settled = new Promise<void>((resolve) => {
    this.settle = resolve;
  });

  constructor(
    private readonly meter: UsageMeter,
    private readonly create: (first: Buffer) => Decoder,
    private readonly maxBytes: number,
    private readonly maxQueued: number,
  ) {}

  get full(): boolean {
    // The decoder's writable length counts the bytes written to it that it has not finished with.
    return (
      !this.stopped && this.decoder !== null && this.decoder.writableLength + this.batched > this.maxQueued
    );
  }

  whenRoom(resume: () => void): void {
    if (!this.full) {
      resume();
      return;
    }
    this.waiting = resume;
    // Full means a write found the decoder past its high-water mark: it emits `drain` once empty.
    this.decoder?.once("drain", this.roomMade);
  }

  private readonly roomMade = () => {
    const resume = this.waiting;
    this.waiting = null;
    this.decoder?.off("drain", this.roomMade);
    resume?.();
  };

  push(chunk: Buffer): void {
    if (this.stopped || chunk.length === 0) return;
    this.decoder ??= this.start(chunk);
    const decoder = this.decoder;
    // Copies: the decoder reads them later, on libuv's thread pool, and the chunk is the client's.
    if (chunk.length >= batchBytes) {
      this.flush(decoder);
      decoder.write(Buffer.from(chunk));
      return;
    }
    // Each write is a trip to the thread pool: small chunks go together, or a body sent a byte per
    // HTTP chunk would queue one write (and ~100 bytes) per byte and take seconds to decode.
    if (this.batch !== null && this.batched + chunk.length > batchBytes) this.flush(decoder);
    this.batch ??= Buffer.allocUnsafe(batchBytes);
    this.batched += chunk.copy(this.batch, this.batched);
  }

  end(): void {
    this.ended = true;
  }

  async finish(): Promise<MeterReading> {
    if (this.decoder !== null && !this.stopped) {
      this.flush(this.decoder);
      // A cut or truncated body ends with a decoder error, after the bytes it could decode.
      this.decoder.end();
      await this.settled;
    }
    if (this.ended && (this.decoder === null || this.decodedAll)) this.meter.end();
    return this.meter.finish();
  }

  /** Writes the small chunks batched so far. */
  private flush(decoder: Decoder): void {
    if (this.batch === null) return;
    decoder.write(this.batch.subarray(0, this.batched));
    this.batch = null;
    this.batched = 0;
  }

  private start(first: Buffer): Decoder {
    const decoder = this.create(first);
    decoder.on("data", (bytes: Buffer) => this.read(bytes));
    decoder.on("error", () => this.stop());
    decoder.once("end", () => {
      this.decodedAll = !this.stopped; // (an error or the cap stopped it first)
      this.stop();
    });
    decoder.once("close", () => this.stop());
    return decoder;
  }

  private read(bytes: Buffer): void {
    if (this.stopped) return;
    const room = this.maxBytes - this.decoded;
    this.decoded += bytes.length;
    if (bytes.length <= room) {
      this.meter.push(bytes);
      return;
    }
    if (room > 0) this.meter.push(bytes.subarray(0, room));
    this.decoder?.destroy();
    this.stop();
  }

  private stop(): void {
    this.stopped = true;
    this.settle();
    // Nothing more is read: a caller waiting for room goes on (the rest of the body is not queued).
    if (this.waiting !== null) this.roomMade();
  }
}

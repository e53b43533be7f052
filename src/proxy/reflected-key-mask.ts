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
 * are small; a success passes untouched. The last `key.length - 1` bytes of each chunk are held back
 * until the next chunk or the end shows whether a key starts in them. The meter reads the
 * provider's own bytes.
 */
export class ReflectedKeyMask {
  private held: Buffer = noBytes;

  constructor(
    private readonly key: Buffer,
    private readonly meter: UsageMeter | DecompressingMeter | null,
  ) {}

  /** The bytes to forward now (null: none yet). */
  pass(chunk: Buffer): Buffer | null {
    this.meter?.push(chunk);
    let data = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    let at = data.indexOf(this.key);
    // A copy before masking: the meter (a decompressor) may still hold the provider's chunk.
    if (at !== -1 && data === chunk) data = Buffer.from(chunk);
    for (; at !== -1; at = data.indexOf(this.key, at + this.key.length))
      data.fill(star, at, at + this.key.length);
    const kept = Math.min(this.key.length - 1, data.length);
    this.held = data.subarray(data.length - kept);
    return data.length > kept ? data.subarray(0, data.length - kept) : null;
  }

  /** What is still held at the end of the body (no key can start in it). */
  end(): Buffer | null {
    const rest = this.held;
    this.held = noBytes;
    return rest.length > 0 ? rest : null;
  }
}

/** A header value with every occurrence of the key replaced (header values have no length to keep). */
export function maskKeyInHeader(value: string, key: string): string {
  return value.includes(key) ? value.replaceAll(key, "[redacted]") : value;
}

/**
 * The most compressed bytes of an error answer held to be decoded and masked, and the most it may
 * decode to: a provider's error is a few hundred bytes; one past either is not forwarded at all.
 */
export const maxCompressedErrorBytes = 1024 * 1024;
const maxDecodedErrorBytes = 8 * 1024 * 1024;

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
    const mask = new ReflectedKeyMask(this.key, null);
    const parts = [mask.pass(body), mask.end()].filter((part): part is Buffer => part !== null);
    return parts.length === 0 ? null : Buffer.concat(parts);
  }
}

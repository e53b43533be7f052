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

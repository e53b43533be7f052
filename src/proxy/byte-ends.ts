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

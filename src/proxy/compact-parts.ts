/** A part under this size is small enough that its object costs more than a tenth of its bytes. */
const smallPart = 1024;
/** Parts are merged up to this size; beyond it one object per part costs nothing worth saving. */
const mergedPartBytes = 64 * 1024;
/** Lists this short are left alone: an answer in a few socket reads is never copied for this. */
const fewParts = 8;

/**
 * Keeps a list of kept byte parts short when they arrive in many tiny pieces (an upstream that sends
 * each byte as an HTTP chunk of its own, which undici hands over one by one): each part held costs
 * ~100 bytes of heap whatever its size, so a 1 MiB line in 1-byte chunks would hold ~100 MiB. Once
 * the list is longer than a few parts and a small part was just added, the last two parts are
 * merged while the one before is at most twice the last's size and both fit in 64 KiB, so small
 * parts grow into 64 KiB blocks by doubling (each byte copied a few times, never one merge per byte).
 * Call it after pushing `added`.
 */
export function compactParts(parts: Buffer[], added: Buffer): void {
  if (added.length >= smallPart || parts.length <= fewParts) return;
  while (parts.length > 1) {
    const last = parts[parts.length - 1] as Buffer;
    const before = parts[parts.length - 2] as Buffer;
    const bytes = before.length + last.length;
    if (before.length > 2 * last.length || bytes > mergedPartBytes) return;
    parts.length -= 2;
    parts.push(Buffer.concat([before, last], bytes));
  }
}

/**
 * The bytes in memory of their own, the original wiped. `Buffer.from`, `Buffer.concat` and
 * `Buffer.copyBytesFrom` copy anything under 4 KiB into Buffer's shared 8 KiB pool: a secret held
 * from there (a master key, a cached provider key's share) keeps its whole slab alive, with whatever
 * else was cut from it, and sits in every ArrayBuffer handed out of that slab. `Buffer.alloc` never
 * takes the pool.
 */
export function unpooledCopy(bytes: Buffer): Buffer {
  const copy = Buffer.alloc(bytes.length);
  bytes.copy(copy);
  bytes.fill(0);
  return copy;
}

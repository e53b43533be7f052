import { hash, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Test keys: 32 random bytes, base64url (no `.`, so a Bearer value splits unambiguously), shown
 * once and stored only as a SHA-256 digest; compared in constant time.
 */
export function generateTestKey(): string {
  return `tk_${randomBytes(32).toString("base64url")}`;
}

export function testKeyDigest(testKey: string): string {
  return hash("sha256", testKey, "hex");
}

/** True when `candidate` hashes to any of the digests; every digest is compared, in constant time. */
export function testKeyMatches(candidate: string, digests: readonly string[]): boolean {
  const actual = hash("sha256", candidate, "buffer");
  let matched = false;
  for (const digest of digests) {
    const expected = Buffer.from(digest, "hex");
    if (expected.length === actual.length && timingSafeEqual(actual, expected)) matched = true;
  }
  return matched;
}

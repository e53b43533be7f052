/**
 * Strict base64 (RFC 4648 section 4) decoding: Node's Buffer.from(…, "base64") silently skips
 * invalid characters, so the alphabet and padding are checked first. Line breaks and spaces
 * (MIME-style wrapping) are tolerated and removed.
 */
const alphabet = /^[A-Za-z0-9+/]*={0,2}$/;

export function decodeStrictBase64(value: string): Buffer | null {
  const compact = value.replace(/[\r\n\t ]+/g, "");
  if (compact.length === 0 || compact.length % 4 !== 0 || !alphabet.test(compact)) return null;
  return Buffer.from(compact, "base64");
}

/** Decoded size of a base64 text without decoding it, for early size caps. */
export function decodedLength(value: string): number {
  return Math.floor((value.length * 3) / 4);
}

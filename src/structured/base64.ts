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

/**
 * Decoded size of a base64 text without decoding or copying it, for early size caps: only the
 * characters that are not the whitespace decodeStrictBase64 removes count, so wrapped base64 is
 * measured as what it decodes to (at most 2 bytes over, for padding).
 */
export function decodedLength(value: string): number {
  let characters = 0;
  for (let index = 0; index < value.length; index++) {
    const code = value.charCodeAt(index);
    // \t \n \r and space
    if (code !== 9 && code !== 10 && code !== 13 && code !== 32) characters++;
  }
  return Math.floor((characters * 3) / 4);
}

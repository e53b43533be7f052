/**
 * A copy of `text` that shares no memory with the string it was cut from. V8 makes a substring of
 * 13 characters or more (a slice, a regular expression's capture, a `split` part) a view that keeps
 * the whole string it came from alive, and so does a template that joins one into a key. A key cut
 * from a request line or a header (up to 16 KiB) and kept in a long-lived map would keep that line:
 * a map bounded to 100,000 entries would hold 1.6 GB. Copy what a long-lived map or queue keeps of
 * what a client sent, once, where it is stored; about 0.3 µs for a short key.
 */
export function detachedString(text: string): string {
  // UTF-16 code units both ways: exact for any string, lone surrogates included.
  return Buffer.from(text, "utf16le").toString("utf16le");
}

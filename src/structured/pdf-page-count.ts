const pagesNode = /\/Type\s*\/Pages(?![A-Za-z])/g;

/**
 * A PDF's pages: its page tree's `/Count` (the root's, the largest of the `/Type /Pages` nodes), read
 * from its uncompressed structure with linear scans (no parser, nothing decompressed); null when no
 * node is readable so (a page tree inside an object stream, PDF 1.5+), which is left to the provider.
 */
export function pdfPageCount(bytes: Uint8Array): number | null {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString("latin1");
  let pages: number | null = null;
  // Where the last object read ends: each object is scanned once, so a client's PDF of many nodes
  // (or of unterminated ones) costs one pass, never one per node.
  let readUntil = 0;
  for (const match of text.matchAll(pagesNode)) {
    if (match.index < readUntil) continue;
    // The node's object: from its `obj` keyword to its `endobj`; none: not a readable object.
    const end = text.indexOf("endobj", match.index);
    if (end === -1) break;
    const start = Math.max(readUntil, text.lastIndexOf("obj", match.index));
    readUntil = end;
    const count = /\/Count\s+(\d+)/.exec(text.slice(start, end));
    if (count?.[1] !== undefined) pages = Math.max(pages ?? 0, Number(count[1]));
  }
  return pages;
}

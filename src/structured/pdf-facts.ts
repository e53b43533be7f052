export interface PdfFacts {
  /**
   * The page tree's `/Count` (its root's: the largest of the `/Type /Pages` nodes), or null when
   * no node is readable without decompressing (a page tree inside an object stream, PDF 1.5+).
   */
  pages: number | null;
}

const pagesNode = /\/Type\s*\/Pages(?![A-Za-z])/g;

/**
 * What a PDF's uncompressed structure says about it, read with linear scans (no parser, nothing
 * decompressed): enough to refuse what a provider refuses on every call, never to judge a PDF
 * further. What it cannot read is left to the provider.
 */
export function readPdfFacts(bytes: Uint8Array): PdfFacts {
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
  return { pages };
}

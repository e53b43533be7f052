import { describe, expect, it } from "vitest";
import { charactersScanned } from "../../test/support/scan-work.js";
import { pdfPageCount } from "./pdf-page-count.js";

const pages = (text: string) => pdfPageCount(Buffer.from(text, "latin1"));

describe("a PDF's page count, read without a parser", () => {
  it("takes the page tree root's count, not an intermediate node's or the catalogue's reference", () => {
    const text =
      "%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n" +
      "2 0 obj\n<< /Kids [3 0 R 4 0 R] /Type /Pages /Count 150 >>\nendobj\n" +
      "3 0 obj\n<< /Type/Pages /Parent 2 0 R /Count 100 /Kids [] >>\nendobj\n" +
      "5 0 obj\n<< /Type /Outlines /Count 900 >>\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n";
    expect(pages(text)).toBe(150);
  });

  it("says it does not know the pages of a page tree inside an object stream", () => {
    const text =
      "%PDF-1.7\n5 0 obj\n<< /Type /ObjStm /N 3 /First 20 /Filter /FlateDecode /Length 9 >>\nstream\nxœ\x03\x00\x00\x00\x00\x01\nendstream\nendobj\n" +
      "6 0 obj\n<< /Type /XRef /Root 1 0 R /Size 7 >>\nstream\n\nendstream\nendobj\n%%EOF\n";
    expect(pages(text)).toBeNull();
  });

  // A client's PDF is read before any provider sees it. Each object is scanned once: a node without
  // its `endobj` ends the reading, and the nodes inside an object already read are passed over. The
  // work is counted, not timed: the characters the reading's searches pass over (at most 5 for
  // each character of the PDF), at 100,000 nodes and at 400,000, which a reading that scans again
  // for each node (on to the end of the PDF, or through its whole object) passes by far.
  describe("in linear time, each object scanned once", () => {
    const shapes = {
      "many unterminated page tree nodes": (nodes: number) =>
        `%PDF-1.4\n1 0 obj\n<<${" /Type /Pages".repeat(nodes)}`,
      "one object of many page tree nodes": (nodes: number) =>
        `%PDF-1.4\n1 0 obj\n<<${" /Type /Pages".repeat(nodes)} >>\nendobj\n%%EOF\n`,
    };
    for (const [shape, pdf] of Object.entries(shapes))
      it(`reads ${shape}`, () => {
        for (const nodes of [100_000, 400_000]) {
          const text = pdf(nodes);
          const budget = 5 * text.length;
          let read: number | null = 0;
          const scanned = charactersScanned(() => {
            read = pages(text);
          }, budget);
          expect(read).toBeNull();
          expect(scanned).toBeGreaterThan(text.length / 2);
          expect(scanned).toBeLessThanOrEqual(budget);
        }
      });
  });
});

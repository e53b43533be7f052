import { describe, expect, it } from "vitest";
import { fastestMs } from "../../test/support/fastest-run.js";
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

  it("reads a PDF of many unterminated page tree nodes in linear time (each object scanned once)", () => {
    const hostile = `%PDF-1.4\n1 0 obj\n<<${" /Type /Pages".repeat(200_000)}`;
    // The fastest of three runs, which a loaded machine's pauses leave out.
    expect(fastestMs(() => expect(pages(hostile)).toBeNull())).toBeLessThan(500);
  }, 10_000);
});

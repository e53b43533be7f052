import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { requirePdfWithinLimits } from "./input-limits.js";

const pdf = (count: string) =>
  Buffer.from(
    `%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n2 0 obj\n<< /Type /Pages /Count ${count} /Kids [] >>\nendobj\n%%EOF\n`,
    "latin1",
  );

function refusal(bytes: Buffer): GatewayError {
  try {
    requirePdfWithinLimits("provider-b", bytes);
  } catch (error) {
    if (error instanceof GatewayError) return error;
    throw error;
  }
  throw new Error("the PDF was not refused");
}

describe("a PDF past the provider's pages", () => {
  it("is refused with its page count", () => {
    const error = refusal(pdf("601"));
    expect(error.message).toBe("provider-b reads at most 600 PDF pages in a call; this one has 601 pages");
    expect(error.details).toEqual({ pages: 601, maxPages: 600 });
  });

  it("whose page tree claims a count no number holds is refused in words, not as Infinity or null", () => {
    const error = refusal(pdf("9".repeat(400)));
    expect(error.message).toBe(
      "provider-b reads at most 600 PDF pages in a call; this one's page tree claims more than 9007199254740991",
    );
    expect(JSON.parse(JSON.stringify(error.details))).toEqual({ pages: null, maxPages: 600 });
  });
});

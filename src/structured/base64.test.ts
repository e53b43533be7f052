import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../test/support/seeded-random.js";
import { decodeForgivingBase64 } from "./base64.js";

/** The AI SDK's decoder of an image's base64 (provider-utils' convertBase64ToUint8Array), as it is. */
function sdkDecode(value: string): Buffer | null {
  try {
    return Buffer.from(atob(value.replace(/-/g, "+").replace(/_/g, "/")), "latin1");
  } catch {
    return null;
  }
}

describe("decodeForgivingBase64", () => {
  it("decodes what the AI SDK decodes, to the same bytes, and refuses what it refuses", () => {
    const next = mulberry32(20261130);
    const characters = "AZaz09+/-_=\n\r\t \f.*é";
    const disagreements: string[] = [];
    for (let round = 0; round < 20_000; round++) {
      let value: string;
      if (next() < 0.5) {
        // A real encoding, then bent the ways providers bend it.
        const bytes = Buffer.from(
          Array.from({ length: Math.floor(next() * 40) }, () => Math.floor(next() * 256)),
        );
        value = bytes.toString(next() < 0.5 ? "base64" : "base64url");
        if (next() < 0.3) value = value.replace(/=+$/, "");
        if (next() < 0.3) value = value.replace(/(.{8})/g, "$1\n");
        if (next() < 0.2) value = value.slice(0, Math.floor(next() * value.length));
      } else
        value = Array.from(
          { length: Math.floor(next() * 12) },
          () => characters[Math.floor(next() * characters.length)],
        ).join("");
      const ours = decodeForgivingBase64(value);
      const theirs = sdkDecode(value);
      if ((ours === null) !== (theirs === null) || (ours && theirs && !ours.equals(theirs)))
        disagreements.push(JSON.stringify(value));
    }
    expect(disagreements.slice(0, 10)).toEqual([]);
  });
});

import { describe, expect, it } from "vitest";
import { fastestMs } from "../../test/support/fastest-run.js";
import { bearerValue } from "./credential-headers.js";

describe("bearerValue", () => {
  const read = (authorization: string) => bearerValue({ authorization }, undefined);

  it("reads the value after the scheme, spaces and tabs around it trimmed", () => {
    expect(read("Bearer sk_sluice_a.token")).toBe("sk_sluice_a.token");
    expect(read("bearer \t sk_sluice_a.token \t")).toBe("sk_sluice_a.token");
    expect(read("BEARER x")).toBe("x");
    expect(read("Bearer  ")).toBe("");
    expect(read("Bearer")).toBe("");
    expect(read("Bearer a b")).toBe("");
    expect(read("Bearer a\u00a0b")).toBe("");
    expect(read("Bearerx")).toBe("");
    expect(read("Basic abc")).toBe("");
    expect(bearerValue({ authorization: "Basic abc", "x-api-key": "k" }, "x-api-key")).toBe("k");
  });

  // A client writes the header (up to Node's 16 KiB of head), before any credential is checked. The
  // pattern once let its leading spaces be taken by either of two runs: with a space inside the
  // value, every split of them was tried, quadratic in their number (~0.4 s for 16 KiB).
  it("reads a header of 16 KiB built to make a pattern backtrack in linear time", () => {
    const crafted = [
      `Bearer ${" ".repeat(16_000)}x y`,
      `Bearer ${"\t ".repeat(8_000)}x\u00a0`,
      `Bearer x${" ".repeat(16_000)}y`,
    ];
    // Far above the fraction of a millisecond a linear reading takes, far below the quadratic one's:
    // the fastest of three runs, which a loaded machine's pauses leave out.
    const readAll = () => {
      for (const authorization of crafted) expect(read(authorization)).toBe("");
    };
    expect(fastestMs(readAll)).toBeLessThan(100);
    expect(read(`Bearer ${" ".repeat(16_000)}x${" ".repeat(100)}`)).toBe("x");
  });
});

import { describe, expect, it } from "vitest";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
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
  // value, every split of them was tried, quadratic in their number (~0.4 s for 16 KiB). The
  // backtracking is inside V8's regular expressions, where only a clock sees it: headers of 16,000
  // characters against 1,000, the same code both times, where linear reading takes about 16 times
  // as long and quadratic 256 (slowdown-at-sixteen-times.ts). The speed is the benchmark's to watch.
  it("reads a header of 16 KiB built to make a pattern backtrack in linear time", () => {
    const crafted = (size: number) => [
      `Bearer ${" ".repeat(size)}x y`,
      `Bearer ${"\t ".repeat(size / 2)}x\u00a0`,
      `Bearer x${" ".repeat(size)}y`,
    ];
    const headers = new Map([1000, 16_000].map((size) => [size, crafted(size)]));
    const readAll = (size: number) => {
      for (const authorization of headers.get(size) ?? [])
        if (read(authorization) !== "") throw new Error(authorization);
    };
    const slowdown = slowdownAtSixteenTimes(readAll, 1000);
    expect(slowdown, `16,000 characters took ${slowdown.toFixed(1)} times as long as 1,000`).toBeLessThan(64);
    expect(read(`Bearer ${" ".repeat(16_000)}x${" ".repeat(100)}`)).toBe("x");
  });
});

import { describe, expect, it } from "vitest";
import type { TokenUsage } from "../usage/token-usage.js";
import { addUsage } from "./analyze.js";

const usage = (
  inputTokens: number | null,
  outputTokens: number | null,
  cachedInputTokens: number | null = null,
  reasoningTokens: number | null = null,
): TokenUsage => ({ inputTokens, outputTokens, cachedInputTokens, reasoningTokens });

describe("addUsage (the first attempt's usage plus the repair's)", () => {
  it("sums the counts both attempts report, a missing cached or reasoning count as 0", () => {
    expect(addUsage(usage(10, 5, 4, null), usage(20, 7, null, 3))).toEqual(usage(30, 12, 4, 3));
    expect(addUsage(usage(10, 5), usage(20, 7))).toEqual(usage(30, 12));
  });

  // Before, the known attempt's count stood for both, priced as the whole.
  it("leaves an input or output count unknown when one attempt did not report it", () => {
    expect(addUsage(usage(null, 5), usage(20, 7))).toEqual(usage(null, 12));
    expect(addUsage(usage(10, 5), usage(20, null))).toEqual(usage(30, null));
    expect(addUsage(usage(10, 5, 4), null)).toEqual(usage(null, null, 4));
  });
});

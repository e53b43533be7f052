import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../test/support/seeded-random.js";
import { addCostTotals, costTotalOf, usdOf } from "./cost-sums.js";

describe("costs summed exactly in billionths", () => {
  it("answers below 2^53 billionths the number a division by 1e9 answered", () => {
    const random = mulberry32(45);
    const samples = [0, 1, 3, 10 ** 8 + 7, 2 ** 52 + 1, 2 ** 53 - 1];
    for (let draw = 0; draw < 10_000; draw++) {
      // Whole billionths over every magnitude: cents, dollars, millions.
      samples.push(Math.floor(random() * 2 ** Math.floor(random() * 54)));
    }
    for (const billionths of samples) {
      expect(usdOf({ billionths: BigInt(billionths), beyondUsd: 0 })).toBe(billionths / 1e9);
      if (billionths > 0)
        expect(usdOf({ billionths: -BigInt(billionths), beyondUsd: 0 })).toBe(-billionths / 1e9);
    }
  });

  it("answers past 2^53 billionths the double nearest the exact sum, rounded once", () => {
    // 2^53 billionths is 9007199.254740992 USD.
    expect(usdOf({ billionths: 2n ** 53n + 12n, beyondUsd: 0 })).toBe(9_007_199.254741004);
    expect(usdOf({ billionths: 123_456_789_012_345_678_901n, beyondUsd: 0 })).toBe(
      Number("123456789012.345678901"),
    );
  });

  it("reads a statement's columns whole dollars and billionths, and none as no known cost", () => {
    const none = { cost_whole: null, cost_part: null, cost_beyond: null };
    expect(costTotalOf(none)).toBeNull();
    const total = costTotalOf({ cost_whole: "90071992547", cost_part: "1999999999", cost_beyond: null });
    expect(total).toEqual({ billionths: 90_071_992_548_999_999_999n, beyondUsd: 0 });
    const beyond = costTotalOf({ cost_whole: null, cost_part: null, cost_beyond: 1e300 });
    expect(beyond).toEqual({ billionths: 0n, beyondUsd: 1e300 });
    expect(addCostTotals(total, null)).toBe(total);
    expect(addCostTotals(null, null)).toBeNull();
    const both = addCostTotals(total, beyond);
    expect(both).toEqual({ billionths: 90_071_992_548_999_999_999n, beyondUsd: 1e300 });
    expect(both && usdOf(both)).toBe(1e300);
  });
});

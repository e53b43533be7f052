import { describe, expect, it } from "vitest";
import { type UsageCostCase, usageCostCases, usdOf } from "../../test/support/usage-cost-cases.js";
import { costOfProxiedCall } from "./call-cost.js";
import { createUsageMeter } from "./usage-meter.js";

/**
 * The usage shapes of test/support/usage-cost-cases.ts, from the answer's bytes (a JSON body, and
 * the same answer streamed, pushed in small pieces) through the meter to the cost the row records.
 */
function meterCost(
  c: UsageCostCase,
  streaming: boolean,
  body: string,
): { cost: number | null; input: number | null; output: number | null } {
  const meter = createUsageMeter(c.provider, { streaming, responses: c.responses ? "post" : undefined });
  const bytes = Buffer.from(body);
  // Pushed in small chunks, as a stream arrives.
  for (let at = 0; at < bytes.length; at += 7) meter.push(bytes.subarray(at, at + 7));
  meter.end();
  const reading = meter.finish();
  return {
    cost: costOfProxiedCall(c.provider, reading.model ?? c.model, reading.usage),
    input: reading.usage.inputTokens,
    output: reading.usage.outputTokens,
  };
}

describe("a usage row's cost from the answer's bytes, JSON and streamed", () => {
  for (const c of usageCostCases) {
    it(`${c.name}: JSON`, () => {
      expect(meterCost(c, false, JSON.stringify(c.json)).cost).toBe(usdOf(c.micro));
    });
    it(`${c.name}: streamed`, () => {
      expect(meterCost(c, true, c.sse as string).cost).toBe(usdOf(c.micro));
    });
    it(`${c.name}: the same counts either way`, () => {
      const json = meterCost(c, false, JSON.stringify(c.json));
      const streamed = meterCost(c, true, c.sse as string);
      expect(streamed).toEqual(json);
    });
  }
});

import { describe, expect, it, vi } from "vitest";
import { emptyUsage } from "../usage/token-usage.js";
import { createUsageMeter } from "./usage-meter.js";

/**
 * Reading a provider C JSON-array answer (`streamGenerateContent` without `alt=sse`) that is cut
 * short does work linear in the body, however many `"usageMetadata"` keys it holds: the bytes
 * `valueEnd` reads are counted (no wall time).
 */
const scanned = vi.hoisted(() => ({ bytes: 0 }));
vi.mock("../providers/json-bytes.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../providers/json-bytes.js")>();
  return {
    ...original,
    valueEnd(body: Buffer, at: number, limit?: number): number {
      const end = original.valueEnd(body, at, limit);
      scanned.bytes += (end < 0 ? (limit ?? body.length) : end) - at;
      return end;
    },
  };
});

function read(body: string) {
  const meter = createUsageMeter("provider-c", { streaming: false, contentType: "application/json" });
  meter.push(Buffer.from(body));
  scanned.bytes = 0;
  return meter.finish();
}

const element = JSON.stringify({
  candidates: [{ content: { parts: [{ text: "Hello" }], role: "model" }, index: 0 }],
  usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 4, totalTokenCount: 7 },
  modelVersion: "gemini-2.5-flash",
});
/** An element cut inside a function call whose arguments nest `keys` usageMetadata objects. */
const cutFunctionCall = (keys: number) =>
  `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":${'{"usageMetadata":'.repeat(keys)}{"a":1`;

describe("usage of a cut provider C JSON array", () => {
  it("reads a cut array of many nested usageMetadata keys with work linear in the body", () => {
    const body = `[${cutFunctionCall(5_000)}`; // about 85 KB
    expect(read(body)).toEqual({ usage: emptyUsage(), model: null });
    // Each key's object was read to the end of the body before: 5,000 × 42 KB on average.
    expect(scanned.bytes).toBeLessThanOrEqual(2 * body.length);
  });

  it("still finds the usage of the last whole element before such a cut", () => {
    const body = `[${element},\r\n${cutFunctionCall(2_000)}`;
    const reading = read(body);
    expect(reading).toEqual({
      usage: { inputTokens: 3, outputTokens: 4, cachedInputTokens: null, reasoningTokens: null },
      model: "gemini-2.5-flash",
    });
    expect(scanned.bytes).toBeLessThanOrEqual(2 * body.length);
  });

  it("gives up on usageMetadata objects that close but do not parse after a few", () => {
    // Nested objects that each close, none of which parses (`tru`): each could be read to the end.
    const keys = 2_000;
    const body = `[${element},${'{"usageMetadata":'.repeat(keys)}{"a":tru}${"}".repeat(keys)}]`;
    expect(read(body).usage).toEqual(emptyUsage());
    expect(scanned.bytes).toBeLessThanOrEqual(10 * body.length);
  });

  it("reads a well-formed array's last usage object first", () => {
    const body = `[${element},${element.replace('"promptTokenCount":3', '"promptTokenCount":5')}]`;
    expect(read(body).usage.inputTokens).toBe(5);
    expect(scanned.bytes).toBeLessThan(element.length);
  });
});

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

/** `body` read as the answer's bytes; `ended`: the provider ended it cleanly (else it was cut). */
function read(body: string, ended = false) {
  const meter = createUsageMeter("provider-c", { streaming: false });
  meter.push(Buffer.from(body));
  if (ended) meter.end();
  scanned.bytes = 0;
  return meter.finish();
}

const element = JSON.stringify({
  candidates: [{ content: { parts: [{ text: "Hello" }], role: "model" }, index: 0 }],
  usageMetadata: { promptTokenCount: 3, candidatesTokenCount: 4, totalTokenCount: 7 },
  modelVersion: "gemini-2.5-flash",
});
const usageOfElement = { inputTokens: 3, outputTokens: 4, cachedInputTokens: null, reasoningTokens: null };
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

  it("takes no usageMetadata that a cut element's function call arguments spell for the element's", () => {
    // The model writes the arguments (a prompt can steer them); the cut leaves theirs the last whole one.
    const forged = `{"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1,"totalTokenCount":2}}`;
    const cut = `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":${forged}}}]`;
    expect(read(`[${element},\r\n${cut}`)).toEqual({ usage: usageOfElement, model: "gemini-2.5-flash" });
    expect(read(`[${cut}`)).toEqual({ usage: emptyUsage(), model: null });
    // The element's own, whole before the cut, is its usage.
    const own = element.replace('"promptTokenCount":3', '"promptTokenCount":5').slice(0, -1);
    expect(read(`[${element},${own}`).usage.inputTokens).toBe(5);
  });

  it("walks a cut array of elements whose usageMetadata objects nest and do not parse once", () => {
    // Each element's own usageMetadata is one object, parsed once; those nested in it never are.
    const keys = 2_000;
    const broken = `{"usageMetadata":${'{"usageMetadata":'.repeat(keys)}{"a":tru}${"}".repeat(keys)}}`;
    const body = `[${element},${broken},${broken.slice(0, -keys)}`;
    expect(read(body).usage).toEqual(usageOfElement);
    expect(scanned.bytes).toBeLessThanOrEqual(2 * body.length);
  });
});

describe("usage of a provider C JSON array that ended cleanly", () => {
  it("gives up on usageMetadata objects that close but do not parse after a few", () => {
    // Nested objects that each close, none of which parses (`tru`): each could be read to the end.
    const keys = 2_000;
    const body = `[${element},${'{"usageMetadata":'.repeat(keys)}{"a":tru}${"}".repeat(keys)}]`;
    expect(read(body, true).usage).toEqual(emptyUsage());
    expect(scanned.bytes).toBeLessThanOrEqual(10 * body.length);
  });

  it("reads a well-formed array's last usage object first", () => {
    const body = `[${element},${element.replace('"promptTokenCount":3', '"promptTokenCount":5')}]`;
    expect(read(body, true).usage.inputTokens).toBe(5);
    expect(scanned.bytes).toBeLessThan(element.length);
  });
});

/** Google's in-stream error, as the array form carries it: an element of its own, the last. */
const errorElement =
  '{\n  "error": {\n    "code": 503,\n    "message": "The model is overloaded.",\n    "status": "UNAVAILABLE"\n  }\n}';

describe("a provider C JSON array that carries the provider's error element", () => {
  it("is read as failed, with the tokens of the elements before it", () => {
    expect(read(`[${element},\r\n${errorElement}\r\n]`)).toEqual({
      usage: usageOfElement,
      model: "gemini-2.5-flash",
      failed: true,
    });
  });

  it("is read as failed when the error is the only element, or the array is cut after it", () => {
    expect(read(`[${errorElement}]`)).toEqual({ usage: emptyUsage(), model: null, failed: true });
    expect(read(`[${element},${errorElement}`).failed).toBe(true);
  });

  it("is read as failed from the last bytes of an array over the kept size", () => {
    const many = Array.from({ length: Math.ceil((5 * 1024 * 1024) / element.length) }, () => element);
    const reading = read(`[${many.join(",\r\n")},\r\n${errorElement}\r\n]`);
    expect(reading).toMatchObject({ usage: usageOfElement, failed: true });
  });

  it("is not read as failed for an error object that is no element of the array", () => {
    // A function call's arguments, the last element's or a cut one's, may hold an `error` object.
    const call = `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":${errorElement}}}]}}]}`;
    expect(read(`[${element},${call}]`)).not.toHaveProperty("failed");
    expect(read(`[${element},${call.slice(0, -3)}`)).not.toHaveProperty("failed");
    // Text that names an error, and an error element that is not the last.
    const text = element.replace('"Hello"', '"{\\"error\\": 1}"');
    expect(read(`[${text},${element}]`)).not.toHaveProperty("failed");
    expect(read(`[${errorElement},${element}]`)).not.toHaveProperty("failed");
  });

  it("finds the error element with work linear in what follows the last usage object", () => {
    // Nested `{"error":` objects after the usage: each is read only inside the one before it.
    const keys = 5_000;
    const nested = `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":${'{"error":'.repeat(keys)}1${"}".repeat(keys)}}}]}}]}`;
    const body = `[${element},${nested}]`;
    expect(read(body)).not.toHaveProperty("failed");
    expect(scanned.bytes).toBeLessThanOrEqual(2 * body.length);
  });
});

import { describe, expect, it } from "vitest";
import { maskKeyInHeader, ReflectedKeyMask } from "./reflected-key-mask.js";

const key = "sk-live-0123456789abcdef";
const masked = "*".repeat(key.length);

function passAll(mask: ReflectedKeyMask, chunks: Buffer[]): string {
  const out = chunks.map((chunk) => mask.pass(chunk) ?? Buffer.alloc(0));
  return Buffer.concat([...out, mask.end() ?? Buffer.alloc(0)]).toString("latin1");
}

describe("reflected key mask", () => {
  const body = `{"error":"bad key ${key}, again ${key}${key}."}`;
  const expected = body.replaceAll(key, masked);

  it("masks every occurrence wherever two cuts fall, and keeps every other byte in order", () => {
    const bytes = Buffer.from(body, "latin1");
    for (let first = 0; first <= bytes.length; first++)
      for (let second = first; second <= bytes.length; second += 3) {
        const chunks = [bytes.subarray(0, first), bytes.subarray(first, second), bytes.subarray(second)];
        expect(passAll(new ReflectedKeyMask(Buffer.from(key), null), chunks)).toBe(expected);
      }
  });

  it("lets the meter read the provider's own bytes, and leaves the provider's chunk unchanged", () => {
    const seen: Buffer[] = [];
    const meter = { push: (chunk: Buffer) => void seen.push(chunk), finish: () => ({}) } as never;
    const chunk = Buffer.from(body, "latin1");
    expect(passAll(new ReflectedKeyMask(Buffer.from(key), meter), [chunk])).toBe(expected);
    expect(Buffer.concat(seen).toString("latin1")).toBe(body);
    expect(chunk.toString("latin1")).toBe(body);
  });

  it("passes a body without the key unchanged, holding back only the last key-length bytes", () => {
    const mask = new ReflectedKeyMask(Buffer.from(key), null);
    expect(mask.pass(Buffer.from("short"))).toBeNull();
    expect(mask.pass(Buffer.from("x".repeat(40)))?.toString()).toBe(
      `short${"x".repeat(40 - key.length + 1)}`,
    );
    expect(mask.end()?.toString()).toBe("x".repeat(key.length - 1));
  });

  it("replaces the key in a header value", () => {
    expect(maskKeyInHeader(`Bearer ${key}`, key)).toBe("Bearer [redacted]");
    expect(maskKeyInHeader("no key here", key)).toBe("no key here");
    expect(maskKeyInHeader(`${key}, ${key}`, key)).toBe("[redacted], [redacted]");
  });
});

import { describe, expect, it } from "vitest";
import { generateTestKey, testKeyDigest, testKeyMatches } from "./test-key.js";

describe("test keys", () => {
  it("are high-entropy, dot-free and matched only by their digest", () => {
    const key = generateTestKey();
    expect(key).toMatch(/^tk_[A-Za-z0-9_-]{43}$/);
    expect(generateTestKey()).not.toBe(key);
    expect(testKeyMatches(key, [testKeyDigest("other"), testKeyDigest(key)])).toBe(true);
    expect(testKeyMatches(`${key}x`, [testKeyDigest(key)])).toBe(false);
    expect(testKeyMatches(key, [])).toBe(false);
    expect(testKeyMatches(key, ["not-hex"])).toBe(false);
  });
});

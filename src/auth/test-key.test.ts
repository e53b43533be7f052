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

  it("keep the digests already stored: SHA-256 of the key's UTF-8, in hex", () => {
    const stored = "73e20d37d6b683b85f21f5eef94253e7ae5dc236644f9b65a02b3546efe8cc2e";
    expect(testKeyDigest("tk_stored-before")).toBe(stored);
    expect(testKeyMatches("tk_stored-before", [stored])).toBe(true);
  });
});

import { describe, expect, it } from "vitest";
import { detachedString } from "./detached-string.js";

describe("detachedString", () => {
  it.each(["", "a", "made-up-0123456789abcdef", "ünïcödé ✓ 😀", "lone \ud800 surrogate", "x".repeat(100)])(
    "gives back the same text for %j",
    (text) => {
      expect(detachedString(text)).toBe(text);
    },
  );
});

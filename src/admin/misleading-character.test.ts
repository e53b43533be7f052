import { describe, expect, it } from "vitest";
import { misleadingCharacter } from "./misleading-character.js";

describe("misleading characters in a shown text", () => {
  const refused = [
    ...Array.from({ length: 0x20 }, (_, code) => code),
    ...Array.from({ length: 0x21 }, (_, offset) => 0x7f + offset),
    0x061c,
    0x200b,
    0x200e,
    0x200f,
    0x202a,
    0x202b,
    0x202c,
    0x202d,
    0x202e,
    0x2060,
    0x2066,
    0x2067,
    0x2068,
    0x2069,
    0xfeff,
  ];

  it("names each control, bidirectional control and zero-width character by its code point and place", () => {
    for (const code of refused) {
      const hex = code.toString(16).toUpperCase().padStart(4, "0");
      expect(misleadingCharacter(`ab${String.fromCodePoint(code)}c`), hex).toBe(`U+${hex} at character 3`);
    }
  });

  it("passes over the characters beside them: spaces, accents, other format characters", () => {
    for (const code of [
      0x20, 0x7e, 0xa0, 0xa1, 0xad, 0x061b, 0x200a, 0x2010, 0x2029, 0x202f, 0x2061, 0x2065, 0xfe0f,
    ])
      expect(misleadingCharacter(`a${String.fromCodePoint(code)}b`), code.toString(16)).toBeNull();
  });

  it("counts the place in code points, an emoji being one", () => {
    expect(misleadingCharacter("\u{1F600}\u{1F600}\u202E")).toBe("U+202E at character 3");
  });

  it("takes a joiner where its writing uses one, and refuses it elsewhere", () => {
    expect(misleadingCharacter("می\u200Cخواهم")).toBeNull();
    expect(misleadingCharacter("क्\u200Dष")).toBeNull();
    expect(misleadingCharacter("\u{1F468}\u200D\u{1F469}\u200D\u{1F467}")).toBeNull();
    expect(misleadingCharacter("\u{1F3F3}\uFE0F\u200D\u{1F308}")).toBeNull();
    expect(misleadingCharacter("pay\u200Croll")).toBe("U+200C at character 4");
    expect(misleadingCharacter("ра\u200Dура")).toBe("U+200D at character 3");
    expect(misleadingCharacter("\u200Dمشروع")).toBe("U+200D at character 1");
    expect(misleadingCharacter("مشروع\u200C")).toBe("U+200C at character 6");
    expect(misleadingCharacter("\u{1F469}\u200D")).toBe("U+200D at character 2");
    // A joiner after an emoji but before a letter joins no emoji sequence.
    expect(misleadingCharacter("\u{1F469}\u200Dx")).toBe("U+200D at character 2");
  });
});

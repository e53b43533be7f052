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
      0x20, 0x7e, 0xa0, 0xa1, 0x0301, 0x061b, 0x200a, 0x2010, 0x2029, 0x202f, 0x20e3, 0xfff9,
    ])
      expect(misleadingCharacter(`a${String.fromCodePoint(code)}b`), code.toString(16)).toBeNull();
  });

  it("refuses every other default ignorable character, each of which shows `pay…roll` as `payroll`", () => {
    expect(misleadingCharacter("pay\u2061roll")).toBe("U+2061 at character 4"); // function application
    expect(misleadingCharacter("pay\u00ADroll")).toBe("U+00AD at character 4"); // soft hyphen
    expect(misleadingCharacter("pay\u034Froll")).toBe("U+034F at character 4"); // combining grapheme joiner
    expect(misleadingCharacter("pay\u3164roll")).toBe("U+3164 at character 4"); // Hangul filler
    expect(misleadingCharacter("pay\uFFA0roll")).toBe("U+FFA0 at character 4"); // halfwidth Hangul filler
    expect(misleadingCharacter("pay\u115F\u1160roll")).toBe("U+115F at character 4"); // jamo fillers
    expect(misleadingCharacter("pay\u{E0061}roll")).toBe("U+E0061 at character 4"); // tag letter a
    expect(misleadingCharacter("pay\uFE0Froll")).toBe("U+FE0F at character 4");
    expect(misleadingCharacter("pay\u180Broll")).toBe("U+180B at character 4"); // Mongolian FVS1
    expect(misleadingCharacter("pay\u{1D173}roll")).toBe("U+1D173 at character 4"); // musical beam
    // Every one of them (Default_Ignorable_Code_Point, as Node's Unicode data has it) after an ASCII
    // letter, where no writing uses one.
    const ignorable = /^\p{Default_Ignorable_Code_Point}$/u;
    let count = 0;
    for (let code = 0; code <= 0x10ffff; code++) {
      if (code >= 0xd800 && code <= 0xdfff) continue;
      const character = String.fromCodePoint(code);
      if (!ignorable.test(character)) continue;
      count++;
      const hex = code.toString(16).toUpperCase().padStart(4, "0");
      expect(misleadingCharacter(`ab${character}c`), hex).toBe(`U+${hex} at character 3`);
    }
    expect(count).toBeGreaterThan(4000);
  });

  it("takes a variation selector right after a character it applies to, and refuses it elsewhere", () => {
    expect(misleadingCharacter("\u2764\uFE0F")).toBeNull(); // ❤️
    expect(misleadingCharacter("\u00A9\uFE0F")).toBeNull(); // ©️
    expect(misleadingCharacter("\u2764\uFE0E")).toBeNull(); // ❤︎, text style
    expect(misleadingCharacter("team \u{1F680}\uFE0F")).toBeNull();
    // Keycaps: a digit, `#` or `*`, U+FE0F and U+20E3.
    expect(misleadingCharacter("1\uFE0F\u20E3")).toBeNull(); // 1️⃣
    expect(misleadingCharacter("#\uFE0F\u20E3 *\uFE0F\u20E3")).toBeNull();
    expect(misleadingCharacter("v1\uFE0F")).toBe("U+FE0F at character 3");
    expect(misleadingCharacter("1\uFE0E\u20E3")).toBe("U+FE0E at character 2");
    expect(misleadingCharacter("a\uFE0F\u20E3")).toBe("U+FE0F at character 2");
    expect(misleadingCharacter("\u2764\uFE0F\uFE0F")).toBe("U+FE0F at character 3");
    expect(misleadingCharacter("\uFE0Fpayroll")).toBe("U+FE0F at character 1");
    expect(misleadingCharacter("\u6771\uFE0F\u4EAC")).toBe("U+FE0F at character 2"); // 東 is no emoji
    // U+FE00 to U+FE0D (standardized variation sequences: math symbols, CJK compatibility ideographs,
    // Myanmar, Phags-pa…) after a symbol or a letter of a script other than Latin, Greek or Cyrillic.
    expect(misleadingCharacter("\u2229\uFE00")).toBeNull(); // ∩ with serifs
    expect(misleadingCharacter("\u8279\uFE00")).toBeNull(); // a CJK compatibility ideograph's form
    expect(misleadingCharacter("\u1000\uFE00")).toBeNull(); // Myanmar
    expect(misleadingCharacter("\uA856\uFE00")).toBeNull(); // Phags-pa
    expect(misleadingCharacter("pay\uFE00roll")).toBe("U+FE00 at character 4");
    expect(misleadingCharacter("caf\u00E9\uFE00")).toBe("U+FE00 at character 5");
    expect(misleadingCharacter("\u0436\uFE01")).toBe("U+FE01 at character 2"); // Cyrillic
    expect(misleadingCharacter("0\uFE00")).toBe("U+FE00 at character 2");
    expect(misleadingCharacter("\u2229\u0301\uFE00")).toBe("U+FE00 at character 3"); // after a mark
    // Ideographic variation selectors after a Han character (葛 and its IVD form).
    expect(misleadingCharacter("\u845B\u{E0100}\u57CE")).toBeNull();
    expect(misleadingCharacter("\u{20B9F}\u{E01EF}")).toBeNull();
    expect(misleadingCharacter("pay\u{E0100}roll")).toBe("U+E0100 at character 4");
    expect(misleadingCharacter("\u845B\u{E0100}\u{E0101}")).toBe("U+E0101 at character 3");
    expect(misleadingCharacter("\u30AB\u{E0100}")).toBe("U+E0100 at character 2"); // katakana
  });

  it("takes Mongolian variation selectors and the vowel separator right after a Mongolian letter", () => {
    expect(misleadingCharacter("\u182D\u180B\u1820")).toBeNull();
    expect(misleadingCharacter("\u1821\u180F")).toBeNull(); // FVS4
    expect(misleadingCharacter("\u182C\u1820\u1837\u180E\u1820")).toBeNull(); // ᠬᠠᠷ᠎ᠠ
    expect(misleadingCharacter("\u182D\u180B\u180C")).toBe("U+180C at character 3");
    expect(misleadingCharacter("\u0628\u180B")).toBe("U+180B at character 2"); // Arabic
    expect(misleadingCharacter("\u1810\u180B")).toBe("U+180B at character 2"); // a Mongolian digit
    expect(misleadingCharacter("pay\u180Eroll")).toBe("U+180E at character 4");
  });

  it("takes tag characters only in an emoji flag tag sequence: U+1F3F4, a subdivision's tags, U+E007F", () => {
    const tags = (text: string) =>
      Array.from(text, (c) => String.fromCodePoint(0xe0000 + c.charCodeAt(0))).join("");
    const flag = (spec: string) => `\u{1F3F4}${tags(spec)}\u{E007F}`;
    expect(misleadingCharacter(flag("gbsct"))).toBeNull(); // 🏴󠁧󠁢󠁳󠁣󠁴󠁿 Scotland
    expect(misleadingCharacter(`team ${flag("gbeng")} ${flag("gbwls")}`)).toBeNull();
    expect(misleadingCharacter(flag("usca"))).toBeNull();
    expect(misleadingCharacter(`\u{1F3F4}${tags("gbsct")}`)).toBe("U+E0067 at character 2"); // no end
    expect(misleadingCharacter(`pay${tags("gbsct")}\u{E007F}roll`)).toBe("U+E0067 at character 4");
    expect(misleadingCharacter("\u{1F3F4}\u{E007F}")).toBe("U+E007F at character 2");
    expect(misleadingCharacter(`${flag("gbsct")}\u{E007F}`)).toBe("U+E007F at character 8");
    expect(misleadingCharacter(flag("GBSCT"))).toBe("U+E0047 at character 2"); // not a subdivision's
    expect(misleadingCharacter(flag("gb sct"))).toBe("U+E0067 at character 2");
    expect(misleadingCharacter(flag("gbpayroll"))).toBe("U+E0067 at character 2"); // too long
    expect(misleadingCharacter(`\u{1F3F3}${tags("gbsct")}\u{E007F}`)).toBe("U+E0067 at character 2");
    expect(misleadingCharacter(`\u{1F3F4}\u{E0001}${tags("en")}\u{E007F}`)).toBe("U+E0001 at character 2");
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

  // RFC 5892 Appendix A.1 and A.2: either joiner right after a virama; U+200C between letters that
  // join (here: letters of a cursive joining script, marks between them passed over).
  it("takes a joiner right after a virama, in each script that has one", () => {
    const viramas = [
      ["Devanagari", "\u0915\u094D", "\u0937"],
      ["Bengali", "\u0995\u09CD", "\u09B7"],
      ["Gurmukhi", "\u0A15\u0A4D", "\u0A38"],
      ["Gujarati", "\u0A95\u0ACD", "\u0AB7"],
      ["Oriya", "\u0B15\u0B4D", "\u0B37"],
      ["Tamil", "\u0B95\u0BCD", "\u0BB7"],
      ["Telugu", "\u0C15\u0C4D", "\u0C37"],
      ["Kannada", "\u0C95\u0CCD", "\u0CB7"],
      ["Malayalam", "\u0D15\u0D4D", "\u0D37"],
      ["Malayalam vertical bar virama", "\u0D15\u0D3B", "\u0D37"],
      ["Malayalam circular virama", "\u0D15\u0D3C", "\u0D37"],
      ["Sinhala", "\u0DC1\u0DCA", "\u0DBB\u0DD3"],
      ["Thai", "\u0E01\u0E3A", "\u0E02"],
      ["Myanmar", "\u1000\u1039", "\u1000"],
      ["Myanmar asat", "\u1000\u103A", "\u1000"],
      ["Khmer", "\u1780\u17D2", "\u1780"],
      ["Tibetan", "\u0F40\u0F84", "\u0F41"],
      ["Balinese", "\u1B13\u1B44", "\u1B13"],
      ["Brahmi", "\u{11013}\u{11046}", "\u{11013}"],
    ];
    for (const [script, before, after] of viramas) {
      expect(misleadingCharacter(`${before}\u200D${after}`), script).toBeNull();
      expect(misleadingCharacter(`${before}\u200C${after}`), script).toBeNull();
    }
    // Sinhala's name of Sri Lanka, and a Malayalam chillu as older text writes it (virama and U+200D
    // ending the word).
    expect(misleadingCharacter("\u0DC1\u0DCA\u200D\u0DBB\u0DD3 \u0DBD\u0D82\u0D9A\u0DCF")).toBeNull();
    expect(misleadingCharacter("\u0D05\u0D35\u0D7B \u0D05\u0D35\u0D28\u0D4D\u200D")).toBeNull();
    // Marks of other classes beside a virama's: a nukta (7), a kana voicing mark (8), a Hebrew point
    // (10), an acute (230), a vowel sign (0).
    for (const mark of ["\u093C", "\u3099", "\u05B0", "\u0301", "\u0940"]) {
      expect(misleadingCharacter(`\u0915${mark}\u200D\u0937`), mark).toBe("U+200D at character 3");
      expect(misleadingCharacter(`\u0915${mark}\u200C\u0937`), mark).toBe("U+200C at character 3");
    }
  });

  it("takes U+200C between letters of a joining script, marks between passed over", () => {
    expect(misleadingCharacter("\u0628\u064E\u200C\u0628")).toBeNull(); // Arabic, a fatha before
    expect(misleadingCharacter("\u0628\u200C\u0650\u0628")).toBeNull(); // a kasra after it
    expect(misleadingCharacter("\u0712\u200C\u0712")).toBeNull(); // Syriac
    expect(misleadingCharacter("\u07D3\u200C\u07D3")).toBeNull(); // N'Ko
    expect(misleadingCharacter("\u1820\u200C\u1821")).toBeNull(); // Mongolian
    expect(misleadingCharacter("\u{1E900}\u200C\u{1E901}")).toBeNull(); // Adlam
    // U+200D joins letters that join anyway: between them it only hides a difference.
    expect(misleadingCharacter("\u0628\u200D\u0628")).toBe("U+200D at character 2");
    // An Arabic digit or sign is no letter.
    expect(misleadingCharacter("\u0628\u200C\u0661")).toBe("U+200C at character 2");
    expect(misleadingCharacter("\u0661\u200C\u0628")).toBe("U+200C at character 2");
  });

  it("refuses joiners that show nothing: between letters of scripts that do not join, or after other marks", () => {
    expect(misleadingCharacter("\u6771\u200D\u4EAC")).toBe("U+200D at character 2"); // 東京
    expect(misleadingCharacter("\u6771\u200C\u4EAC")).toBe("U+200C at character 2");
    expect(misleadingCharacter("שלום\u200Cעולם")).toBe("U+200C at character 5");
    expect(misleadingCharacter("\u0E2A\u200C\u0E27")).toBe("U+200C at character 2"); // Thai, no virama
    expect(misleadingCharacter("\u0915\u200C\u0937")).toBe("U+200C at character 2"); // no virama
    expect(misleadingCharacter("pa\u0301\u200D\u0301yroll")).toBe("U+200D at character 4");
    expect(misleadingCharacter("\u0628\u200C\u200C\u0628")).toBe("U+200C at character 2");
    expect(misleadingCharacter("\u0915\u094D\u200D\u200D\u0937")).toBe("U+200D at character 4");
  });

  it("takes U+200D between two emoji, each with at most a variation selector and a skin tone", () => {
    expect(misleadingCharacter("\u{1F469}\u200D\u{1F4BB}")).toBeNull(); // 👩‍💻
    expect(misleadingCharacter("\u{1F469}\u{1F3FD}\u200D\u{1F4BB}")).toBeNull(); // 👩🏽‍💻
    expect(misleadingCharacter("\u{1F3F3}\uFE0F\u200D\u{1F308}")).toBeNull(); // 🏳️‍🌈
    expect(misleadingCharacter("\u{1F9D1}\u{1F3FB}\u200D\u{1F91D}\u200D\u{1F9D1}\u{1F3FF}")).toBeNull();
    expect(misleadingCharacter("\u2764\uFE0F\u200D\u{1F525}")).toBeNull(); // ❤️‍🔥
    // Two emoji of no sequence: it would take the table of recommended sequences to tell (see the rule).
    expect(misleadingCharacter("\u{1F525}\u200D\u{1F525}")).toBeNull();
    expect(misleadingCharacter("\u{1F469}\u{1F3FD}\u{1F3FD}\u200D\u{1F4BB}")).toBe("U+200D at character 4");
    // A second variation selector is refused before the joiner is looked at, and one after nothing.
    expect(misleadingCharacter("\u{1F469}\uFE0F\uFE0F\u200D\u{1F4BB}")).toBe("U+FE0F at character 3");
    expect(misleadingCharacter("\uFE0F\u200D\u{1F4BB}")).toBe("U+FE0F at character 1");
    expect(misleadingCharacter("\u{1F3FD}\u200D\u{1F4BB}")).toBe("U+200D at character 2");
    // U+200C joins no emoji sequence.
    expect(misleadingCharacter("\u{1F469}\u200C\u{1F4BB}")).toBe("U+200C at character 2");
  });

  it("passes over whitespace at the ends, which the input trims, and counts the place in the text as given", () => {
    expect(misleadingCharacter("  a\u202Eb")).toBe("U+202E at character 4");
    expect(misleadingCharacter("\t\uFEFF a\u200Bb")).toBe("U+200B at character 5");
    expect(misleadingCharacter("\tname\r\n")).toBeNull();
    expect(misleadingCharacter("\uFEFFname\u000B")).toBeNull();
    // Inside, they are refused.
    expect(misleadingCharacter("a\tb")).toBe("U+0009 at character 2");
    expect(misleadingCharacter(" a\uFEFFb ")).toBe("U+FEFF at character 3");
  });
});

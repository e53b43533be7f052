/**
 * The characters a text shown to operators (a project's name: the admin API's answers, the CLI's
 * output, logs) must not hold, as they make it show other than it is: control characters (C0, DEL,
 * C1: a terminal acts on ESC and CSI sequences) and the default ignorable characters, which a text
 * shows nothing for (Unicode's Default_Ignorable_Code_Point, as the running Node has it: no table to
 * keep): the bidirectional controls (U+200E, U+200F, U+061C, U+202A to U+202E, U+2066 to U+2069:
 * `invoice\u202Efdp.exe` shows as `invoiceexe.pdf`), the zero-width characters (U+200B to U+200D,
 * U+2060, U+FEFF: `pay\u200Broll` shows as `payroll`), and U+00AD, U+034F, U+115F, U+1160, U+17B4,
 * U+17B5, U+180B to U+180F, U+2061 to U+206F, U+3164, the variation selectors, U+FFA0, U+FFF0 to
 * U+FFF8, U+1BCA0 to U+1BCA3, U+1D173 to U+1D17A and U+E0000 to U+E0FFF (tags, variation selectors
 * 17 to 256): `pay\u00ADroll`, `pay\u3164roll`, `pay\u{E0061}roll` show as `payroll` too.
 */
const misleading = /^[\p{Cc}\p{Default_Ignorable_Code_Point}]$/u;
const anyMisleading = /[\p{Cc}\p{Default_Ignorable_Code_Point}]/u;

const zeroWidthNonJoiner = "\u200C";
const zeroWidthJoiner = "\u200D";

/**
 * Whether `mark` has Canonical_Combining_Class 9 (Virama): the Indic scripts' virama (U+094D, U+09CD,
 * U+0D4D and U+0D3B/U+0D3C, U+0DCA…), Thai's phinthu (U+0E3A), Myanmar's (U+1039, U+103A), Khmer's
 * coeng (U+17D2), Tibetan's, Brahmi's and the others, as the Unicode data of the running Node has
 * them (no table to keep). A regular expression has no property for the class, so it is read from
 * canonical ordering: NFD swaps two adjacent marks when the first's class is above the second's
 * (neither 0), so a mark of class 9 goes before U+3099 (class 8), and U+05B0 (class 10) before it.
 */
function virama(mark: string | undefined): boolean {
  const swapped = (first: string, second: string) => {
    const given = `a${first}${second}`;
    const normalized = given.normalize("NFD");
    return normalized !== given && normalized === `a${second}${first}`;
  };
  return (
    mark !== undefined && mark.normalize("NFD") === mark && swapped(mark, "\u3099") && swapped("\u05B0", mark)
  );
}

/**
 * Letters of the cursive scripts, whose letters join their neighbours (Joining_Type D, L or R in
 * Unicode's ArabicShaping.txt), and the marks that do not interrupt a joining (Joining_Type T: Mn,
 * Me). RFC 5892 takes U+200C between a letter joining to the left and one joining to the right; a
 * regular expression has no Joining_Type property, so any letter of these scripts stands for one:
 * one joining on one side only (an alef before, a hamza after) passes too, U+200C changing nothing
 * there.
 */
const joiningScriptLetter =
  /^(?=\p{L})[\p{Script=Arabic}\p{Script=Syriac}\p{Script=Nko}\p{Script=Mandaic}\p{Script=Mongolian}\p{Script=Phags_Pa}\p{Script=Manichaean}\p{Script=Psalter_Pahlavi}\p{Script=Hanifi_Rohingya}\p{Script=Sogdian}\p{Script=Chorasmian}\p{Script=Old_Uyghur}\p{Script=Adlam}]$/u;
const transparentMark = /^[\p{Mn}\p{Me}]$/u;

/** An emoji, and what may follow one before the joiner of an emoji ZWJ sequence (UTS #51 §2.3). */
const pictographic = /^\p{Extended_Pictographic}$/u;
const skinTone = /^[\u{1F3FB}-\u{1F3FF}]$/u;

/**
 * Whether the joiner at `index` of `characters` does what its writing uses it for, by RFC 5892's
 * ContextJ rules (Appendix A.1, A.2) and UTS #51's emoji ZWJ sequences:
 * - U+200C or U+200D right after a virama: a conjunct shown apart (`क्‌ष`) or half (`ශ්‍රී`, Sinhala);
 * - U+200C between two letters of a cursive joining script, marks between passed over: a joining
 *   broken (`می‌خواهم`, Persian);
 * - U+200D between two emoji, the first followed by at most U+FE0F and one skin tone (`👩🏽‍💻`,
 *   `🏳️‍🌈`). Any two emoji pass: telling a recommended sequence from two emoji shown side by side
 *   (`🔥‍🔥` as `🔥🔥`) would take Unicode's table of them (emoji-zwj-sequences.txt), which Node lacks.
 * Anywhere else one changes nothing shown, and only hides a difference (`東‍京` as `東京`).
 */
function joinsItsWriting(characters: readonly string[], index: number): boolean {
  const joiner = characters[index];
  if (virama(characters[index - 1])) return true;
  if (joiner === zeroWidthNonJoiner) {
    let before = index - 1;
    while (transparentMark.test(characters[before] ?? "")) before--;
    let after = index + 1;
    while (transparentMark.test(characters[after] ?? "")) after++;
    return (
      joiningScriptLetter.test(characters[before] ?? "") && joiningScriptLetter.test(characters[after] ?? "")
    );
  }
  let emoji = index - 1;
  if (skinTone.test(characters[emoji] ?? "")) emoji--;
  if (characters[emoji] === "\uFE0F") emoji--;
  return pictographic.test(characters[emoji] ?? "") && pictographic.test(characters[index + 1] ?? "");
}

/**
 * What a variation selector or the like may follow, where its writing uses one:
 * - U+FE0E or U+FE0F (text or emoji style) right after an emoji (the Emoji property) other than an
 *   ASCII one, or U+FE0F between `0` to `9`, `#` or `*` and U+20E3 (a keycap, `1️⃣`): after an ASCII
 *   digit alone it changes nothing shown (`v1\uFE0F` as `v1`);
 * - U+FE00 to U+FE0D right after a symbol or a letter of a script other than Latin, Greek and
 *   Cyrillic, not ASCII: Unicode's standardized variation sequences (StandardizedVariants.txt,
 *   which Node lacks) take them after math symbols, CJK compatibility ideographs' unified forms,
 *   Myanmar, Phags-pa and Manichaean letters, Egyptian hieroglyphs; the letters of names written in
 *   Latin, Greek or Cyrillic have none (`caf\u00E9\uFE00` shows as `café`);
 * - U+E0100 to U+E01EF (ideographic variation selectors, the Ideographic Variation Database's
 *   sequences) right after a Han character;
 * - U+180B to U+180F (Mongolian free variation selectors, and U+180E, the vowel separator) right
 *   after a Mongolian letter.
 */
const emojiStyle = /^[\uFE0E\uFE0F]$/u;
const emoji = /^(?!\p{ASCII})\p{Emoji}$/u;
const keycapBase = /^[0-9#*]$/u;
const keycap = "\u20E3";
const standardizedSelector = /^[\uFE00-\uFE0D]$/u;
const standardizedBase =
  /^(?=[\p{L}\p{S}])(?![\p{ASCII}\p{Script=Latin}\p{Script=Greek}\p{Script=Cyrillic}])\P{Default_Ignorable_Code_Point}$/u;
const ideographicSelector = /^[\u{E0100}-\u{E01EF}]$/u;
const han = /^\p{Script=Han}$/u;
const mongolianSelector = /^[\u180B-\u180F]$/u;
const mongolianLetter = /^(?=\p{L})\p{Script=Mongolian}$/u;

/**
 * Tag characters are taken only in an emoji flag tag sequence (UTS #51 §2.8: `🏴󠁧󠁢󠁳󠁣󠁴󠁿`, Scotland):
 * U+1F3F4, the tags of a subdivision id (unicode_subdivision_id: 3 to 7 tag digits and lower-case tag
 * letters, `gbsct`) and U+E007F (cancel tag). Whatever else tags spell shows nothing.
 */
const tagSpec = /^[\u{E0030}-\u{E0039}\u{E0061}-\u{E007A}]$/u;
const blackFlag = "\u{1F3F4}";
const cancelTag = "\u{E007F}";
function inFlagTagSequence(characters: readonly string[], index: number): boolean {
  let start = index;
  while (tagSpec.test(characters[start - 1] ?? "")) start--;
  let end = index;
  while (tagSpec.test(characters[end] ?? "")) end++;
  return (
    characters[start - 1] === blackFlag &&
    characters[end] === cancelTag &&
    end - start >= 3 &&
    end - start <= 7
  );
}

/** Whether the default ignorable character at `index` of `characters` does what its writing uses it for. */
function writingUses(characters: readonly string[], index: number): boolean {
  const character = characters[index] as string;
  const before = characters[index - 1] ?? "";
  if (character === zeroWidthNonJoiner || character === zeroWidthJoiner)
    return joinsItsWriting(characters, index);
  if (emojiStyle.test(character))
    return (
      emoji.test(before) ||
      (character === "\uFE0F" && keycapBase.test(before) && characters[index + 1] === keycap)
    );
  if (standardizedSelector.test(character)) return standardizedBase.test(before);
  if (ideographicSelector.test(character)) return han.test(before);
  if (mongolianSelector.test(character)) return mongolianLetter.test(before);
  if (character === cancelTag || tagSpec.test(character)) return inFlagTagSequence(characters, index);
  return false;
}

/**
 * The first character of `text` that makes it show other than it is (see `misleading`, and
 * `writingUses` for where writing needs one), as a problem names it, `U+202E at character 8`
 * (counted in code points from 1, in `text` as given), or null when it holds none. Whitespace at its
 * ends (a tab, a byte order mark), which the input trims, is passed over. The character itself is
 * never quoted: it would act where the problem is shown.
 */
export function misleadingCharacter(text: string): string | null {
  if (!anyMisleading.test(text)) return null;
  const characters = Array.from(text);
  // What String.prototype.trim removes is whitespace of one UTF-16 unit each: a character each.
  const [first, end] = [
    text.length - text.trimStart().length,
    characters.length - (text.length - text.trimEnd().length),
  ];
  for (let index = first; index < end; index++) {
    const character = characters[index] as string;
    if (!misleading.test(character) || writingUses(characters, index)) continue;
    const code = character.codePointAt(0) as number;
    return `U+${code.toString(16).toUpperCase().padStart(4, "0")} at character ${index + 1}`;
  }
  return null;
}

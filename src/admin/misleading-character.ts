/**
 * The characters a text shown to operators (a project's name: the admin API's answers, the CLI's
 * output, logs) must not hold, as they make it show other than it is: control characters (C0, DEL,
 * C1: a terminal acts on ESC and CSI sequences), bidirectional controls (U+200E, U+200F, U+061C,
 * U+202A to U+202E, U+2066 to U+2069: `invoice\u202Efdp.exe` shows as `invoiceexe.pdf`)
 * and zero-width characters (U+200B to U+200D, U+2060, U+FEFF: `pay\u200Broll` shows as `payroll`).
 */
const misleading = (code: number) =>
  code <= 0x1f ||
  (code >= 0x7f && code <= 0x9f) ||
  code === 0x061c ||
  (code >= 0x200b && code <= 0x200f) ||
  (code >= 0x202a && code <= 0x202e) ||
  code === 0x2060 ||
  (code >= 0x2066 && code <= 0x2069) ||
  code === 0xfeff;

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
 * The first character of `text` that makes it show other than it is (see `misleading`), as a
 * problem names it, `U+202E at character 8` (counted in code points from 1, in `text` as given),
 * or null when it holds none. Whitespace at its ends (a tab, a byte order mark), which the input
 * trims, is passed over. The character itself is never quoted: it would act where the problem is
 * shown.
 */
export function misleadingCharacter(text: string): string | null {
  // Each such character is one UTF-16 unit: a text without one is passed over unit by unit.
  let found = false;
  for (let unit = 0; unit < text.length && !found; unit++) found = misleading(text.charCodeAt(unit));
  if (!found) return null;
  const characters = Array.from(text);
  // What String.prototype.trim removes is whitespace of one UTF-16 unit each: a character each.
  const [first, end] = [
    text.length - text.trimStart().length,
    characters.length - (text.length - text.trimEnd().length),
  ];
  for (let index = first; index < end; index++) {
    const character = characters[index] as string;
    const code = character.codePointAt(0) as number;
    if (!misleading(code)) continue;
    if (
      (character === zeroWidthNonJoiner || character === zeroWidthJoiner) &&
      joinsItsWriting(characters, index)
    )
      continue;
    return `U+${code.toString(16).toUpperCase().padStart(4, "0")} at character ${index + 1}`;
  }
  return null;
}

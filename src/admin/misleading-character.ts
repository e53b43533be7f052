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

const zeroWidthNonJoiner = 0x200c;
const zeroWidthJoiner = 0x200d;

/**
 * Letters and marks of the scripts that write U+200C and U+200D inside words (Arabic and Persian,
 * the Indic scripts after a virama, and others), as RFC 5892's ContextJ rules allow them; not those
 * of Latin, Greek and Cyrillic, which have no use for them and where they only hide a difference.
 */
const joiningLetter = /^[\p{L}\p{M}]$/u;
const nonJoiningScript = /^[\p{Script=Latin}\p{Script=Greek}\p{Script=Cyrillic}]$/u;
const writtenWithJoiners = (character: string | undefined) =>
  character !== undefined && joiningLetter.test(character) && !nonJoiningScript.test(character);

/** An emoji, and what may follow one before the joiner of an emoji ZWJ sequence (UTS #51 §2.3). */
const pictographic = /^\p{Extended_Pictographic}$/u;
const emojiSuffix = /^[\u{FE0F}\u{1F3FB}-\u{1F3FF}]$/u;

/**
 * Whether the joiner at `index` of `characters` joins what its writing joins: U+200C or U+200D
 * between two letters or marks of a script that writes them (`می‌خواهم`, Persian), or U+200D
 * between two emoji, a variation selector or skin tone after the first (`👩🏽‍💻`).
 */
function joinsItsWriting(characters: readonly string[], index: number): boolean {
  const [before, after] = [characters[index - 1], characters[index + 1]];
  if (writtenWithJoiners(before) && writtenWithJoiners(after)) return true;
  if (characters[index] !== String.fromCodePoint(zeroWidthJoiner) || after === undefined) return false;
  let emoji = index - 1;
  while (emoji > 0 && emojiSuffix.test(characters[emoji] as string)) emoji--;
  return emoji >= 0 && pictographic.test(characters[emoji] as string) && pictographic.test(after);
}

/**
 * The first character of `text` that makes it show other than it is (see `misleading`), as a
 * problem names it, `U+202E at character 8` (counted in code points from 1), or null when it holds
 * none. The character itself is never quoted: it would act where the problem is shown.
 */
export function misleadingCharacter(text: string): string | null {
  // Each such character is one UTF-16 unit: a text without one is passed over unit by unit.
  let found = false;
  for (let unit = 0; unit < text.length && !found; unit++) found = misleading(text.charCodeAt(unit));
  if (!found) return null;
  const characters = Array.from(text);
  for (const [index, character] of characters.entries()) {
    const code = character.codePointAt(0) as number;
    if (!misleading(code)) continue;
    if ((code === zeroWidthNonJoiner || code === zeroWidthJoiner) && joinsItsWriting(characters, index))
      continue;
    return `U+${code.toString(16).toUpperCase().padStart(4, "0")} at character ${index + 1}`;
  }
  return null;
}

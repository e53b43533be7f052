/**
 * The forms of the credentials a client may type in the wrong place (where a project id goes in a
 * path, say): provider C's API keys (`AIza` and 35 more characters), provider A's (`sk-…`,
 * `sk-proj-…`) and B's (`sk-ant-…`), and Sluice's own partial keys (`sk_sluice_…`) and test keys
 * (`tk_…`). A value has that form when one of those starts is followed by at least 28 of the
 * characters these keys are made of (letters, digits, `-` and `_`): every such key has 35 or more,
 * and a name such as `sk-demo-project` is not taken for one.
 */
const keyForm = "(?:AIza|sk-|sk_|tk_)[A-Za-z0-9_-]{28}";
const keyAtStart = new RegExp(`^${keyForm}`);
/**
 * A key's form inside a text: not the tail of a longer word (`task_…`), and as far as it runs. One
 * behind a percent-encoded character is at a word's start all the same (`Bearer%20sk_…`, `%22sk-…`,
 * `%3Fkey%3DAIza…`, encoded twice `%2522sk-…`): a path keeps its percent-encoding, and the escape's
 * last hex digit is no letter of the word the key follows. So is one behind an escape a client
 * copied with it out of a JSON string or a shell (`\nsk-…`, `\u0022sk-…`, `\x22sk-…`, and these
 * percent-encoded, `%5Cn`, once or twice): the escape's letter is no letter of a word either. A `.` right after it and what follows in base64's alphabet
 * (`/`, `+` and `=` as they are or percent-encoded) are taken with it: a DeviceCheck Bearer value,
 * `partial key.device token`, whose token has no form of its own (a client pasting its credential
 * into a path left the token whole in the access line).
 */
const escapeBefore = String.raw`(?:\\|%(?:25)?5[Cc])(?:[bfnrtv0]|u[0-9A-Fa-f]{4}|x[0-9A-Fa-f]{2})`;
const keyInText = new RegExp(
  `(?:(?<![A-Za-z0-9_-])|(?<=%(?:25)?[0-9A-Fa-f]{2})|(?<=${escapeBefore}))${keyForm}[A-Za-z0-9_-]*(?:\\.(?:[A-Za-z0-9+/=_-]|%[0-9A-Fa-f]{2})+)?`,
  "g",
);

/** Whether `value` begins with a key's form (see `keyForm`). */
export function looksLikeKey(value: string): boolean {
  return keyAtStart.test(value);
}

const keyAnywhere = new RegExp(keyForm);

/**
 * Whether a key's form starts anywhere in `value`, even run into a word before it: a flag's name
 * a key was typed into (`--api-keysk-proj-…`, the space forgotten).
 */
export function holdsKeyForm(value: string): boolean {
  return keyAnywhere.test(value);
}

/**
 * `text` with every run of a key's form in it replaced by `censor` (or what it answers for the run).
 * A text with none of the starts is returned as it is, without a regular expression run.
 */
export function redactKeyLike(text: string, censor: string | ((run: string) => string)): string {
  if (!(text.includes("AIza") || text.includes("sk-") || text.includes("sk_") || text.includes("tk_")))
    return text;
  // Two calls, one per overload of `replace`: it takes a string or a function, not either.
  return typeof censor === "string" ? text.replace(keyInText, censor) : text.replace(keyInText, censor);
}

/**
 * A run of base64 (as it is, or with its `+`, `/` and `=` percent-encoded) of at least 200
 * characters, not the tail of a longer one: a DeviceCheck device token (base64 of 2 to 3 KB) a
 * client pasted into a path or a query without the partial key that gives it a key's form, or any
 * other long secret in base64 (a JWT's part, a key's PEM line run together). No path a route or a
 * provider uses has such a run: `-`, `_`, `.` and `:` break model names and ids into short ones.
 * Its `=` only at its end, so that a query's `name=` is not taken in. One behind a percent-escape
 * that is none of its own (`%22` of a token pasted quoted, `%20`, `%3D`, `%5C` of an escape) begins
 * after it, as a key's form does (`keyInText`): the escape's hex digits are no part of it.
 */
const longBase64 =
  /(?:(?<![A-Za-z0-9+/%])|(?<=%(?!2[BbFf])[0-9A-Fa-f]{2}))(?:[A-Za-z0-9+/]|%2[BbFf]){200,}(?:=|%3[Dd]){0,2}/g;

/**
 * The path's own words a run of base64 in a path begins or ends with (`a/p/` of
 * `/v1/provider-a/p/<token>`, `/chat/completions` after a token in the project id's place): short,
 * lower case and digits, each before or after a `/`. A token's first or last characters are kept
 * with them only when they are such a word too, a few of its thousands.
 */
const pathWordsBefore = /^(?:[a-z0-9]{1,15}(?:\/|%2[Ff]))*/;
/**
 * The words after, read on the run reversed (`/chat` as `tahc/`, `%2F` as `F2%`): anchored at its
 * start, the search reads the run once. Anchored at the end instead (`…$`), it was tried from every
 * `/` and read to the end each time: quadratic in a run of short words (`/A/a/a…/a/A`).
 */
const pathWordsAfterReversed = /^(?:[a-z0-9]{1,15}(?:\/|[Ff]2%))*/;

/**
 * `text` with every long run of base64 in it (`longBase64`), but the path's words it begins and ends
 * with (`pathWordsBefore`, `pathWordsAfterReversed`), replaced by `censor`, when it mixes upper and lower case letters and digits, as
 * random bytes do (`/aaa…`, a client's probe of the path's length, is kept). A text shorter than a
 * run is returned as it is, without a regular expression run.
 */
export function redactLongBase64(text: string, censor: string): string {
  if (text.length < 200) return text;
  return text.replace(longBase64, (run) => {
    const before = pathWordsBefore.exec(run)?.[0] ?? "";
    const reversed = run.slice(before.length).split("").reverse().join("");
    const afterLength = pathWordsAfterReversed.exec(reversed)?.[0].length ?? 0;
    const after = run.slice(run.length - afterLength);
    const rest = run.slice(before.length, run.length - afterLength);
    return rest.length >= 200 && /[a-z]/.test(rest) && /[A-Z]/.test(rest) && /[0-9]/.test(rest)
      ? before + censor + after
      : run;
  });
}

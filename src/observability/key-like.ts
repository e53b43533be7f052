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
 * `%3Fkey%3DAIza…`): a path keeps its percent-encoding, and the escape's last hex digit is no
 * letter of the word the key follows. A `.` right after it and what follows in base64's alphabet
 * (`/`, `+` and `=` as they are or percent-encoded) are taken with it: a DeviceCheck Bearer value,
 * `partial key.device token`, whose token has no form of its own (a client pasting its credential
 * into a path left the token whole in the access line).
 */
const keyInText = new RegExp(
  `(?:(?<![A-Za-z0-9_-])|(?<=%[0-9A-Fa-f]{2}))${keyForm}[A-Za-z0-9_-]*(?:\\.(?:[A-Za-z0-9+/=_-]|%[0-9A-Fa-f]{2})+)?`,
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

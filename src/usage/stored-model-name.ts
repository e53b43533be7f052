import { detachedString } from "../detached-string.js";

/** Longer than any model name (the admin input allows 200 characters); what a row keeps at most. */
const maxStoredLength = 200;
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const controlCharacter = /[\x00-\x1f\x7f]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const controlCharacters = /[\x00-\x1f\x7f]/g;
/** A surrogate not in a pair (with `u`, a pair is one character and matches no range of these). */
const loneSurrogate = /[\ud800-\udfff]/u;
const loneSurrogates = /[\ud800-\udfff]/gu;

/**
 * A model name as a usage row stores it. The name comes from the caller's body (for a failed call's
 * row) or from the provider's answer, so it may hold anything: a NUL, which
 * PostgreSQL text refuses (the row would be dropped as refused, on PostgreSQL only), or a name of
 * any length. Control characters become `?` and the name is cut at 200 characters, on both engines.
 * A surrogate not in a pair (named by the JSON, or half of one the cut split) becomes U+FFFD, as
 * PostgreSQL stores it: SQLite stored its bytes as no UTF-8 has them (ED A0 80), sorted among them
 * before U+E000 but read back as U+FFFD, after it, so a report's pages, cut in one order and read on
 * in the other, skipped groups (decision 0026).
 * The name is a copy: a row may wait in the queue through an outage (SLUICE_USAGE_QUEUE_MAX rows),
 * and a name cut from a body or a request line would keep all of it (see detachedString).
 */
export function storedModelName(model: string | null): string | null {
  if (model === null) return null;
  const text = detachedString(model.length > maxStoredLength ? model.slice(0, maxStoredLength) : model);
  const named = controlCharacter.test(text) ? text.replace(controlCharacters, "?") : text;
  return loneSurrogate.test(named) ? named.replace(loneSurrogates, "\ufffd") : named;
}

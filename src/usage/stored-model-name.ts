import { detachedString } from "../detached-string.js";

/** Longer than any model name (the admin input allows 200 characters); what a row keeps at most. */
const maxStoredLength = 200;
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const controlCharacter = /[\x00-\x1f\x7f]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: finding control characters is the point
const controlCharacters = /[\x00-\x1f\x7f]/g;

/**
 * A model name as a usage row stores it. The name comes from the caller's body (read as latin1,
 * for a failed call's row) or from the provider's answer, so it may hold anything: a NUL, which
 * PostgreSQL text refuses (the row would be dropped as refused, on PostgreSQL only), or a name of
 * any length. Control characters become `?` and the name is cut at 200 characters, on both engines.
 * The name is a copy: a row may wait in the queue through an outage (SLUICE_USAGE_QUEUE_MAX rows),
 * and a name cut from a body or a request line would keep all of it (see detachedString).
 */
export function storedModelName(model: string | null): string | null {
  if (model === null) return null;
  const text = detachedString(model.length > maxStoredLength ? model.slice(0, maxStoredLength) : model);
  return controlCharacter.test(text) ? text.replace(controlCharacters, "?") : text;
}

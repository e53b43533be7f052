import { GatewayError } from "../errors.js";
import { holdsKeyForm, looksLikeKey } from "../observability/key-like.js";
import { quotedStart } from "../quoted-start.js";

/**
 * The form of a project id, given or generated (`prj_…`). It has no schema library behind it: the
 * gateway checks ids on every call and loads none at start (docs/decisions/0005).
 */
export const projectIdPattern = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;
export const projectIdRule = "must match ^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$";

/**
 * Whether an id that names no project may be a secret typed in its place: one longer than any
 * project id (a key of any form), or one with the form of a provider key or a Sluice credential
 * (`looksLikeKey`: provider C's keys have 39 characters, provider A's older ones 51). Such an id is
 * never shown whole, in an answer, a usage row or the log (whose redaction takes the second kind;
 * the access line shows a route's id of either kind by its start and length), nor kept whole as a
 * key of the failed-authentication throttle (in Redis, whose append-only file is written to disk).
 */
export function mayBeKey(id: string): boolean {
  return id.length > 64 || looksLikeKey(id);
}

/** An id that names no project as a message quotes it: whole, or its start and length (`quotedStart`). */
export function projectIdQuoted(id: string): string {
  return valueQuoted(id);
}

/** The 404 for an id that names no project (a route's, a credential's, the admin API's). */
export function projectNotFound(id: string): GatewayError {
  return new GatewayError("PROJECT_NOT_FOUND", `Project ${projectIdQuoted(id)} does not exist`);
}

/**
 * A value given in the wrong place (a CLI flag's value it refuses) as a message quotes it: whole,
 * or its start and length when it may be a key pasted there (`mayBeKey`), or holds one anywhere
 * (`holdsKeyForm`: pasted with its quotes, after a space, as `Bearer …`).
 */
export function valueQuoted(value: string): string {
  return mayBeKey(value) || holdsKeyForm(value) ? quotedStart(value) : JSON.stringify(value);
}

/**
 * An id that names no project as a usage row records it: in printable ASCII (`?` for anything
 * else: PostgreSQL refuses a NUL, and the whole batch with it), only its start and length
 * (`AIza… (39 characters)`) when it may be a key, and `[redacted]`, as the log writes it, when
 * `isSecret` finds one of the gateway's configured secrets in it (`configuredSecretHeld`): those
 * have no form to tell them by, and their start would be a piece of them.
 */
export function projectIdRecorded(id: string, isSecret: (id: string) => boolean = () => false): string {
  const printable = (text: string) => text.replace(/[^\x20-\x7e]/g, "?");
  if (isSecret(id)) return "[redacted]";
  return mayBeKey(id) ? `${printable(id.slice(0, 4))}… (${id.length} characters)` : printable(id);
}

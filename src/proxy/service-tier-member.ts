import { skipSpaces, stringEnd, valueEnd } from "../providers/json-bytes.js";

/**
 * Provider A's `service_tier`: the tier that served the call, which its answer names at the top
 * level of the completion or response object, beside (not inside) the usage object. A chat
 * completion and each chat chunk hold it after the usage object; a Responses API object before it
 * (after its `output`), and a stream's `response.completed` event inside its `response` member.
 *
 * It is found without parsing the answer: from the last bytes `"service_tier"` back (inside a string
 * its quotes would be escaped, so these bytes are a key), each string-valued one is taken only when
 * the object it belongs to is the answer's own: walking on from its value over the members that
 * follow (each value skipped whole), the text closes at most `depth` objects beyond it and then
 * ends, with no array on the way. A key of that name in the app's own `metadata`, a prompt's
 * variables or a tool's schema is nested deeper, and is passed over. Only the bytes after each
 * candidate are read, for at most `maxWalks` candidates: an answer with more string-valued keys of
 * that name after its own is `unreadable`.
 *
 * `depth` is 0 for a JSON body (the answer is the body) and 1 for an SSE event's data (a chat chunk
 * is the event; a Responses API event holds the response in a member). `body` may be a body's last
 * bytes (a body over the meter's cap): what precedes them is not needed. Returns the member's value
 * (a string), undefined when the answer has no such member (or it is no string: `null`, when the API
 * names no tier), `unreadable` when it could not be told.
 */
export function serviceTierMember(body: Buffer, depth: 0 | 1): string | undefined | typeof unreadable {
  let walks = 0;
  for (let at = body.lastIndexOf(key); at >= 0; at = at === 0 ? -1 : body.lastIndexOf(key, at - 1)) {
    // An escaped quote would open no key: `\"service_tier"` ends a string that begins earlier.
    if (at > 0 && body[at - 1] === 0x5c /* \ */) continue;
    const colon = skipSpaces(body, at + key.length);
    if (body[colon] !== 0x3a /* : */) continue;
    const value = skipSpaces(body, colon + 1);
    if (body[value] !== 0x22 /* " */) continue;
    const end = stringEnd(body, value);
    if (end < 0) continue;
    if (++walks > maxWalks) return unreadable;
    if (!closesThenEnds(body, end, depth)) continue;
    const text = body.toString("utf8", value + 1, end - 1);
    // A tier's name has no escapes; one that has them is read as JSON reads it.
    return text.includes("\\") ? parsedString(body.toString("utf8", value, end)) : text;
  }
  return undefined;
}

/** What an answer whose `service_tier` could not be told says: priced as no tier known (`other`). */
export const unreadable = Symbol("unreadable service tier");

const key = Buffer.from('"service_tier"');
const maxWalks = 8;

/**
 * Whether, from `at` (just past a member's value), the text holds only more members of the same
 * object, its closing brace, and then at most `depth` more objects closing the same way, up to its
 * end.
 */
function closesThenEnds(body: Buffer, from: number, depth: number): boolean {
  let closed = 0;
  let at = skipSpaces(body, from);
  while (at < body.length) {
    const byte = body[at];
    if (byte === 0x7d /* } */) {
      if (++closed > depth + 1) return false;
      at = skipSpaces(body, at + 1);
      continue;
    }
    if (byte !== 0x2c /* , */) return false;
    // Another member: a key, a colon and a value, skipped whole.
    const name = skipSpaces(body, at + 1);
    if (body[name] !== 0x22) return false;
    const nameEnd = stringEnd(body, name);
    if (nameEnd < 0) return false;
    const colon = skipSpaces(body, nameEnd);
    if (body[colon] !== 0x3a) return false;
    const value = skipSpaces(body, colon + 1);
    const end = valueEnd(body, value);
    if (end <= value) return false;
    at = skipSpaces(body, end);
  }
  return closed >= 1;
}

function parsedString(json: string): string | undefined {
  try {
    const value: unknown = JSON.parse(json);
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

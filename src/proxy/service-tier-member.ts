import { stringStart } from "../providers/json-bytes.js";

/**
 * Provider A's `service_tier`: the tier that served the call, which its answer names at the top
 * level of the completion or response object, beside (not inside) the usage object. A chat
 * completion and each chat chunk hold it after the usage object; a Responses API object before it
 * (after its `output`), and a stream's `response.completed` event inside its `response` member.
 *
 * It is found without parsing the answer, in one pass from its end back: going back, each closing
 * brace or bracket opens a level and its opening one leaves it, and a string is stepped over whole
 * (outside a string every quote is one unless an odd run of backslashes escapes it). The member
 * taken is the last string-valued `"service_tier"` key whose object is the answer's own: within at
 * most `depth` objects beyond it, all objects, no array on the way. A key of that name in the app's
 * own `metadata`, a prompt's variables or a tool's schema is nested deeper, and is passed over,
 * however many there are: each byte is read once.
 *
 * `depth` is 0 for a JSON body (the answer is the body) and 1 for an SSE event's data (a chat chunk
 * is the event; a Responses API event holds the response in a member). `body` may be a body's last
 * bytes (a body over the meter's cap): what precedes them is not needed, and is never reached when
 * the member is in them. Returns the member's value (a string), undefined when the answer has no
 * such member (or it is no string: `null`, when the API names no tier).
 *
 * `usage` is the usage object the caller found (lastUsageObject: the offsets of its braces). The
 * pass steps over it whole when it reaches its closing brace: a stream's last chat chunk names its
 * tier before its usage, which is most of the chunk. The answer's own member is never inside it (a
 * key there is the usage object's, not the answer's).
 */
export function serviceTierMember(
  body: Buffer,
  depth: 0 | 1,
  usage?: { start: number; end: number } | null,
): string | undefined {
  // (-1: nothing to step over.)
  const usageEnd = usage ? usage.end : -1;
  // Before the first key of that name there is nothing to find. A chat completion names its tier
  // in its last bytes, and a chat chunk in the bytes before its usage: either is found before that
  // key is looked for; past them, the search (a native call that costs more than those bytes read
  // here) bounds the pass, and an answer without the key (an embeddings list, say) is read no
  // further.
  const searchFrom = (usage ? usage.start : body.length) - nearEnd;
  let first = -1;
  /** The closing bytes met going back whose opening ones are not met yet: the levels around `at`. */
  const levels: number[] = [];
  /** Objects among `levels` (the others are arrays). */
  let objects = 0;
  // The string value just after `:` (going forward), while the key before it is awaited, and the
  // string met last going back, while it is the token right after the one being read: their
  // opening quote's offset (-1: none) and the offset past their closing one. (Numbers, not
  // objects: this runs on every answer of provider A.)
  let valueStart = -1;
  let valueEnd = 0;
  let lastStart = -1;
  let lastEnd = 0;
  let at = body.length - 1;
  while (at >= 0 && at >= first) {
    if (first < 0 && at < searchFrom) {
      first = body.indexOf(key);
      if (first < 0 || at < first) return undefined;
    }
    const byte = body[at] as number;
    if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) {
      at--;
      continue;
    }
    if (byte === 0x22 /* " */) {
      const start = stringStart(body, at);
      if (start < 0) return undefined;
      if (valueStart >= 0) {
        // A key, with a string for its value.
        if (
          levels.length >= 1 &&
          levels.length <= depth + 1 &&
          objects === levels.length &&
          isKey(body, start, at + 1)
        ) {
          const text = body.toString("utf8", valueStart + 1, valueEnd - 1);
          // A tier's name has no escapes; one that has them is read as JSON reads it.
          return text.includes("\\") ? parsedString(body.toString("utf8", valueStart, valueEnd)) : text;
        }
        valueStart = -1;
        lastStart = -1;
      } else {
        lastStart = start;
        lastEnd = at + 1;
      }
      at = start - 1;
      continue;
    }
    if (byte === 0x3a /* : */) {
      // The string after it (if that was the token after it) is a member's value.
      valueStart = lastStart;
      valueEnd = lastEnd;
      lastStart = -1;
      at--;
      continue;
    }
    valueStart = -1;
    lastStart = -1;
    if (at === usageEnd && usage) {
      // A whole object: the levels around it are those after it.
      at = usage.start - 1;
      continue;
    }
    if (byte === 0x7d /* } */ || byte === 0x5d /* ] */) {
      levels.push(byte);
      if (byte === 0x7d) objects++;
    } else if (byte === 0x7b /* { */ || byte === 0x5b /* [ */) {
      // An opening byte with no level open: not the text of one JSON value.
      const closing = levels.pop();
      if (closing === undefined) return undefined;
      if (closing === 0x7d) objects--;
    }
    // A comma, or a byte of a number, true, false or null: nothing to note.
    at--;
  }
  return undefined;
}

/** Whether the string from `start` to `end` (its quotes included) is the key's, byte for byte. */
function isKey(body: Buffer, start: number, end: number): boolean {
  if (end - start !== key.length) return false;
  for (let index = 0; index < key.length; index++) if (body[start + index] !== key[index]) return false;
  return true;
}

const key = Buffer.from('"service_tier"');
/** The bytes at an answer's end read before the key is searched for. */
const nearEnd = 256;

function parsedString(json: string): string | undefined {
  try {
    const value: unknown = JSON.parse(json);
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

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
 */
export function serviceTierMember(body: Buffer, depth: 0 | 1): string | undefined {
  /** The closing bytes met going back whose opening ones are not met yet: the levels around `at`. */
  const levels: number[] = [];
  /** Objects among `levels` (the others are arrays). */
  let objects = 0;
  /** The string value just after `:` (going forward), while the key before it is awaited. */
  let valueAfterColon: { start: number; end: number } | null = null;
  /** The string met last going back, while it is the token right after the one being read. */
  let lastString: { start: number; end: number } | null = null;
  // Before the first key of that name there is nothing to find: an answer without one (an
  // embeddings list, say) is not read at all.
  const first = body.indexOf(key);
  if (first < 0) return undefined;
  let at = body.length - 1;
  while (at >= first) {
    const byte = body[at] as number;
    if (byte === 0x20 || byte === 0x0a || byte === 0x0d || byte === 0x09) {
      at--;
      continue;
    }
    if (byte === 0x22 /* " */) {
      const start = stringStart(body, at);
      if (start < 0) return undefined;
      const string = { start, end: at + 1 };
      if (valueAfterColon !== null) {
        // A key, with a string for its value.
        if (
          levels.length >= 1 &&
          levels.length <= depth + 1 &&
          objects === levels.length &&
          body.subarray(string.start, string.end).equals(key)
        ) {
          const text = body.toString("utf8", valueAfterColon.start + 1, valueAfterColon.end - 1);
          // A tier's name has no escapes; one that has them is read as JSON reads it.
          return text.includes("\\")
            ? parsedString(body.toString("utf8", valueAfterColon.start, valueAfterColon.end))
            : text;
        }
        valueAfterColon = null;
        lastString = null;
      } else lastString = string;
      at = start - 1;
      continue;
    }
    if (byte === 0x3a /* : */) {
      // The string after it (if that was the token after it) is a member's value.
      valueAfterColon = lastString;
      lastString = null;
      at--;
      continue;
    }
    valueAfterColon = null;
    lastString = null;
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

const key = Buffer.from('"service_tier"');

/**
 * The offset of the quote that opens the string whose closing quote is at `close`; -1 when the
 * text before it holds none (a body's last bytes that begin inside a string). A quote inside a
 * string is escaped, an odd run of backslashes before it; the opening one has none.
 */
function stringStart(body: Buffer, close: number): number {
  let at = close - 1;
  while (at >= 0) {
    const quote = body.lastIndexOf(0x22 /* " */, at);
    if (quote < 0) return -1;
    let backslashes = 0;
    while (quote - 1 - backslashes >= 0 && body[quote - 1 - backslashes] === 0x5c /* \ */) backslashes++;
    if (backslashes % 2 === 0) return quote;
    at = quote - 1;
  }
  return -1;
}

function parsedString(json: string): string | undefined {
  try {
    const value: unknown = JSON.parse(json);
    return typeof value === "string" ? value : undefined;
  } catch {
    return undefined;
  }
}

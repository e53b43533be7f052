/**
 * The top-level `id`, `object`, `status`, `background` and `created_at` of a provider A Responses API
 * object (or of a Batch API object, which has no `background`), read without parsing it: a scan
 * that walks the object's members at depth one and skips every nested value, so the same names
 * inside it (`id` and `status` on every output item, `background` on the image-generation tool in
 * `tools`) are never taken for the response's own. Only the first 4 KiB are read, where the API puts
 * these fields (a response's right after `object`); a field beyond them, or cut by them, is null.
 */
export interface ResponseObjectFields {
  id: string | null;
  /** The object's type: `response`, `batch`. */
  object: string | null;
  status: string | null;
  background: boolean | null;
  /** Unix seconds, as the API reports it. */
  createdAt: number | null;
}

const scanLimit = 4096;
const quote = 0x22;
const backslash = 0x5c;
const colon = 0x3a;
const comma = 0x2c;
const openBrace = 0x7b;

/** The fields of a JSON body whose first bytes are `head` (a Responses API object); null when it is no object. */
export function responseFieldsOfBody(head: Buffer): ResponseObjectFields | null {
  // latin1 maps byte to character: the structure is intact, and the values read here are ASCII.
  const text = head.toString("latin1", 0, Math.min(head.length, scanLimit));
  const open = skipTextSpaces(text, 0, text.length);
  return text.charCodeAt(open) === openBrace ? fieldsOf(text, open, text.length) : null;
}

/**
 * The fields of the `response` object in an SSE event's data (`{"type":…,"response":{…}}`, as in
 * `response.completed`); null when the data has no such member in its first 4 KiB.
 */
export function responseFieldsOfEvent(data: string): ResponseObjectFields | null {
  const end = Math.min(data.length, scanLimit);
  const open = skipTextSpaces(data, 0, end);
  if (data.charCodeAt(open) !== openBrace) return null;
  let response = -1;
  walkMembers(data, open, end, (keyStart, keyEnd, value) => {
    if (!isKey(data, keyStart, keyEnd, "response") || data.charCodeAt(value) !== openBrace) return false;
    response = value;
    return true;
  });
  return response < 0 ? null : fieldsOf(data, response, end);
}

function fieldsOf(text: string, open: number, end: number): ResponseObjectFields {
  const fields: ResponseObjectFields = {
    id: null,
    object: null,
    status: null,
    background: null,
    createdAt: null,
  };
  // Each name counts once (the first), so the walk stops as soon as all five were seen.
  let seen = 0;
  walkMembers(text, open, end, (keyStart, keyEnd, value) => {
    if (!(seen & 1) && isKey(text, keyStart, keyEnd, "id")) {
      seen |= 1;
      fields.id = stringValue(text, value, end);
    } else if (!(seen & 2) && isKey(text, keyStart, keyEnd, "status")) {
      seen |= 2;
      fields.status = stringValue(text, value, end);
    } else if (!(seen & 4) && isKey(text, keyStart, keyEnd, "background")) {
      seen |= 4;
      fields.background = booleanValue(text, value);
    } else if (!(seen & 8) && isKey(text, keyStart, keyEnd, "created_at")) {
      seen |= 8;
      fields.createdAt = numberValue(text, value, end);
    } else if (!(seen & 16) && isKey(text, keyStart, keyEnd, "object")) {
      seen |= 16;
      fields.object = stringValue(text, value, end);
    }
    return seen === 31;
  });
  return fields;
}

/**
 * Calls `visit` with each member of the object opening at `open` (its key's bounds, without the
 * quotes, and where its value starts) until `visit` returns true, the object closes, or the text
 * is cut or not JSON.
 */
function walkMembers(
  text: string,
  open: number,
  end: number,
  visit: (keyStart: number, keyEnd: number, value: number) => boolean,
): void {
  let at = skipTextSpaces(text, open + 1, end);
  while (at < end && text.charCodeAt(at) === quote) {
    const keyEnd = stringEnd(text, at, end);
    if (keyEnd < 0) return;
    let value = skipTextSpaces(text, keyEnd + 1, end);
    if (text.charCodeAt(value) !== colon) return;
    value = skipTextSpaces(text, value + 1, end);
    if (value >= end || visit(at + 1, keyEnd, value)) return;
    const after = valueEnd(text, value, end);
    if (after < 0) return;
    at = skipTextSpaces(text, after, end);
    if (text.charCodeAt(at) !== comma) return;
    at = skipTextSpaces(text, at + 1, end);
  }
}

/** Whether the key `text[start..end)` (raw, between its quotes) is `name`. */
function isKey(text: string, start: number, end: number, name: string): boolean {
  return end - start === name.length && text.startsWith(name, start);
}

/** A string value without escapes (response ids and statuses have none); null otherwise. */
function stringValue(text: string, at: number, end: number): string | null {
  if (text.charCodeAt(at) !== quote) return null;
  const close = stringEnd(text, at, end);
  if (close < 0) return null;
  const value = text.slice(at + 1, close);
  return value.includes("\\") ? null : value;
}

function booleanValue(text: string, at: number): boolean | null {
  if (text.startsWith("true", at)) return true;
  return text.startsWith("false", at) ? false : null;
}

/** A non-negative finite number; null otherwise. */
function numberValue(text: string, at: number, end: number): number | null {
  const after = valueEnd(text, at, end);
  if (after < 0) return null;
  const raw = text.slice(at, after);
  if (!/^\d/.test(raw)) return null;
  const value = Number(raw);
  return Number.isFinite(value) ? value : null;
}

/** The index of the quote closing the string that opens at `open`; -1 when cut. */
function stringEnd(text: string, open: number, end: number): number {
  for (let index = open + 1; index < end; index++) {
    const code = text.charCodeAt(index);
    if (code === backslash) index++;
    else if (code === quote) return index;
  }
  return -1;
}

/** The index just after the value starting at `at` (skipped whole, nested or not); -1 when cut. */
function valueEnd(text: string, at: number, end: number): number {
  const first = text.charCodeAt(at);
  if (first === quote) {
    const close = stringEnd(text, at, end);
    return close < 0 ? -1 : close + 1;
  }
  if (first === openBrace || first === 0x5b /* [ */) {
    let depth = 0;
    for (let index = at; index < end; index++) {
      const code = text.charCodeAt(index);
      if (code === quote) {
        index = stringEnd(text, index, end);
        if (index < 0) return -1;
      } else if (code === openBrace || code === 0x5b) depth++;
      else if ((code === 0x7d /* } */ || code === 0x5d) /* ] */ && --depth === 0) return index + 1;
    }
    return -1;
  }
  // A number, true, false or null: up to the next delimiter (at the scan's end it may be cut).
  for (let index = at; index < end; index++) {
    const code = text.charCodeAt(index);
    if (code === comma || code === 0x7d || code === 0x5d || code <= 0x20) return index;
  }
  return -1;
}

/** Past the JSON whitespace in `text` from `from`, reading no further than `end`. */
export function skipTextSpaces(text: string, from: number, end = text.length): number {
  let index = from;
  while (index < end) {
    const code = text.charCodeAt(index);
    if (code !== 0x20 && code !== 0x0a && code !== 0x0d && code !== 0x09) break;
    index++;
  }
  return index;
}

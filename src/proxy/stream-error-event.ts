import { skipTextSpaces } from "./response-object-fields.js";

/**
 * Whether a stream's event is the provider's report that the answer failed after it began: the
 * answer's status said 200, then the stream carried an error (an overloaded provider B, a server
 * error halfway through provider A's chat completion). The SDKs throw on such an event, so the
 * usage row records the call as failed (outcome `error`), with the tokens seen before it.
 *
 * An event named `error` (provider B, the Responses and Interactions APIs) or `response.failed`
 * (the Responses API); an unnamed event (or one named `message`, the default) whose data is an
 * error object: `{"error":…}` (provider A's chat completions, provider C) or `{"type":"error",…}`
 * (provider B or the Responses API without event lines), or the Responses API's
 * `{"type":"response.failed",…}` without its event line (a compatible server's stream), with any
 * JSON whitespace the SDKs' `JSON.parse` skips (`{ "error"`, `{"type" : "error"`). Checked by the
 * data's first bytes: next to nothing on the events that are not errors, whose compact JSON starts
 * with a letter of the first key (`{"id"`, `{"candidates"`, `{"type":"content_block_delta"`); only
 * data with whitespace where that letter or the type's value would be is read further, a few bytes
 * (firstMemberIsError).
 */
export function isStreamErrorEvent(event: string | undefined, data: string): boolean {
  if (event !== undefined && event !== "message") return event === "error" || event === "response.failed";
  switch (data.charCodeAt(2)) {
    case 0x65 /* e */:
      return data.startsWith('{"error"');
    case 0x74 /* t */:
      // `{"type":"` is compact: its value decides; any other byte there may be whitespace.
      return data.startsWith('{"type":"')
        ? data.startsWith('error"', 9) || data.startsWith('response.failed"', 9)
        : data.startsWith('{"type"') && firstMemberIsError(data);
    case 0x22 /* " */:
    case 0x7b /* { */:
    case 0x20:
    case 0x09:
    case 0x0a:
    case 0x0d:
      return firstMemberIsError(data);
    default:
      return false;
  }
}

/**
 * The slow path: whether `data`, read as JSON (whitespace skipped), opens an object whose first
 * member is `"error":`, `"type": "error"` or `"type": "response.failed"`.
 */
function firstMemberIsError(data: string): boolean {
  let at = skipTextSpaces(data, 0);
  if (data.charCodeAt(at) !== 0x7b /* { */) return false;
  at = skipTextSpaces(data, at + 1);
  if (data.startsWith('"error"', at)) return data.charCodeAt(skipTextSpaces(data, at + 7)) === 0x3a /* : */;
  if (!data.startsWith('"type"', at)) return false;
  at = skipTextSpaces(data, at + 6);
  if (data.charCodeAt(at) !== 0x3a /* : */) return false;
  at = skipTextSpaces(data, at + 1);
  return data.startsWith('"error"', at) || data.startsWith('"response.failed"', at);
}

/**
 * Whether a stream's event is the provider's report that the answer failed after it began: the
 * answer's status said 200, then the stream carried an error (an overloaded provider B, a server
 * error halfway through provider A's chat completion). The SDKs throw on such an event, so the
 * usage row records the call as failed (outcome `error`), with the tokens seen before it.
 *
 * An event named `error` (provider B, the Responses and Interactions APIs) or `response.failed`
 * (the Responses API); an unnamed event (or one named `message`, the default) whose data is an
 * error object: `{"error":…}` (provider A's chat completions, provider C) or `{"type":"error",…}`
 * (provider B without event lines), with or without a space after the colon. Checked by the data's
 * first bytes: next to nothing on the events that are not errors.
 */
export function isStreamErrorEvent(event: string | undefined, data: string): boolean {
  if (event !== undefined && event !== "message") return event === "error" || event === "response.failed";
  // The first key's first letter picks the prefix to compare: every event passes here, and a chunk
  // of the answer starts otherwise (`{"id"`, `{"candidates"`, `{"type":"content_block_delta"`).
  switch (data.charCodeAt(2)) {
    case 0x65 /* e */:
      return data.startsWith('{"error"');
    case 0x74 /* t */:
      return data.startsWith('{"type":"error"') || data.startsWith('{"type": "error"');
    default:
      return false;
  }
}

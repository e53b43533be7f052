import { describe, expect, it } from "vitest";
import { isStreamErrorEvent } from "./stream-error-event.js";

describe("isStreamErrorEvent", () => {
  it.each([
    ["error", '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'],
    ["response.failed", '{"type":"response.failed","response":{"status":"failed"}}'],
    ["error", '{"type":"error","code":"server_error","message":"boom"}'],
    [undefined, '{"error":{"message":"The server had an error","type":"server_error"}}'],
    [undefined, '{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}'],
    ["message", '{"error":{"message":"boom"}}'],
    [undefined, '{"type":"error","error":{"type":"api_error","message":"Internal"}}'],
    [undefined, '{"type": "error", "error": {"type": "api_error"}}'],
    // JSON whitespace where the SDKs' JSON.parse skips it: after the brace, before it, around the colon.
    [undefined, '{ "error": {"message": "boom"}}'],
    [undefined, '{\n  "error": {\n    "code": 503\n  }\n}'],
    [undefined, '{\t"error" : {"message":"boom"}}'],
    [undefined, ' {"error":{"message":"boom"}}'],
    ["message", '{\r\n"error":{"message":"boom"}}'],
    [undefined, '{ "type": "error", "error": {"type": "overloaded_error"}}'],
    [undefined, '{"type" : "error","error":{"type":"api_error"}}'],
    [undefined, '{"type":\n"error","error":{"type":"api_error"}}'],
    // The Responses API without event lines (a compatible server): the type in the data only.
    [undefined, '{"type":"response.failed","sequence_number":2,"response":{"status":"failed"}}'],
    ["message", '{"type":"response.failed","response":{"status":"failed"}}'],
    [undefined, '{ "type": "response.failed", "response": {"status": "failed"}}'],
    [undefined, '{"type":"error","code":"server_error","message":"boom","sequence_number":1}'],
  ])("takes event %s with %s for the provider's error", (event, data) => {
    expect(isStreamErrorEvent(event, data)).toBe(true);
  });

  it.each([
    [undefined, '{"id":"chatcmpl-1","choices":[{"delta":{"content":"{\\"error\\":1}"}}]}'],
    [undefined, '{"errors":[]}'],
    [undefined, "[DONE]"],
    ["content_block_delta", '{"error":{"message":"a named event of another kind"}}'],
    ["response.completed", '{"type":"response.completed"}'],
    ["response.incomplete", '{"type":"response.incomplete"}'],
    ["message_delta", '{"type":"message_delta","delta":{"stop_reason":"end_turn"}}'],
    [undefined, '{"candidates":[{"finishReason":"SAFETY"}]}'],
    [undefined, '{ "errors": []}'],
    [undefined, '{ "id": "chatcmpl-1", "error": null}'],
    [undefined, '{ "type": "content_block_delta", "delta": {"text": "error"}}'],
    [undefined, '{"type" : "ping"}'],
    [undefined, '{"types": "error"}'],
    [undefined, '{"type":"response.completed","response":{"status":"completed"}}'],
    [undefined, '{"type":"response.failed_over","response":{}}'],
    [undefined, '{ "type": "response.in_progress"}'],
    [undefined, '{\n  "candidates": [{"content": {"parts": [{"text": "\\"error\\""}]}}]\n}'],
    [undefined, " [DONE]"],
    [undefined, ""],
  ])("does not take event %s with %s for one", (event, data) => {
    expect(isStreamErrorEvent(event, data)).toBe(false);
  });
});

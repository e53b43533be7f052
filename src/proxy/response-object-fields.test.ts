import { describe, expect, it } from "vitest";
import { responseFieldsOfBody, responseFieldsOfEvent } from "./response-object-fields.js";

const body = (value: unknown) => Buffer.from(JSON.stringify(value));

describe("response object fields", () => {
  it("reads the top-level id, object, status, background and created_at of a Responses API object", () => {
    expect(
      responseFieldsOfBody(
        body({
          id: "resp_1",
          object: "response",
          created_at: 1_763_000_000,
          status: "completed",
          background: true,
          output: [],
        }),
      ),
    ).toEqual({
      id: "resp_1",
      object: "response",
      status: "completed",
      background: true,
      createdAt: 1_763_000_000,
    });
  });

  it("never takes a nested field of the same name for the response's own, whatever comes first", () => {
    const nested = {
      output: [{ id: "msg_1", type: "message", status: "in_progress", background: true, created_at: 1 }],
      tools: [{ type: "image_generation", background: "transparent" }],
      metadata: { id: "meta", status: "completed", background: "true" },
      instructions: 'Quote "id":"resp_fake","status":"completed","background":true, {[ and \\" too',
      id: "resp_2",
      status: "queued",
      background: false,
      created_at: 1_763_000_001,
    };
    const expected = {
      id: "resp_2",
      object: null,
      status: "queued",
      background: false,
      createdAt: 1_763_000_001,
    };
    expect(responseFieldsOfBody(body(nested))).toEqual(expected);
    const spaced = Buffer.from(JSON.stringify(nested, null, 2).replaceAll("\n", "\r\n"));
    expect(responseFieldsOfBody(spaced)).toEqual(expected);
  });

  it("reads a batch object's id, object, status and created_at (it has no background field)", () => {
    const batch = {
      id: "batch_1",
      object: "batch",
      endpoint: "/v1/chat/completions",
      model: "gpt-4o-mini-2024-07-18",
      input_file_id: "file-1",
      completion_window: "24h",
      status: "completed",
      output_file_id: "file-2",
      created_at: 1_763_000_000,
      metadata: { object: "not-this", status: "nor-this" },
      request_counts: { total: 2, completed: 2, failed: 0 },
      usage: { input_tokens: 100, output_tokens: 50, total_tokens: 150 },
    };
    expect(responseFieldsOfBody(body(batch))).toEqual({
      id: "batch_1",
      object: "batch",
      status: "completed",
      background: null,
      createdAt: 1_763_000_000,
    });
  });

  it("reads the response object of a stream event, not a nested one named response", () => {
    const response = { id: "resp_3", created_at: 5, status: "completed", background: true };
    const data = JSON.stringify({
      type: "response.completed",
      item: { response: { id: "resp_wrong", status: "failed", background: true } },
      sequence_number: 9,
      response,
    });
    expect(responseFieldsOfEvent(data)).toEqual({
      id: "resp_3",
      object: null,
      status: "completed",
      background: true,
      createdAt: 5,
    });
    expect(responseFieldsOfEvent('{"type":"response.output_text.delta","delta":"x"}')).toBeNull();
    expect(responseFieldsOfEvent('{"type":"error","response":null}')).toBeNull();
  });

  it("reads only the first 4 KiB: a field beyond them, or cut by them, is unknown", () => {
    const late = body({
      id: "resp_4",
      status: "completed",
      instructions: "x".repeat(5000),
      background: true,
    });
    expect(responseFieldsOfBody(late)).toEqual({
      id: "resp_4",
      object: null,
      status: "completed",
      background: null,
      createdAt: null,
    });
    expect(responseFieldsOfBody(Buffer.from('{"id":"resp_5","status":"comp'))).toEqual({
      id: "resp_5",
      object: null,
      status: null,
      background: null,
      createdAt: null,
    });
  });

  it("answers null or unknown fields for anything else, and never throws", () => {
    expect(responseFieldsOfBody(Buffer.from("[1,2]"))).toBeNull();
    expect(responseFieldsOfBody(Buffer.alloc(0))).toBeNull();
    expect(responseFieldsOfEvent("[DONE]")).toBeNull();
    expect(
      responseFieldsOfBody(body({ id: 7, status: "a\\u0062", background: "yes", created_at: -1 })),
    ).toEqual({ id: null, object: null, status: null, background: null, createdAt: null });
    for (const garbage of ['{"id"', '{"id":', "{{{", '{"a":[}', '{"a" "b"}', "\u0000{"]) {
      expect(() => responseFieldsOfBody(Buffer.from(garbage))).not.toThrow();
      expect(() => responseFieldsOfEvent(garbage)).not.toThrow();
    }
  });
});

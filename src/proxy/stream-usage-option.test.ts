import { describe, expect, it } from "vitest";
import { withStreamUsage } from "./stream-usage-option.js";

describe("stream usage option", () => {
  it("asks provider A's streamed chat completions for usage", () => {
    const body = Buffer.from('{"model":"gpt-4o-mini","stream":true,"messages":[]}');
    expect(JSON.parse(withStreamUsage("provider-a", "chat/completions", body).toString())).toEqual({
      model: "gpt-4o-mini",
      stream: true,
      messages: [],
      stream_options: { include_usage: true },
    });
  });

  it("keeps every other body byte for byte", () => {
    const cases: Array<[Parameters<typeof withStreamUsage>[0], string, string]> = [
      ["provider-a", "chat/completions", '{ "model" : "x", "stream": false }'],
      ["provider-a", "chat/completions", '{"stream":true,"stream_options":{"include_usage":true}}'],
      ["provider-a", "embeddings", '{"stream":true}'],
      ["provider-b", "messages", '{"stream":true}'],
      ["provider-a", "chat/completions", '{"stream":true'],
    ];
    for (const [provider, path, text] of cases) {
      const body = Buffer.from(text);
      expect(withStreamUsage(provider, path, body)).toBe(body);
    }
  });
});

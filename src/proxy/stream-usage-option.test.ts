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

  it("adds only the option to the body as sent: large integers, numbers and escapes stay as they were", () => {
    const text =
      '{ "model":"gpt-4o-mini", "seed": 12345678901234567890, "temperature": 0.50,\n' +
      '  "messages":[{"role":"user","content":"caf\\u00e9 \\"stream\\""}], "stream": true }\n';
    const added = withStreamUsage("provider-a", "chat/completions", Buffer.from(text)).toString();
    expect(added).toBe(
      '{ "model":"gpt-4o-mini", "seed": 12345678901234567890, "temperature": 0.50,\n' +
        '  "messages":[{"role":"user","content":"caf\\u00e9 \\"stream\\""}], "stream": true ,"stream_options":{"include_usage":true}}\n',
    );
    expect(JSON.parse(added).stream_options).toEqual({ include_usage: true });
    const withOptions = Buffer.from('{"stream":true,"stream_options":{"include_obfuscation":false}}');
    expect(JSON.parse(withStreamUsage("provider-a", "chat/completions", withOptions).toString())).toEqual({
      stream: true,
      stream_options: { include_obfuscation: false, include_usage: true },
    });
  });

  it("asks provider A's streamed legacy completions for usage too", () => {
    const body = Buffer.from('{"model":"gpt-3.5-turbo-instruct","prompt":"Say hi","stream":true}');
    expect(JSON.parse(withStreamUsage("provider-a", "completions", body).toString())).toEqual({
      model: "gpt-3.5-turbo-instruct",
      prompt: "Say hi",
      stream: true,
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

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
    // With stream_options already there (the SDK sends `include_obfuscation`), only the option is
    // written into it.
    const withOptions =
      '{"stream":true,"seed":12345678901234567890,"temperature":1.0,"stream_options":{ "include_obfuscation":false}}';
    expect(withStreamUsage("provider-a", "chat/completions", Buffer.from(withOptions)).toString()).toBe(
      '{"stream":true,"seed":12345678901234567890,"temperature":1.0,"stream_options":{"include_usage":true, "include_obfuscation":false}}',
    );
  });

  it("decides as the provider reads the body: escaped keys, the option elsewhere, false, null, duplicates", () => {
    const cases: Array<[string, string]> = [
      // `stream` written with an escape.
      [
        '{"model":"m","\\u0073tream":true}',
        '{"model":"m","\\u0073tream":true,"stream_options":{"include_usage":true}}',
      ],
      // The option inside a tool's schema is not the request's option; false becomes true.
      [
        '{"stream":true,"stream_options":{"include_usage":false},"tools":[{"parameters":{"properties":{"include_usage":true}}}]}',
        '{"stream":true,"stream_options":{"include_usage":true},"tools":[{"parameters":{"properties":{"include_usage":true}}}]}',
      ],
      [
        '{"stream":true,"x":{"include_usage":true}}',
        '{"stream":true,"x":{"include_usage":true},"stream_options":{"include_usage":true}}',
      ],
      ['{"stream":true,"stream_options":null}', '{"stream":true,"stream_options":{"include_usage":true}}'],
      ['{"stream":true,"stream_options":{ }}', '{"stream":true,"stream_options":{"include_usage":true }}'],
      // The last of duplicate members is the one read.
      [
        '{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":0}}',
        '{"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":true}}',
      ],
      [
        '{"stream":true,"stream\\u005foptions":{"include_usage":false}}',
        '{"stream":true,"stream\\u005foptions":{"include_usage":true}}',
      ],
    ];
    for (const [sent, forwarded] of cases) {
      const added = withStreamUsage("provider-a", "chat/completions", Buffer.from(sent)).toString();
      expect(added, sent).toBe(forwarded);
      expect(JSON.parse(added).stream_options, sent).toMatchObject({ include_usage: true });
    }
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
      ["provider-a", "chat/completions", '{"messages":[{"content":"caf\\u00e9"}],"\\u0073tream":false}'],
      ["provider-a", "chat/completions", '{"stream":true,"stream_\\u006Fptions":{"include_usage":true}}'],
    ];
    for (const [provider, path, text] of cases) {
      const body = Buffer.from(text);
      expect(withStreamUsage(provider, path, body)).toBe(body);
    }
  });
});

import { describe, expect, it, vi } from "vitest";
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

  it("reads a body that starts with a byte order mark, as the provider's parser does, and keeps the mark", () => {
    const body = Buffer.concat([
      Buffer.from([0xef, 0xbb, 0xbf]),
      Buffer.from(' {"model":"gpt-4o-mini","stream":true,"messages":[]}'),
    ]);
    const added = withStreamUsage("provider-a", "chat/completions", body);
    expect(added.subarray(0, 3)).toEqual(Buffer.from([0xef, 0xbb, 0xbf]));
    expect(JSON.parse(added.toString("utf8", 3)).stream_options).toEqual({ include_usage: true });
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

  it("walks a body of a million escaped keys without a JSON.parse per key", () => {
    const parse = vi.spyOn(JSON, "parse");
    const body = Buffer.from(`{${'"\\u0061":1,'.repeat(1_000_000)}"stream":true}`);
    const added = withStreamUsage("provider-a", "chat/completions", body);
    const calls = parse.mock.calls.length;
    parse.mockRestore();
    expect(added.toString("latin1", added.length - 54)).toBe(
      '"stream":true,"stream_options":{"include_usage":true}}',
    );
    expect(calls).toBe(0);
  });

  it("decides as JSON.parse reads the body, over random bodies with escapes, spaces and duplicates", () => {
    let seed = 7;
    const random = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const space = () => pick(["", "", " ", "\n  ", "\t"]);
    const key = (name: string) =>
      pick([
        `"${name}"`,
        `"${name}"`,
        JSON.stringify(name).replace("s", "\\u0073"),
        `"${name}\\u0020"`,
        // Every letter escaped, in upper-case hex; a near miss (`S`); an escaped solidus.
        `"${[...name].map((char) => `\\u${char.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}`).join("")}"`,
        JSON.stringify(name).replace("s", "\\u0053"),
        `"${name.slice(0, -1)}\\/"`,
      ]);
    const leaf = () => pick(["true", "false", "null", "0", "1.0", '"true"', '"a\\"b\\\\"', "[]", "{}"]);
    const value = (depth: number): string => {
      if (depth > 2 || random() < 0.4) return leaf();
      if (random() < 0.3) return `[${space()}${value(depth + 1)}${space()},${space()}${value(depth + 1)}]`;
      return object(depth + 1);
    };
    const member = (depth: number): string => {
      const name = pick(["stream", "stream_options", "include_usage", "model", "messages"]);
      const content = name === "stream_options" && random() < 0.6 ? object(depth + 1, true) : value(depth);
      return `${space()}${key(name)}${space()}:${space()}${content}${space()}`;
    };
    const object = (depth: number, options = false): string => {
      const members: string[] = [];
      const count = Math.floor(random() * 4);
      for (let index = 0; index < count; index++)
        members.push(
          options && random() < 0.5 ? `${key("include_usage")}:${pick(["true", "false"])}` : member(depth),
        );
      return `{${members.join(",")}${space()}}`;
    };
    let changed = 0;
    for (let round = 0; round < 2000; round++) {
      const text = `${space()}{${member(0)},${key("stream")}:${pick(["true", "true", "false"])}${random() < 0.5 ? `,${member(0)}` : ""}}${space()}`;
      const sent = JSON.parse(text);
      const forwarded = withStreamUsage("provider-a", "chat/completions", Buffer.from(text));
      const asks = sent.stream === true;
      const hasOption =
        asks && sent.stream_options?.include_usage === true && !Array.isArray(sent.stream_options);
      if (!asks || hasOption) {
        expect(forwarded.toString(), text).toBe(text);
        continue;
      }
      changed++;
      const read = JSON.parse(forwarded.toString());
      expect(read.stream_options?.include_usage, text).toBe(true);
      const { stream_options: _sent, ...rest } = sent;
      const { stream_options: _read, ...restRead } = read;
      expect(restRead, text).toEqual(rest);
    }
    expect(changed).toBeGreaterThan(200);
  });
});

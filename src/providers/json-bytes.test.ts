import { afterEach, describe, expect, it, vi } from "vitest";
import { keyIs, lastMembers, quotedValueAfterKey, stringEnd, valueEnd } from "./json-bytes.js";

/**
 * What the usage meter's model patterns found before: the regular expression on the bytes read as
 * latin1 (one character a byte), the value found then read as the UTF-8 it is.
 */
function byPattern(body: Buffer, key: string, from: number, limit: number): string | null {
  const pattern = new RegExp(`"${key}"\\s*:\\s*"([^"\\\\]{1,200})"`);
  const found = pattern.exec(body.toString("latin1", from, limit))?.[1];
  return found === undefined ? null : Buffer.from(found, "latin1").toString("utf8");
}

describe("quotedValueAfterKey", () => {
  it("finds what the model pattern finds in decoded text, over random bodies and windows", () => {
    const pieces = [
      '"model"',
      '"modelVersion"',
      '"model',
      "model",
      ":",
      " ",
      "\t",
      "\n",
      "\r",
      "\u000b",
      "\u000c",
      "\u00a0",
      "\u0085",
      '"',
      "\\",
      '\\"',
      "gpt-4o-mini",
      "x".repeat(199),
      "y".repeat(200),
      "z".repeat(201),
      "é",
      // "è" and "ü" in UTF-8, as a provider writes them (the body is made of the pieces' latin1 bytes).
      Buffer.from("è", "utf8").toString("latin1"),
      Buffer.from("ü", "utf8").toString("latin1"),
      "{",
      "}",
      ",",
      // Whole members, so that many bodies hold a match (or a near miss).
      '"model": "gpt-4o"',
      '"modelVersion" :\t"gemini-2.5-flash"',
      '"model":\u00a0"a"',
    ];
    let found = 0;
    for (let round = 0; round < 5000; round++) {
      let text = "";
      const count = 1 + Math.floor(Math.random() * 14);
      for (let index = 0; index < count; index++)
        text += pieces[Math.floor(Math.random() * pieces.length)] as string;
      const body = Buffer.from(text, "latin1");
      const from = Math.random() < 0.5 ? 0 : Math.floor(Math.random() * body.length);
      const limit = Math.random() < 0.5 ? body.length + 10 : Math.floor(Math.random() * (body.length + 1));
      for (const key of ["model", "modelVersion"]) {
        const expected = from > Math.min(limit, body.length) ? null : byPattern(body, key, from, limit);
        if (expected !== null) found++;
        expect(quotedValueAfterKey(body, Buffer.from(`"${key}"`), from, limit), JSON.stringify(text)).toBe(
          expected,
        );
      }
    }
    expect(found).toBeGreaterThan(1000);
  });

  it("reads a chat completion's model and a value at the window's edge", () => {
    const body = Buffer.from('{"id":"x","object":"chat.completion","model" : "gpt-4o-mini","usage":{}}');
    expect(quotedValueAfterKey(body, Buffer.from('"model"'), 0, 4096)).toBe("gpt-4o-mini");
    const edge = body.indexOf('gpt-4o-mini"') + 'gpt-4o-mini"'.length;
    expect(quotedValueAfterKey(body, Buffer.from('"model"'), 0, edge)).toBe("gpt-4o-mini");
    expect(quotedValueAfterKey(body, Buffer.from('"model"'), 0, edge - 1)).toBeNull();
  });

  it("reads a value that is not ASCII as the UTF-8 it is written in", () => {
    const body = Buffer.from('{"model":"modèle-ü","usage":{}}', "utf8");
    expect(quotedValueAfterKey(body, Buffer.from('"model"'), 0, 4096)).toBe("modèle-ü");
    const emoji = Buffer.from('{"modelVersion":"gemini-🦊"}', "utf8");
    expect(quotedValueAfterKey(emoji, Buffer.from('"modelVersion"'), 0, 4096)).toBe("gemini-🦊");
  });
});

describe("valueEnd", () => {
  const body = Buffer.from('{"a":{"b":"x}"},"c":[1,2]} 42');

  it("finds the end of an object, a string, an array or a number", () => {
    expect(valueEnd(body, 0)).toBe(26);
    expect(valueEnd(body, 5)).toBe(15);
    expect(valueEnd(body, 10)).toBe(14);
    expect(valueEnd(body, 20)).toBe(25);
    expect(valueEnd(body, 27)).toBe(29);
    expect(valueEnd(Buffer.from('{"a":[1'), 0)).toBe(-1);
  });

  it("reads only up to a limit: a value that does not end before it is cut", () => {
    expect(valueEnd(body, 0, 26)).toBe(26);
    expect(valueEnd(body, 0, 25)).toBe(-1);
    // The string's closing quote (offset 13) is not before the limit.
    expect(valueEnd(body, 5, 13)).toBe(-1);
    expect(valueEnd(body, 10, 13)).toBe(-1);
    expect(valueEnd(body, 10, 14)).toBe(14);
    expect(valueEnd(body, 27, 28)).toBe(28);
  });
});

describe("stringEnd", () => {
  /** Byte by byte: the first quote no escape covers, before `limit`. */
  const reference = (body: Buffer, at: number, limit: number) => {
    for (let index = at + 1; index < limit; index++) {
      if (body[index] === 0x5c) index++;
      else if (body[index] === 0x22) return index + 1;
    }
    return -1;
  };

  it("finds the end a byte-by-byte read finds, over random strings dense with escapes, within any limit", () => {
    const pieces = ['"', "\\", '\\"', "\\\\", "a", "\\\\\\"];
    let seed = 11;
    const next = () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed;
    };
    for (let round = 0; round < 20_000; round++) {
      const length = next() % 60;
      const body = Buffer.from(`"${Array.from({ length }, () => pieces[next() % pieces.length]).join("")}`);
      const limit = 1 + (next() % body.length);
      expect(stringEnd(body, 0, limit), body.toString()).toBe(reference(body, 0, limit));
    }
  });
});

describe("keyIs", () => {
  afterEach(() => vi.restoreAllMocks());

  const is = (key: string, name: string) => keyIs(Buffer.from(key), 0, Buffer.byteLength(key), name);

  it("reads escaped keys as JSON.parse does: \\u in either case, surrogate pairs, short escapes", () => {
    expect(is('"stream"', "stream")).toBe(true);
    expect(is('"\\u0073tream"', "stream")).toBe(true);
    expect(is('"\\u0073\\u0074\\u0072\\u0065\\u0061\\u006D"', "stream")).toBe(true);
    expect(is('"stream\\u005Foptions"', "stream_options")).toBe(true);
    expect(is('"a\\/b"', "a/b")).toBe(true);
    expect(is('"a\\"b\\\\"', 'a"b\\')).toBe(true);
    expect(is('"\\n\\t\\r\\b\\f"', "\n\t\r\b\f")).toBe(true);
    expect(is('"\\uD83D\\uDE00"', "\u{1F600}")).toBe(true);
    expect(is('"\\u0053tream"', "stream")).toBe(false);
    expect(is('"stream\\u0020"', "stream")).toBe(false);
    expect(is('"strea"', "stream")).toBe(false);
    expect(is('"\\u0073trea"', "stream")).toBe(false);
    expect(is('"streams"', "stream")).toBe(false);
    expect(is('"stréam"', "stream")).toBe(false);
  });

  it("throws on an escape that does not decode, as JSON.parse does, up to the first difference", () => {
    expect(() => is('"\\x73tream"', "stream")).toThrow(SyntaxError);
    expect(() => is('"\\u07tream"', "stream")).toThrow(SyntaxError);
    expect(() => is('"\\u00g3tream"', "stream")).toThrow(SyntaxError);
    // Past a difference the key cannot be the name, whatever follows.
    expect(is('"x\\qtream"', "stream")).toBe(false);
  });

  it("decides as JSON.parse, over random keys with escapes", () => {
    const names = ["stream", "stream_options", "include_usage", "model", 'a"\\/'];
    const plain = (char: string) => (char === '"' || char === "\\" ? `\\${char}` : char);
    const pieces = (name: string) => [
      ...name.split("").map(plain),
      ...name.split("").map((char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`),
      ...name.split("").map((char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0").toUpperCase()}`),
      "\\u0020",
      "\\n",
      '\\"',
      "\\\\",
      "\\/",
      "\\uD83D\\uDE00",
      "é",
      "x",
    ];
    let matched = 0;
    for (let round = 0; round < 5000; round++) {
      const name = names[round % names.length] as string;
      const choices = pieces(name);
      let raw = "";
      // Mostly the name, char by char, each written plain or escaped, with a stray piece at times.
      for (const char of name) {
        const roll = Math.random();
        if (roll < 0.45) raw += plain(char);
        else if (roll < 0.9) raw += `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`;
        else raw += choices[Math.floor(Math.random() * choices.length)];
      }
      if (Math.random() < 0.1) raw += choices[Math.floor(Math.random() * choices.length)];
      const key = `"${raw}"`;
      const expected = JSON.parse(key) === name;
      if (expected) matched++;
      expect(is(key, name), key).toBe(expected);
    }
    expect(matched).toBeGreaterThan(1000);
  });

  it("walks a body of escaped keys without a JSON.parse per key", () => {
    const parse = vi.spyOn(JSON, "parse");
    const members = Array.from({ length: 1000 }, (_, index) => `"\\u0061${index}":1`).join(",");
    const body = Buffer.from(`{${members},"\\u0073tream":true,"${"\\u0061".repeat(1000)}":2}`);
    const [stream] = lastMembers(body, 0, "stream");
    expect(body.toString("latin1", stream?.start, stream?.end)).toBe("true");
    expect(parse).not.toHaveBeenCalled();
  });
});

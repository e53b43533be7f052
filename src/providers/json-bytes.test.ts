import { describe, expect, it } from "vitest";
import { quotedValueAfterKey, valueEnd } from "./json-bytes.js";

/** What the usage meter's model patterns found before: the regular expression on decoded text. */
function byPattern(body: Buffer, key: string, from: number, limit: number): string | null {
  const pattern = new RegExp(`"${key}"\\s*:\\s*"([^"\\\\]{1,200})"`);
  return pattern.exec(body.toString("latin1", from, limit))?.[1] ?? null;
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

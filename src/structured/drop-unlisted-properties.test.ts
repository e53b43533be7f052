import { describe, expect, it } from "vitest";
import { countingRefReads } from "../../test/support/counting-ref-reads.js";
import { withoutUnlistedProperties } from "./drop-unlisted-properties.js";
import { checkOutputSchema } from "./output-schema.js";
import { validateAgainstSchema } from "./schema-validator.js";

const closed = (properties: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  type: "object",
  properties,
  additionalProperties: false,
  ...extra,
});

describe("withoutUnlistedProperties (keys a closed object does not list)", () => {
  it("drops them through properties, items, $ref and a map's values, and leaves open objects be", () => {
    const schema = {
      type: "object",
      $defs: { tag: closed({ name: { type: "string" } }) },
      properties: {
        tags: { type: "array", items: { $ref: "#/$defs/tag" } },
        scores: { type: "object", additionalProperties: closed({ value: { type: "number" } }) },
        open: { type: "object", properties: { a: { type: "string" } } },
      },
      additionalProperties: false,
    };
    const answer = {
      tags: [{ name: "a", extra: 1 }],
      scores: { x: { value: 1, note: "n" } },
      open: { a: "a", b: "b" },
      extra: true,
    };
    const fitted = withoutUnlistedProperties(schema, answer);
    expect(fitted).toEqual({ tags: [{ name: "a" }], scores: { x: { value: 1 } }, open: { a: "a", b: "b" } });
    expect(validateAgainstSchema(schema, fitted).valid).toBe(true);
    expect(answer.extra).toBe(true);
    expect(answer.tags[0]).toEqual({ name: "a", extra: 1 });
  });

  it("follows a $ref that steps into an array by index (RFC 6901)", () => {
    const schema = {
      type: "object",
      $defs: { choice: { anyOf: [closed({ name: { type: "string" } }), { type: "null" }] } },
      properties: { pick: { $ref: "#/$defs/choice/anyOf/0" } },
    };
    const fitted = withoutUnlistedProperties(schema, { pick: { name: "a", extra: 1 } });
    expect(fitted).toEqual({ pick: { name: "a" } });
    expect(validateAgainstSchema(schema, fitted).valid).toBe(true);
  });

  it("applies a $ref's closed object and its own, each being required of the value", () => {
    const schema = {
      type: "object",
      $defs: { base: closed({ a: { type: "string" }, b: { type: "string" } }) },
      properties: {
        v: { $ref: "#/$defs/base", ...closed({ a: { type: "string" }, c: { type: "string" } }) },
      },
    };
    expect(withoutUnlistedProperties(schema, { v: { a: "a", b: "b", c: "c", d: "d" } })).toEqual({
      v: { a: "a" },
    });
  });

  it("leaves what is inside anyOf as it is", () => {
    const schema = closed({
      v: { anyOf: [closed({ a: { type: "string" } }), closed({ b: { type: "string" } })] },
    });
    expect(withoutUnlistedProperties(schema, { v: { a: "a", b: "b" }, x: 1 })).toEqual({
      v: { a: "a", b: "b" },
    });
  });

  it("follows a recursive $ref as deep as the answer goes, and gives up past the stack", () => {
    const schema = {
      type: "object",
      $defs: { node: closed({ kids: { type: "array", items: { $ref: "#/$defs/node" } } }) },
      properties: { root: { $ref: "#/$defs/node" } },
    };
    expect(withoutUnlistedProperties(schema, { root: { kids: [{ kids: [], x: 1 }], y: 2 } })).toEqual({
      root: { kids: [{ kids: [] }] },
    });
    let deep: Record<string, unknown> = { kids: [] };
    for (let level = 0; level < 100_000; level++) deep = { kids: [deep] };
    const answer = { root: deep };
    expect(withoutUnlistedProperties(schema, answer)).toBe(answer);
  });

  it("returns every valid answer unchanged", () => {
    const schema = closed(
      {
        title: { type: "string" },
        list: { type: "array", items: closed({ n: { type: ["integer", "null"] } }) },
        maybe: { anyOf: [{ type: "null" }, closed({ x: { type: "string" } })] },
      },
      { required: ["title"] },
    );
    for (const answer of [
      { title: "t" },
      { title: "t", list: [{ n: 3 }, { n: null }, {}] },
      { title: "t", maybe: null },
      { title: "t", maybe: { x: "x" } },
    ]) {
      expect(validateAgainstSchema(schema, answer).valid).toBe(true);
      expect(withoutUnlistedProperties(schema, answer)).toEqual(answer);
    }
  });

  // A chain of 1,500 definitions, each a $ref to the next (47 KB, a schema every provider's check
  // takes), as the items of an array: each item's $refs were resolved again, the whole chain per item.
  // An answer of 10,000 items (~80 KB) held the event loop ~15 s, where Ajv checked it in ~5 ms.
  it("reads a chain of $refs once, however many values of the answer it applies to", () => {
    const links = 1500;
    const $defs: Record<string, unknown> = {};
    for (let index = 0; index < links; index++)
      $defs[`a${index}`] =
        index + 1 < links ? { $ref: `#/$defs/a${index + 1}` } : closed({ n: { type: "integer" } });
    const schema = closed(
      { items: { type: "array", items: { $ref: "#/$defs/a0" } } },
      { required: ["items"], $defs },
    );
    expect(checkOutputSchema(schema)).toEqual([]);
    const answer = { items: Array.from({ length: 10_000 }, (_, n) => ({ n, extra: 1 })) };
    const counted = countingRefReads(schema, 3 * links);
    const fitted = withoutUnlistedProperties(counted.schema, answer) as { items: unknown[] };
    expect(fitted.items).toHaveLength(10_000);
    expect(fitted.items[9_999]).toEqual({ n: 9_999 });
    expect(validateAgainstSchema(schema, fitted).valid).toBe(true);
  });
});

import { describe, expect, it } from "vitest";
import { resolveJsonPointer } from "./resolve-json-pointer.js";

const document = {
  type: "object",
  $defs: { "a/b": { type: "string" }, "m~n": { type: "number" }, "per cent": { type: "null" } },
  anyOf: [{ type: "object" }, { type: "null" }],
};

describe("resolveJsonPointer (a local $ref, RFC 6901)", () => {
  it("names the document itself for #", () => {
    expect(resolveJsonPointer(document, "#")).toBe(document);
  });

  it("steps into objects by key, unescaping ~1, ~0 and percent-encoding", () => {
    expect(resolveJsonPointer(document, "#/$defs/a~1b")).toEqual({ type: "string" });
    expect(resolveJsonPointer(document, "#/$defs/m~0n")).toEqual({ type: "number" });
    expect(resolveJsonPointer(document, "#/$defs/per%20cent")).toEqual({ type: "null" });
    // ~1 is unescaped before ~0 (RFC 6901 §4): "~01" names the key "~1", not "/".
    const tilde = { $defs: { "~1": { type: "boolean" }, "/": { type: "integer" } } };
    expect(resolveJsonPointer(tilde, "#/$defs/~01")).toEqual({ type: "boolean" });
  });

  it("steps into arrays by index", () => {
    expect(resolveJsonPointer(document, "#/anyOf/0")).toBe(document.anyOf[0]);
    expect(resolveJsonPointer(document, "#/anyOf/1/type")).toBe("null");
  });

  it.each(["#/anyOf/2", "#/anyOf/-", "#/anyOf/01", "#/anyOf/length", "#/anyOf/+1", "#/anyOf/"])(
    "names nothing for an array step that is no index of an element (%s)",
    (ref) => {
      expect(resolveJsonPointer(document, ref)).toBeUndefined();
    },
  );

  it.each(["#/missing", "#/type/length", "#/$defs/a/b", "#/%E0%A4%A", "other.json#/$defs", "#/constructor"])(
    "names nothing for what the document does not hold (%s)",
    (ref) => {
      expect(resolveJsonPointer(document, ref)).toBeUndefined();
    },
  );
});

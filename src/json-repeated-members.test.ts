import { describe, expect, it } from "vitest";
import { repeatedMembers } from "./json-repeated-members.js";

const of = (text: string) => repeatedMembers(Buffer.from(text));

describe("repeatedMembers", () => {
  it.each([
    ['{"a":1,"b":2}', []],
    ['{"a":1,"a":2}', ["a"]],
    ['{"a":1,"a":2,"a":3}', ["a"]],
    ['\ufeff {"a":{"b":1},"a":{"b":1,"b":2}}', ["a", "a.b"]],
    ['{"a":[{"x":1},{"x":1,"y":2,"x":3}]}', ["a.1.x"]],
    ['[[1,2],{"k":1,"k":1}]', ["1.k"]],
    ['{"n\\u0061me":1,"name":2}', ["name"]],
    ['{"a":"\\":\\"a\\":","a":1}', ["a"]],
    ['{"a":"a","b":{"a":"a"},"c":["a","a"]}', []],
    ['{"__proto__":1,"__proto__":2}', ["__proto__"]],
    ['{"a" : 1 , "a"\n:\t2}', ["a"]],
  ])("%s", (text, paths) => {
    JSON.parse(text.replace(/^\ufeff/, ""));
    expect(of(text)).toEqual(paths);
  });

  it("names the first ten, each path at most 200 characters, building each once", () => {
    const members = Array.from({ length: 12 }, (_, i) => `"m${i}":1,"m${i}":2,"m${i}":3`).join(",");
    expect(of(`{${members}}`)).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    const deep = `${'{"abcdefghij":'.repeat(5000)}{${'"x":1,'.repeat(40_000)}"x":1}${"}".repeat(5000)}`;
    const started = performance.now();
    const [path] = of(deep);
    expect(performance.now() - started).toBeLessThan(2000);
    expect(path).toHaveLength(200);
    expect(path).toMatch(/^….*\.abcdefghij\.x$/);
  });
});

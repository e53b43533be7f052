import { describe, expect, it } from "vitest";
import { exceededJsonShape, jsonBodyLimits } from "./json-shape.js";

const limits = { maxDepth: 3, maxValues: 4 };
const shape = (text: string, bounds = limits) => exceededJsonShape(Buffer.from(text), bounds);

describe("exceededJsonShape", () => {
  it("counts objects and arrays open at once, the outermost included", () => {
    expect(shape('{"a":[{"b":1}]}')).toBeNull();
    expect(shape('{"a":[{"b":[1]}]}')).toBe("depth");
    expect(shape("[[[]],[[]],[[]]]")).toBeNull();
    expect(shape("[[[[")).toBe("depth");
  });

  it("counts object members and array elements past each array's first", () => {
    expect(shape('{"a":1,"b":2,"c":3,"d":4}')).toBeNull();
    expect(shape('{"a":1,"b":2,"c":3,"d":4,"e":5}')).toBe("values");
    expect(shape("[1,2,3,4,5]")).toBeNull();
    expect(shape("[1,2,3,4,5,6]")).toBe("values");
    expect(shape('{"a":[1,2],"b":[3,4]}')).toBeNull();
    expect(shape('{"a":[1,2,3],"b":[4,5]}')).toBe("values");
  });

  it("skips strings: brackets, colons, commas, escaped quotes and backslashes inside count nothing", () => {
    const inside = JSON.stringify('[[[[{"a":1,"b":2,"c":3}]]]] \\" \\\\ \\\\\\" ,:,:,:,:,:');
    expect(shape(`{"a":${inside},"b":${inside}}`)).toBeNull();
    expect(shape(`{"a\\"[[[[":1,"\\\\":${inside}}`)).toBeNull();
    // A string long enough for the native search, and one dense with escaped quotes.
    expect(shape(`{"a":"${"x".repeat(10_000)}[[[[","b":"${'\\"'.repeat(10_000)}"}`)).toBeNull();
    expect(shape(`{"a":"${"x".repeat(100)}\\\\\\\\"}, [[[[`)).toBe("depth");
    expect(shape(`{"a":"${"x".repeat(100)}\\\\\\"}, [[[[`)).toBeNull();
    expect(shape(`["${'\\"'.repeat(100)}",[[[`)).toBe("depth");
  });

  it("reads past a byte order mark and leading spaces", () => {
    const mark = Buffer.from([0xef, 0xbb, 0xbf]);
    const check = (text: string) => exceededJsonShape(Buffer.concat([mark, Buffer.from(text)]), limits);
    expect(check(' {"a":[1]}')).toBeNull();
    expect(check("\n[[[[")).toBe("depth");
    expect(check('{"a":1,"b":2,"c":3,"d":4,"e":5}')).toBe("values");
  });

  it("leaves text that is no JSON within the bounds to JSON.parse: an open string, stray closers", () => {
    expect(shape('{"a":"[[[[')).toBeNull();
    expect(shape("]]]]]][[[")).toBeNull();
    expect(shape("")).toBeNull();
  });

  it("refuses 20 MiB of nested arrays or members from their first bytes", () => {
    expect(exceededJsonShape(Buffer.alloc(20 << 20, "["), jsonBodyLimits)).toBe("depth");
    const members = Buffer.from(`{${'"a":0,'.repeat(3_500_000)}"z":0}`);
    expect(exceededJsonShape(members, jsonBodyLimits)).toBe("values");
  });

  it("allows what the JSON endpoints take: 64 levels, 10000 values", () => {
    expect(jsonBodyLimits).toEqual({ maxDepth: 64, maxValues: 10_000 });
    const deep = `${"[".repeat(64)}${"]".repeat(64)}`;
    expect(exceededJsonShape(Buffer.from(deep), jsonBodyLimits)).toBeNull();
    expect(exceededJsonShape(Buffer.from(`[${deep}]`), jsonBodyLimits)).toBe("depth");
    const wide = (count: number) => Buffer.from(`[${"0,".repeat(count)}0]`);
    expect(exceededJsonShape(wide(10_000), jsonBodyLimits)).toBeNull();
    expect(exceededJsonShape(wide(10_001), jsonBodyLimits)).toBe("values");
  });
});

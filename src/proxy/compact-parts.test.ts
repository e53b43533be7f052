import { describe, expect, it } from "vitest";
import { compactParts } from "./compact-parts.js";

function pushAll(sizes: number[]) {
  const parts: Buffer[] = [];
  const all: Buffer[] = [];
  let byte = 0;
  for (const size of sizes) {
    const part = Buffer.alloc(size);
    for (let index = 0; index < size; index++) part[index] = byte++ & 0xff;
    all.push(part);
    parts.push(part);
    compactParts(parts, part);
  }
  return { parts, all: Buffer.concat(all) };
}

describe("compactParts", () => {
  it("keeps the bytes in order and few parts, however tiny the parts pushed", () => {
    const { parts, all } = pushAll(Array.from({ length: 300_000 }, (_, index) => 1 + (index % 3)));
    expect(Buffer.concat(parts).equals(all)).toBe(true);
    // 600,000 bytes: about ten 64 KiB blocks and the doubling run after them.
    expect(parts.length).toBeLessThan(40);
  });

  it("leaves a short list, and parts of socket-read size, as they are", () => {
    const few = pushAll([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(few.parts.length).toBe(8);
    const { parts } = pushAll(Array.from({ length: 40 }, () => 16 * 1024));
    expect(parts.length).toBe(40);
  });
});

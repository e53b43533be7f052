import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { makeDirectorySync } from "./make-directory.js";

describe("makeDirectorySync", () => {
  const root = mkdtempSync(join(tmpdir(), "sluice-make-directory-"));
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("makes every missing level with the mode, and keeps a directory already there", () => {
    const nested = join(root, "a", "b", "c");
    makeDirectorySync(nested, 0o700);
    for (const dir of [join(root, "a"), join(root, "a", "b"), nested])
      expect(statSync(dir).mode & 0o777).toBe(0o700);
    expect(() => makeDirectorySync(nested, 0o700)).not.toThrow();
  });

  it("fails as Node's recursive mkdir does on a file in the way", () => {
    const file = join(root, "file");
    writeFileSync(file, "");
    expect(() => makeDirectorySync(file, 0o700)).toThrow(expect.objectContaining({ code: "EEXIST" }));
    expect(() => makeDirectorySync(join(file, "under"), 0o700)).toThrow(
      expect.objectContaining({ code: "ENOTDIR" }),
    );
  });
});

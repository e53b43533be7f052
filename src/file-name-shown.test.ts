import { describe, expect, it } from "vitest";
import { fileNameShown, isFileContents } from "./file-name-shown.js";

describe("fileNameShown", () => {
  it("shows a file's name as it is, or as `quote` writes it", () => {
    expect(fileNameShown("/etc/sluice/key.pem")).toBe("/etc/sluice/key.pem");
    expect(fileNameShown("certs/{staging}.pem", JSON.stringify)).toBe('"certs/{staging}.pem"');
  });

  it.each([
    ["a PEM", "-----BEGIN PRIVATE KEY-----\nSeCrEtKeYmAtErIaL\n-----END PRIVATE KEY-----\n"],
    ["a PEM on one line", "-----BEGIN PRIVATE KEY----- SeCrEtKeYmAtErIaL -----END PRIVATE KEY-----"],
    ["a JSON document", '{"projects":[{"id":"a","deviceCheck":{"privateKey":"SeCrEtKeYmAtErIaL"}}]}'],
    ["several lines", "first line\nSeCrEtKeYmAtErIaL"],
    ["more than a path can hold", `/${"SeCrEtKeYmAtErIaL".repeat(300)}`],
  ])("shows only the start and length of %s given in place of a file's name", (_, value) => {
    expect(isFileContents(value)).toBe(true);
    const shown = fileNameShown(value, JSON.stringify);
    expect(shown).toBe(
      `${JSON.stringify(`${value.slice(0, 4)}…`)} (${value.length} characters), which looks like a file's contents, not its name`,
    );
    expect(shown).not.toContain("SeCrEtKeY");
  });
});

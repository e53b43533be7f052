import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { loadConfig } from "./config.js";
import { openSealedStore } from "./open-sealed-store.js";

describe("openSealedStore beside a data dir's master.key", () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  /** The warnings a start on a data dir whose master.key holds `fileText` (none: no file) logs. */
  async function warningsOfStart(masterKey: string, fileText: string | undefined) {
    const dir = mkdtempSync(join(tmpdir(), "sluice-key-file-"));
    dirs.push(dir);
    if (fileText !== undefined) writeFileSync(join(dir, "master.key"), fileText, { mode: 0o600 });
    const warnings: Array<{ fields: Record<string, unknown>; message: string }> = [];
    const { database } = await openSealedStore(
      loadConfig({ SLUICE_MASTER_KEY: masterKey }, { dataDir: dir }),
      (fields, message) => warnings.push({ fields, message }),
    );
    await database.close();
    return { file: join(dir, "master.key"), warnings };
  }

  /** Every run of 8 characters of `key`: none may be in what is logged. */
  const partsOf = (key: string) => Array.from({ length: key.length - 7 }, (_, at) => key.slice(at, at + 8));

  it("warns once, naming the file and never either key, when it holds another key than SLUICE_MASTER_KEY", async () => {
    const [given, other] = [randomBytes(32).toString("base64"), randomBytes(32).toString("base64")];
    const { file, warnings } = await warningsOfStart(given, `${other}\n`);
    expect(warnings).toEqual([
      {
        fields: { file },
        message: expect.stringContaining(
          `SLUICE_MASTER_KEY is set, so the master key file ${file} is ignored`,
        ),
      },
    ]);
    const logged = JSON.stringify(warnings);
    for (const part of [...partsOf(given), ...partsOf(other)]) expect(logged).not.toContain(part);
  });

  it("warns so when the file holds no key at all (it is ignored all the same)", async () => {
    const { file, warnings } = await warningsOfStart(randomBytes(32).toString("base64"), "not a key\n");
    expect(warnings.map((warning) => warning.fields)).toEqual([{ file }]);
  });

  it("says nothing when the file holds SLUICE_MASTER_KEY, or there is none", async () => {
    const given = randomBytes(32).toString("base64");
    expect((await warningsOfStart(given, `${given}\n`)).warnings).toEqual([]);
    expect((await warningsOfStart(given, undefined)).warnings).toEqual([]);
  });
});

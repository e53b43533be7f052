import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { cli } from "../../test/support/cli-run.js";

const day = 86_400_000;
const dateOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);

describe("sluice vault prune", () => {
  let dataDir: string;
  const saved = { ...process.env };
  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "sluice-vault-cli-"));
    process.env = { ...saved, SLUICE_DATA_DIR: dataDir };
    delete process.env.DATABASE_URL;
    delete process.env.SLUICE_VAULT_URL_TTL_SECONDS;
  });
  afterEach(() => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
  });

  /** An image of `date` (YYYY-MM-DD) in project prj_a of team t1, `bytes` long: its path. */
  const image = (date: string, bytes: number) => {
    const directory = join(dataDir, "vault", "t1", "generated-images", "prj_a", ...date.split("-"));
    mkdirSync(directory, { recursive: true });
    const file = join(directory, `${randomUUID()}.png`);
    writeFileSync(file, Buffer.alloc(bytes));
    return file;
  };

  it("deletes the images of the days before the date and prints what it removed, opening no database", async () => {
    const now = Date.now();
    const old = image(dateOf(now - 10 * day), 300);
    const older = image(dateOf(now - 20 * day), 200);
    const kept = image(dateOf(now - 2 * day), 100);
    const today = image(dateOf(now), 50);
    const before = dateOf(now - 3 * day);
    const result = await cli("vault", "prune", "--before", before);
    expect(result).toMatchObject({ code: 0, err: "" });
    expect(JSON.parse(result.out)).toEqual({ before, days: 2, files: 2, bytes: 500, left: 0 });
    expect([existsSync(old), existsSync(older), existsSync(kept), existsSync(today)]).toEqual([
      false,
      false,
      true,
      true,
    ]);
    // No database, no master key: the vault is all it reads.
    expect(readdirSync(dataDir)).toEqual(["vault"]);
  });

  it.each([
    ["tomorrow (today's images, still being written)", () => dateOf(Date.now() + day)],
    ["a date in the future", () => dateOf(Date.now() + 400 * day)],
  ])("refuses %s as a usage error, deleting nothing", async (_, before) => {
    const files = [image(dateOf(Date.now() - day), 1), image(dateOf(Date.now()), 1)];
    const result = await cli("vault", "prune", "--before", before());
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toMatch(
      /^error: --before: \d{4}-\d{2}-\d{2} would delete images whose signed URLs may still be valid \(SLUICE_VAULT_URL_TTL_SECONDS 3600, SLUICE_VAULT_TIMEOUT_MS 10000\): give a date no later than \d{4}-\d{2}-\d{2}$/,
    );
    expect(files.map((file) => existsSync(file))).toEqual([true, true]);
  });

  it("counts the URLs' lifetime from SLUICE_VAULT_URL_TTL_SECONDS", async () => {
    process.env.SLUICE_VAULT_URL_TTL_SECONDS = String(30 * 86_400);
    const file = image(dateOf(Date.now() - 20 * day), 1);
    const result = await cli("vault", "prune", "--before", dateOf(Date.now() - 10 * day));
    expect(result.code).toBe(2);
    expect(existsSync(file)).toBe(true);
  });

  it.each([
    [["vault", "prune"], /^error: Invalid vault prune: --before: is required/],
    [
      ["vault", "prune", "--before", "2020-01-01T00:00:00Z"],
      /^error: Invalid vault prune: --before: must be a date \(2026-11-01, UTC\)/,
    ],
    [["vault", "prune", "--before", "2020-02-30"], /^error: Invalid vault prune: --before: must be a date/],
    [["vault", "prune", "--before", "2020-01-01", "extra"], /^error: unexpected argument "extra"/],
    [
      ["vault", "prune", "--from", "2020-01-01"],
      /^error: vault prune does not take --from; it takes --before/,
    ],
    [["vault"], /^error: vault needs a subcommand: one of prune/],
  ])("refuses %j as a usage error", async (argv, message) => {
    const result = await cli(...argv);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toMatch(message);
  });

  it("says so when there is no local vault directory, deleting nothing", async () => {
    const result = await cli("vault", "prune", "--before", "2020-01-01");
    expect(result.code).toBe(0);
    expect(JSON.parse(result.out)).toEqual({ before: "2020-01-01", days: 0, files: 0, bytes: 0, left: 0 });
    expect(result.err).toBe(
      `warning: there is no local vault directory at ${join(dataDir, "vault")} (SLUICE_DATA_DIR/vault): no image was stored there yet, or SLUICE_DATA_DIR is not the gateway's\n`,
    );
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it("with the S3 vault, prunes the local directory and warns that the bucket is not pruned", async () => {
    Object.assign(process.env, {
      SLUICE_VAULT_S3_ENDPOINT: "http://127.0.0.1:9",
      SLUICE_VAULT_S3_BUCKET: "images",
      SLUICE_VAULT_S3_ACCESS_KEY_ID: "id",
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
    });
    const old = image("2020-01-01", 1);
    const result = await cli("vault", "prune", "--before", "2021-01-01");
    expect(result.code).toBe(0);
    expect(JSON.parse(result.out)).toMatchObject({ days: 1, files: 1 });
    expect(existsSync(old)).toBe(false);
    expect(result.err).toMatch(
      /^warning: the S3 vault \(SLUICE_VAULT_S3_ENDPOINT\) is not pruned by Sluice: set a lifecycle rule on the bucket \(docs\/images\.md\)/,
    );
  });
});

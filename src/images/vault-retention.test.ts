import { randomUUID } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  createVaultPruner,
  latestPrunableDate,
  minVaultRetentionDays,
  pruneLocalVault,
  vaultPruneProblem,
  vaultRetentionCutoff,
} from "./vault-retention.js";

const day = 86_400_000;
const id = randomUUID();

describe("pruneLocalVault", () => {
  let dataDir: string;
  let vault: string;
  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "sluice-vault-prune-"));
    vault = join(dataDir, "vault");
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  /** Writes `bytes` bytes at `path` (under the vault unless absolute), making its directories. */
  const put = (path: string, bytes = 10) => {
    const file = path.startsWith("/") ? path : join(vault, path);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, Buffer.alloc(bytes, 1));
    return file;
  };
  /** A vault image's path: `name`, or `<uuid>.png` as the vault names them. */
  const image = (team: string, project: string, date: string, name = `${randomUUID()}.png`) =>
    `${team}/generated-images/${project}/${date.replaceAll("-", "/")}/${name}`;

  it("removes the day directories before the date across teams and projects, keeps the rest, and removes emptied parents", async () => {
    put(image("t1", "prj_a", "2025-12-31"), 100);
    put(image("t1", "prj_a", "2025-12-31", `${randomUUID()}.webp`), 50);
    put(image("t1", "prj_a", "2026-03-31"), 7);
    const onTheDate = put(image("t1", "prj_a", "2026-04-01"), 1); // the date itself: kept
    const after = put(image("t1", "prj_a", "2026-04-02"), 1);
    put(image("t1", "prj_b", "2026-01-15"), 3); // the whole project goes
    put(image("t2", "prj_c", "2024-02-29"), 5); // the whole team goes
    const result = await pruneLocalVault(vault, "2026-04-01");
    expect(result).toEqual({ before: "2026-04-01", days: 4, files: 5, bytes: 165, left: 0 });
    expect(existsSync(onTheDate)).toBe(true);
    expect(existsSync(after)).toBe(true);
    // Emptied parents go (the 2025 year, March, prj_b, team t2), never the vault directory itself.
    expect(readdirSync(join(vault, "t1/generated-images/prj_a"))).toEqual(["2026"]);
    expect(readdirSync(join(vault, "t1/generated-images/prj_a/2026"))).toEqual(["04"]);
    expect(readdirSync(join(vault, "t1/generated-images"))).toEqual(["prj_a"]);
    expect(readdirSync(vault)).toEqual(["t1"]);
    expect(await pruneLocalVault(vault, "2026-04-01")).toEqual({
      before: "2026-04-01",
      days: 0,
      files: 0,
      bytes: 0,
      left: 0,
    });
    // Everything down to an empty vault directory, which stays.
    expect(await pruneLocalVault(vault, "2026-04-03")).toMatchObject({ days: 2, files: 2, bytes: 2 });
    expect(readdirSync(vault)).toEqual([]);
  });

  it("answers zeros for a vault directory that does not exist", async () => {
    expect(await pruneLocalVault(vault, "2026-04-01")).toEqual({
      before: "2026-04-01",
      days: 0,
      files: 0,
      bytes: 0,
      left: 0,
    });
    expect(existsSync(vault)).toBe(false);
  });

  it("removes a symlink in an old day directory as a link, never its target", async () => {
    const outside = put(join(dataDir, "outside", "keep.png"), 4);
    put(image("t1", "prj_a", "2020-01-01"), 9);
    const link = join(vault, image("t1", "prj_a", "2020-01-01", `${randomUUID()}.png`));
    symlinkSync(outside, link);
    const result = await pruneLocalVault(vault, "2021-01-01");
    expect(result).toMatchObject({ days: 1, files: 2, left: 0 });
    expect(existsSync(link)).toBe(false);
    expect(readFileSync(outside)).toEqual(Buffer.alloc(4, 1));
  });

  it("never descends a symlinked team, project or day directory: what they point at is untouched", async () => {
    // Directories outside the vault laid out as vault directories, with old images in them.
    const outsideTeam = join(dataDir, "elsewhere", "team");
    put(join(outsideTeam, "generated-images/prj_x/2020/01/01/a.png"));
    const outsideDay = join(dataDir, "elsewhere", "day");
    put(join(outsideDay, "a.png"));
    mkdirSync(vault, { recursive: true });
    symlinkSync(outsideTeam, join(vault, "linked"));
    put(image("t1", "prj_a", "2020-01-02"));
    symlinkSync(outsideDay, join(vault, "t1/generated-images/prj_a/2020/01/01"));
    mkdirSync(join(vault, "t1/generated-images/prj_b/2020/01"), { recursive: true });
    symlinkSync(
      join(outsideTeam, "generated-images/prj_x/2020/01/01"),
      join(vault, "t1/generated-images/prj_b/2020/01/03"),
    );
    const result = await pruneLocalVault(vault, "2021-01-01");
    expect(result).toMatchObject({ days: 1, files: 1 });
    expect(existsSync(join(outsideTeam, "generated-images/prj_x/2020/01/01/a.png"))).toBe(true);
    expect(existsSync(join(outsideDay, "a.png"))).toBe(true);
  });

  it("touches nothing outside the vault directory, nor what is not laid out as the vault's images", async () => {
    // The same layout beside the vault, in the data dir.
    const beside = put(join(dataDir, "other", image("t1", "prj_a", "2020-01-01")));
    const dataFile = put(join(dataDir, "sluice.db"));
    const notes = put("t1/notes.txt");
    const otherKind = put("t1/other-images/prj_a/2020/01/01/a.png");
    const badDate = put("t1/generated-images/prj_a/20/01/01/a.png");
    const hidden = put("t1/generated-images/.prj/2020/01/01/a.png");
    const extra = put("t1/generated-images/prj_a/2020/01/01/deeper/a.png");
    const result = await pruneLocalVault(vault, "2021-01-01");
    // The day directory holding a directory is emptied of its files but stays, with what is left counted.
    expect(result).toEqual({ before: "2021-01-01", days: 0, files: 0, bytes: 0, left: 1 });
    for (const file of [beside, dataFile, notes, otherKind, badDate, hidden, extra])
      expect(existsSync(file)).toBe(true);
  });

  it("deletes from a day directory only the files named as the vault names its images, and never a day no calendar has", async () => {
    const id = "3f2b8c1e-9a4d-4e6f-8b7a-1c2d3e4f5a6b";
    const images = [`${id}.png`, `${id}.jpg`, `${id}.bin`].map((name) =>
      put(image("t1", "prj_a", "2020-01-01", name), 2),
    );
    const others = ["README", ".DS_Store", "notes.txt", `${id}.png.bak`, `${id.toUpperCase()}.png`].map(
      (name) => put(image("t1", "prj_a", "2020-01-01", name)),
    );
    // 2025 is no leap year, and no month has a 31st of February: never a directory the vault wrote.
    const noDays = ["2025/02/29", "2024/02/30", "2024/04/31"].map((date) =>
      put(`t1/generated-images/prj_a/${date}/${id}.png`),
    );
    const result = await pruneLocalVault(vault, "2026-01-01");
    expect(result).toEqual({ before: "2026-01-01", days: 0, files: 3, bytes: 6, left: 5 });
    for (const file of images) expect(existsSync(file)).toBe(false);
    for (const file of [...others, ...noDays]) expect(existsSync(file)).toBe(true);
  });

  it("stops inside a day directory when asked, not after its last file: a day of many files does not hold the gateway's close", async () => {
    const day = join(vault, image("t1", "prj_a", "2020-01-01", ""));
    for (let i = 0; i < 100; i++) put(join(day, `${randomUUID()}.png`), 1);
    // Asked before each file too: it stops once half of them are gone.
    const result = await pruneLocalVault(vault, "2021-01-01", {
      stopped: () => existsSync(day) && readdirSync(day).length <= 50,
    });
    expect(result).toMatchObject({ days: 0, files: 50 });
    expect(readdirSync(day)).toHaveLength(50);
    // The next prune takes the rest.
    expect(await pruneLocalVault(vault, "2021-01-01")).toMatchObject({ days: 1, files: 50 });
  });

  it("refuses a date that is not a calendar date", async () => {
    await expect(pruneLocalVault(vault, "2026-02-30")).rejects.toThrow(/not a date/);
    await expect(pruneLocalVault(vault, "2026-04-01T00:00:00Z")).rejects.toThrow(/not a date/);
  });
});

describe("the latest date a prune may be given", () => {
  it("leaves every image whose URL may still be valid: the URL's TTL, the vault's time-out and a second back from now", () => {
    const ttl = 3600;
    const timeout = 10_000;
    const margin = ttl * 1000 + timeout + 1000;
    // Just after a midnight plus the margin, that midnight is allowed; a millisecond before it, not.
    const midnight = Date.parse("2026-05-14T00:00:00Z");
    expect(latestPrunableDate(new Date(midnight + margin), ttl, timeout)).toBe("2026-05-14");
    expect(latestPrunableDate(new Date(midnight + margin - 1), ttl, timeout)).toBe("2026-05-13");
    const now = new Date(midnight + margin - 1);
    expect(vaultPruneProblem("2026-05-13", now, ttl, timeout)).toBeUndefined();
    expect(vaultPruneProblem("2026-05-14", now, ttl, timeout)).toMatch(
      /^2026-05-14 would delete images whose signed URLs may still be valid \(SLUICE_VAULT_URL_TTL_SECONDS 3600, SLUICE_VAULT_TIMEOUT_MS 10000\): give a date no later than 2026-05-13$/,
    );
    // A date in the future, and a long TTL, too.
    expect(vaultPruneProblem("2030-01-01", now, ttl, timeout)).toMatch(/no later than 2026-05-13$/);
    expect(vaultPruneProblem("2026-05-01", now, 14 * 86_400, timeout)).toMatch(/no later than 2026-04-30$/);
  });

  it("for the retention: the date its days back, held to the latest date a prune may be given", () => {
    const now = new Date("2026-05-14T10:00:00Z");
    expect(vaultRetentionCutoff(now, 30, 3600, 10_000)).toBe("2026-04-14");
    // A retention shorter than the URLs' lifetime (the settings refuse it) still deletes no image a URL may reach.
    expect(vaultRetentionCutoff(now, 1, 7 * 86_400, 10_000)).toBe("2026-05-07");
    // A retention reaching back past the year 0 (or past the dates a Date can hold) deletes nothing, and fails nothing.
    expect(vaultRetentionCutoff(now, 1_000_000, 3600, 10_000)).toBe("0000-01-01");
    expect(vaultRetentionCutoff(now, 200_000_000, 3600, 10_000)).toBe("0000-01-01");
    expect(minVaultRetentionDays(3600, 10_000)).toBe(1);
    expect(minVaultRetentionDays(86_400, 10_000)).toBe(2);
    expect(minVaultRetentionDays(86_400 - 11, 10_000)).toBe(1);
    expect(minVaultRetentionDays(86_400 - 10, 10_000)).toBe(2);
  });
});

describe("createVaultPruner", () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = mkdtempSync(join(tmpdir(), "sluice-vault-pruner-"));
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  it("prunes the days past the retention on its timer, and stops", async () => {
    const vault = join(dataDir, "vault");
    const now = new Date();
    const old = new Date(now.getTime() - 40 * day).toISOString().slice(0, 10).replaceAll("-", "/");
    const recent = new Date(now.getTime() - 2 * day).toISOString().slice(0, 10).replaceAll("-", "/");
    for (const date of [old, recent]) {
      mkdirSync(join(vault, "t1/generated-images/prj_a", date), { recursive: true });
      writeFileSync(join(vault, "t1/generated-images/prj_a", date, `${id}.png`), "x");
    }
    const pruned = vi.fn();
    const failed = vi.fn();
    const pruner = createVaultPruner({
      directory: vault,
      retentionDays: 30,
      urlTtlSeconds: 3600,
      vaultTimeoutMs: 10_000,
      now: () => now,
      firstRunDelayMs: 0,
      intervalMs: 10,
      onPruned: pruned,
      onFailed: failed,
    });
    await vi.waitFor(() => expect(pruned).toHaveBeenCalledTimes(1));
    await pruner.stop();
    expect(pruned.mock.calls[0]?.[0]).toMatchObject({ days: 1, files: 1, bytes: 1 });
    expect(existsSync(join(vault, "t1/generated-images/prj_a", old))).toBe(false);
    expect(existsSync(join(vault, "t1/generated-images/prj_a", recent, `${id}.png`))).toBe(true);
    // Runs that removed nothing are not reported; none fails.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(pruned).toHaveBeenCalledTimes(1);
    expect(failed).not.toHaveBeenCalled();
  });
  it("keeps its timer with a retention longer than any date (it deletes nothing then), the gateway running on", async () => {
    const vault = join(dataDir, "vault");
    const old = join(vault, `t1/generated-images/prj_a/2020/01/01/${randomUUID()}.png`);
    mkdirSync(dirname(old), { recursive: true });
    writeFileSync(old, "x");
    const now = vi.fn(() => new Date());
    const pruned = vi.fn();
    const failed = vi.fn();
    const pruner = createVaultPruner({
      directory: vault,
      retentionDays: 200_000_000,
      urlTtlSeconds: 3600,
      vaultTimeoutMs: 10_000,
      now,
      firstRunDelayMs: 0,
      intervalMs: 10,
      onPruned: pruned,
      onFailed: failed,
    });
    try {
      // A run that threw outside its own handling ended the timer (and, unhandled, the gateway).
      await vi.waitFor(() => expect(now.mock.calls.length).toBeGreaterThanOrEqual(3));
    } finally {
      await pruner.stop();
    }
    expect(failed).not.toHaveBeenCalled();
    expect(pruned).not.toHaveBeenCalled();
    expect(existsSync(old)).toBe(true);
  });
});

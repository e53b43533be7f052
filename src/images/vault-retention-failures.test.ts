import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

/** Paths whose reads (opendir) or deletes (unlink) fail with EACCES, as another user's directory does. */
const unreadable = new Set<string>();
const undeletable = new Set<string>();
const denied = (call: string, path: string) =>
  Object.assign(new Error(`EACCES: permission denied, ${call} '${path}'`), { code: "EACCES" });

vi.mock("node:fs/promises", async (importOriginal) => {
  const actual = await importOriginal<typeof import("node:fs/promises")>();
  return {
    ...actual,
    opendir: (async (path: string, options?: object) => {
      if (unreadable.has(String(path))) throw denied("opendir", String(path));
      return actual.opendir(path, options as never);
    }) as typeof actual.opendir,
    unlink: async (path: string) => {
      if (undeletable.has(dirname(String(path)))) throw denied("unlink", String(path));
      return actual.unlink(path);
    },
  };
});

const { pruneLocalVault } = await import("./vault-retention.js");

/**
 * A directory the prune may not read or delete from (a day directory left by a gateway once run as
 * root, another user's): the walk stopped there and deleted nothing after it, every hour again, so
 * one such directory kept every later day of every team for good. It goes on with the rest now, and
 * fails once it has, naming what it could not prune.
 */
describe("pruneLocalVault past a directory it may not read or delete from", () => {
  let vault: string;
  beforeEach(() => {
    vault = join(mkdtempSync(join(tmpdir(), "sluice-vault-denied-")), "vault");
  });
  afterEach(() => {
    unreadable.clear();
    undeletable.clear();
    rmSync(dirname(vault), { recursive: true, force: true });
  });

  const put = (team: string, date: string) => {
    const file = join(vault, team, "generated-images", "prj_a", ...date.split("-"), `${randomUUID()}.png`);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, "x");
    return file;
  };

  it.each([
    ["read", unreadable],
    ["deleted from", undeletable],
  ])("prunes every other day when one may not be %s, then fails naming it", async (_what, failing) => {
    const blocked = put("TEAMAAAAAA", "2025-01-01");
    const others = [
      put("TEAMAAAAAA", "2025-01-02"),
      put("TEAMBBBBBB", "2025-01-01"),
      put("TEAMCCCCCC", "2025-01-03"),
    ];
    const kept = put("TEAMBBBBBB", "2026-06-01");
    failing.add(dirname(blocked));
    await expect(pruneLocalVault(vault, "2026-01-01")).rejects.toThrow(
      /1 directory of the vault could not be pruned .*the rest was: 3 day directories, 3 files/,
    );
    expect(others.filter((file) => existsSync(file))).toEqual([]);
    expect([existsSync(blocked), existsSync(kept)]).toEqual([true, true]);
    // Once it may, the next prune takes the day left.
    failing.clear();
    expect(await pruneLocalVault(vault, "2026-01-01")).toMatchObject({ days: 1, files: 1 });
  });
});

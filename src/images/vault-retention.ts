import type { Dir, Dirent } from "node:fs";
import { lstat, opendir, realpath, rmdir, unlink } from "node:fs/promises";
import { join, sep } from "node:path";
import {
  earliestCutoffMs,
  type PruneSchedule,
  type ScheduledPrunes,
  schedulePrunes,
} from "../periodic-prune.js";
import { isSafeVaultPath, teamIdPattern } from "./vault-store.js";

/**
 * Local vault retention: `sluice vault prune --before DATE` and SLUICE_VAULT_RETENTION_DAYS. The
 * images saved to the local vault (`<team>/generated-images/<project>/<yyyy>/<mm>/<dd>/<uuid>.<ext>`
 * under SLUICE_DATA_DIR/vault) were never deleted, so the disk filled for as long as projects
 * saved images. Their URLs are signed once, when the image is stored, and never again: an image
 * whose URLs have all expired is reachable by no one.
 *
 * An image of day D was stored before D + 1 (midnight, UTC) and its URL signed once the write
 * ended, within SLUICE_VAULT_TIMEOUT_MS; the URL names its expiry as a whole second, rounded up,
 * SLUICE_VAULT_URL_TTL_SECONDS on. So the images of the days before DATE have no valid URL once
 * DATE + TTL + time-out + 1 s has passed: no date later than that is pruned. That also keeps the
 * day being written today, and any write still under way, out of reach by construction.
 */

const dayMs = 86_400_000;

/** How long after the end of an image's day a URL to it may still be valid. */
function urlReachMs(urlTtlSeconds: number, vaultTimeoutMs: number): number {
  return urlTtlSeconds * 1000 + vaultTimeoutMs + 1000;
}

/** The latest date (YYYY-MM-DD, UTC) `--before` may name at `now`. */
export function latestPrunableDate(now: Date, urlTtlSeconds: number, vaultTimeoutMs: number): string {
  return new Date(now.getTime() - urlReachMs(urlTtlSeconds, vaultTimeoutMs)).toISOString().slice(0, 10);
}

/** Why `before` may not be pruned at `now` (an image of its days may have a URL still valid), or undefined. */
export function vaultPruneProblem(
  before: string,
  now: Date,
  urlTtlSeconds: number,
  vaultTimeoutMs: number,
): string | undefined {
  const latest = latestPrunableDate(now, urlTtlSeconds, vaultTimeoutMs);
  if (before <= latest) return undefined;
  return (
    `${before} would delete images whose signed URLs may still be valid (SLUICE_VAULT_URL_TTL_SECONDS ` +
    `${urlTtlSeconds}, SLUICE_VAULT_TIMEOUT_MS ${vaultTimeoutMs}): give a date no later than ${latest}`
  );
}

/** The fewest days SLUICE_VAULT_RETENTION_DAYS may keep: every URL's reach, in whole days, at least 1. */
export function minVaultRetentionDays(urlTtlSeconds: number, vaultTimeoutMs: number): number {
  return Math.max(1, Math.ceil(urlReachMs(urlTtlSeconds, vaultTimeoutMs) / dayMs));
}

/**
 * The date whose earlier days `retentionDays` no longer keeps at `now`, never one a URL may reach.
 * A retention reaching back past the year 0 (the setting has no upper bound) gives 0000-01-01,
 * which prunes nothing: neither a negative year nor a date beyond what a Date holds (a RangeError).
 */
export function vaultRetentionCutoff(
  now: Date,
  retentionDays: number,
  urlTtlSeconds: number,
  vaultTimeoutMs: number,
): string {
  const kept = Math.max(now.getTime() - retentionDays * dayMs, earliestCutoffMs);
  const latest = now.getTime() - urlReachMs(urlTtlSeconds, vaultTimeoutMs);
  return new Date(Math.min(kept, latest)).toISOString().slice(0, 10);
}

/** True for YYYY-MM-DD naming a day of the calendar. */
export function isCalendarDate(text: string): boolean {
  if (!/^\d{4}-\d{2}-\d{2}$/.test(text)) return false;
  const parsed = new Date(`${text}T00:00:00Z`);
  return !Number.isNaN(parsed.getTime()) && parsed.toISOString().slice(0, 10) === text;
}

export interface VaultPruneResult {
  /** The date given: the days before it were pruned. */
  before: string;
  /** Day directories removed. */
  days: number;
  /** Files (and symbolic links, as links) removed from them. */
  files: number;
  /** Their sizes summed (a link's own size, never its target's). */
  bytes: number;
  /**
   * Entries found in a day directory to prune that are no image of the vault's (a directory, a
   * file not named `<uuid>.<ext>`): left, with the day directory.
   */
  left: number;
}

/** The directory levels under the vault, each name's rule: team, `generated-images`, project, year, month, day. */
const levels: ReadonlyArray<(name: string) => boolean> = [
  (name) => teamIdPattern.test(name),
  (name) => name === "generated-images",
  (name) => isSafeVaultPath(`team/${name}`),
  (name) => /^\d{4}$/.test(name),
  (name) => /^(0[1-9]|1[0-2])$/.test(name),
  (name) => /^(0[1-9]|[12]\d|3[01])$/.test(name),
];

/**
 * The name of an image the vault stored: `<uuid>.<ext>` (vaultPath: a random UUID, in lower case,
 * and the extension of its media type).
 */
const imageName = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[a-z0-9]{1,8}$/;

/**
 * Deletes the local vault's day directories (and their files) before `before` (YYYY-MM-DD, UTC),
 * every team's and project's, and the directories above them left empty (the vault directory
 * itself stays). Only what is laid out as the vault lays out its images is looked at: another name
 * at any level (a file, a hidden name, another folder, a day no calendar has, a file in a day
 * directory not named `<uuid>.<ext>`) is left alone. Symbolic links are never
 * followed: one in place of a directory is not entered, one inside a day directory is removed as a
 * link (its target stays); each day directory's real path is checked to lie where the walk expects
 * it, inside the vault, before its files are removed. A directory or another name inside a day
 * directory is left, with the day directory, and counted as `left`. Files already gone (another prune) are no failure.
 * A directory it may not read or delete from (EACCES: a gateway once run as another user made it)
 * is passed, and the walk goes on with the rest; once it has ended, the prune fails naming the
 * first such directory and what the rest deleted. Stopping at the first kept every later day of
 * every team for good, the same directory failing each hour.
 * `stopped` is asked between directories and before each file: true ends the prune there (the
 * gateway is closing), so a day of many thousand files does not hold the close; the files left
 * go with the next prune.
 * The caller holds `before` to a date whose images no URL may reach (vaultPruneProblem), so today's
 * directory, where the gateway writes, is never among them.
 */
export async function pruneLocalVault(
  directory: string,
  before: string,
  { stopped = () => false }: { stopped?: () => boolean } = {},
): Promise<VaultPruneResult> {
  if (!isCalendarDate(before)) throw new Error(`${JSON.stringify(before)} is not a date (YYYY-MM-DD)`);
  const result: VaultPruneResult = { before, days: 0, files: 0, bytes: 0, left: 0 };
  /** The directories passed for an error, and the first error. */
  const failed = { directories: 0, first: undefined as unknown };
  /** Passes a directory for `error`: nothing was removed there. */
  const pass = (error: unknown): false => {
    failed.directories++;
    failed.first ??= error;
    return false;
  };
  let root: string;
  try {
    // The vault directory may itself be a link (a data dir on another disk): resolved once, here.
    root = await realpath(directory);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return result;
    throw error;
  }

  /** Prunes under `names` (the path below the vault): true when it removed anything there. */
  const walk = async (names: string[]): Promise<boolean> => {
    if (names.length === levels.length) return pruneDay(names);
    let removed = false;
    try {
      for await (const entry of entriesOf(join(root, ...names))) {
        if (stopped()) break;
        if (await pruneEntry(names, entry)) removed = true;
      }
    } catch (error) {
      pass(error);
    }
    return removed;
  };

  /** Prunes below `entry` of the directory at `names`: true when it removed anything there. */
  const pruneEntry = async (names: string[], entry: Dirent): Promise<boolean> => {
    // A Dirent is the entry itself (lstat's answer where the file system does not say): a link
    // to a directory is a link, never entered.
    if (!entry.isDirectory() || !levels[names.length]?.(entry.name)) return false;
    const child = [...names, entry.name];
    // Below the project, a year or month after `before`'s is not entered (`2026`, `2026-04`).
    const dated = child.slice(3).join("-");
    if (dated > before.slice(0, dated.length)) return false;
    if (!(await walk(child))) return false;
    // Emptied by this prune, it goes; one still holding anything (or holding something again:
    // the gateway making today's directory, whose recursive mkdir makes a parent removed
    // meanwhile again) stays.
    await removeEmptyDirectory(join(root, ...child)).catch(pass);
    return true;
  };

  const pruneDay = async (names: string[]): Promise<boolean> => {
    const path = join(root, ...names);
    const date = names.slice(3).join("-");
    // A day no calendar has (2025/02/29) is no directory the vault wrote: not its images.
    if (date >= before || !isCalendarDate(date)) return false;
    // Replaced by a link since it was listed, or reached through one: not the vault's, not entered.
    if ((await realpath(path).catch(() => "")) !== path || !path.startsWith(root + sep)) return false;
    let removed = false;
    try {
      for await (const entry of entriesOf(path)) {
        if (stopped()) return removed;
        if (entry.isDirectory() || !imageName.test(entry.name)) {
          result.left++;
          continue;
        }
        const file = join(path, entry.name);
        try {
          const { size } = await lstat(file);
          await unlink(file);
          result.files++;
          result.bytes += size;
          removed = true;
        } catch (error) {
          if ((error as NodeJS.ErrnoException).code === "ENOENT") continue;
          throw error;
        }
      }
    } catch (error) {
      // A directory that cannot be read, or whose file cannot be deleted (whether a file may be
      // deleted is its directory's: the next would fail as this one did), is passed.
      pass(error);
      return removed;
    }
    if (await removeEmptyDirectory(path).catch(pass)) {
      result.days++;
      return true;
    }
    return removed;
  };

  await walk([]);
  if (failed.first !== undefined) {
    const { directories, first } = failed;
    throw new Error(
      `${directories} ${directories === 1 ? "directory" : "directories"} of the vault could not be pruned ` +
        `(the first: ${(first as Error).message}); the rest was: ${result.days} day directories, ` +
        `${result.files} files, ${result.bytes} bytes deleted`,
    );
  }
  return result;
}

/**
 * A directory's entries as they are read, a batch at a time, none when it is gone (another prune
 * removed it) or no longer a directory. Listed whole (`readdir`), a day of 100,000 images held the
 * event loop ~45 ms in the one callback that made every entry (200,000: 110 ms and more); an
 * entry removed while the listing is read is none the others miss (POSIX leaves only whether the
 * removed one is listed unspecified, and it is gone then, ENOENT). Leaving the loop closes it.
 */
async function* entriesOf(path: string): AsyncGenerator<Dirent> {
  let directory: Dir;
  try {
    directory = await opendir(path, { bufferSize: 256 });
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR") return;
    throw error;
  }
  yield* directory;
}

/** Removes `path` if it is an empty directory: true when it did (or it is gone already). */
async function removeEmptyDirectory(path: string): Promise<boolean> {
  try {
    await rmdir(path);
    return true;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return true;
    if (code === "ENOTEMPTY" || code === "EEXIST") return false;
    throw error;
  }
}

/** The timer's settings (`PruneSchedule`); `onFailed` hears of a prune that failed (a directory it may not read, say). */
export interface VaultPrunerOptions extends PruneSchedule {
  /** The local vault directory (SLUICE_DATA_DIR/vault). */
  directory: string;
  retentionDays: number;
  urlTtlSeconds: number;
  vaultTimeoutMs: number;
  now: () => Date;
  /** A prune that removed anything: what. */
  onPruned: (result: VaultPruneResult) => void;
}

/**
 * Prunes the local vault's days older than `retentionDays` on a timer that does not keep the
 * process alive. Runs never overlap: the next is scheduled when one ends.
 */
export function createVaultPruner(options: VaultPrunerOptions): ScheduledPrunes {
  return schedulePrunes(async (stopped) => {
    const before = vaultRetentionCutoff(
      options.now(),
      options.retentionDays,
      options.urlTtlSeconds,
      options.vaultTimeoutMs,
    );
    const result = await pruneLocalVault(options.directory, before, { stopped });
    if (result.files > 0 || result.days > 0) options.onPruned(result);
  }, options);
}

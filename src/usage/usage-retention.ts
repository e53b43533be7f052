import {
  earliestCutoffMs,
  type PruneSchedule,
  type ScheduledPrunes,
  schedulePrunes,
} from "../periodic-prune.js";
import type { UsageRepository } from "../storage/usage-repository.js";

/**
 * Usage retention: SLUICE_USAGE_RETENTION_DAYS and `sluice usage prune`. A usage row is written for
 * every authenticated request and none was ever deleted, so a busy gateway's table grew without end.
 *
 * Two calendar months (UTC) are never deleted, whatever is asked: the current one, whose spend the
 * spend caps sum, and the previous one, which reports commonly read (last month's bill; the admin
 * report's default window, the last 30 days, reaches into it). The start of the previous month is at
 * most 61 days and a few hours back (on the last day of a 31-day month after a 31-day month), hence
 * the minimum of 62 days: any retention of at least that keeps both months whole, every day of the
 * year. The cutoff is also held to that start, so the rule holds whatever clock or setting reaches it.
 */
export const minRetentionDays = 62;

/** How many rows one delete statement removes: a few milliseconds of the table's write lock. */
const pruneBatchRows = 1000;

/** The start of the previous calendar month (UTC) at `now`: no row from then on is ever pruned. */
export function keptMonthsStart(now: Date): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
}

/** Rows created before this instant are older than `retentionDays` allow at `now`. */
export function retentionCutoff(now: Date, retentionDays: number): Date {
  const cutoff = Math.max(now.getTime() - retentionDays * 86_400_000, earliestCutoffMs);
  return new Date(Math.min(cutoff, keptMonthsStart(now).getTime()));
}

/**
 * Why `before` may not be pruned at `now` (it falls inside the current or previous calendar month,
 * which are always kept), or undefined when it may.
 */
export function prunedMonthsProblem(before: Date, now: Date): string | undefined {
  const kept = keptMonthsStart(now);
  if (before.getTime() <= kept.getTime()) return undefined;
  return (
    `${before.toISOString()} is inside the current or previous calendar month (UTC), which are always ` +
    `kept for spend caps and reports: give a date no later than ${kept.toISOString().slice(0, 10)}`
  );
}

export interface PruneOptions {
  /** Rows per delete statement (tests give a small one to count the batches). */
  batchSize?: number;
  /** Asked between batches: true ends the prune there (the gateway is closing). */
  stopped?: () => boolean;
}

/**
 * Deletes the usage rows created before `before` (ISO), in batches of `batchSize` rows, each its
 * own short statement and transaction: a first run over a large backlog never holds a long lock or
 * transaction, and the usage writes and requests are served between batches (SQLite's statements
 * run on the event loop, so it is given back after each). A batch that deletes fewer than it asked
 * for found no more. Answers how many rows were deleted. Deleting is idempotent: instances pruning
 * the same PostgreSQL at once each delete rows the other has not locked, and together delete all.
 */
export async function pruneUsage(
  repository: Pick<UsageRepository, "deleteBefore">,
  before: string,
  { batchSize = pruneBatchRows, stopped = () => false }: PruneOptions = {},
): Promise<number> {
  let deleted = 0;
  for (;;) {
    const count = await repository.deleteBefore(before, batchSize);
    deleted += count;
    if (count < batchSize || stopped()) return deleted;
    await new Promise((resolve) => setImmediate(resolve));
  }
}

/** The timer's settings (`PruneSchedule`); `onFailed` hears of a prune that failed (the database down, say). */
export interface UsagePrunerOptions extends PruneSchedule {
  repository: Pick<UsageRepository, "deleteBefore">;
  retentionDays: number;
  now: () => Date;
  batchSize?: number;
  /** A prune that deleted rows: how many, and the cutoff. */
  onPruned: (deleted: number, before: string) => void;
}

/**
 * Prunes the usage rows older than `retentionDays` on a timer that does not keep the process
 * alive. Runs never overlap: the next is scheduled when one ends.
 */
export function createUsagePruner(options: UsagePrunerOptions): ScheduledPrunes {
  return schedulePrunes(async (stopped) => {
    const before = retentionCutoff(options.now(), options.retentionDays).toISOString();
    const deleted = await pruneUsage(options.repository, before, {
      ...(options.batchSize !== undefined ? { batchSize: options.batchSize } : {}),
      stopped,
    });
    if (deleted > 0) options.onPruned(deleted, before);
  }, options);
}

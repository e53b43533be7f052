import type { UsageRepository } from "../storage/usage-repository.js";

interface MonthSpend {
  month: string;
  /** When `base` was read; -Infinity until the first read of the month succeeds. */
  readAt: number;
  base: number;
  /** Costs this instance added since `base` was read. */
  local: number;
  /** The read in flight, shared by every request that finds the figure stale meanwhile. */
  loading?: Promise<void> | undefined;
}

/**
 * Month-to-date spend per project, for the optional monthly cap. Reads the database at most once
 * per `refreshMs` per project and adds what this instance spent since, so the hot path does not
 * wait on the database. Several instances each see the others' spend within `refreshMs`.
 */
export function createSpendGuard(deps: { usage: UsageRepository; now: () => Date; refreshMs?: number }) {
  const refreshMs = deps.refreshMs ?? 5000;
  const cache = new Map<string, MonthSpend>();

  const monthStart = (date: Date) => `${date.toISOString().slice(0, 7)}-01T00:00:00.000Z`;

  /** Costs added while the read is in flight stay local: their rows may not be written yet. */
  async function refresh(projectId: string, entry: MonthSpend): Promise<void> {
    const addedBefore = entry.local;
    try {
      entry.base = await deps.usage.spendSince(projectId, entry.month);
      entry.local -= addedBefore;
      entry.readAt = deps.now().getTime();
    } finally {
      entry.loading = undefined;
    }
  }

  return {
    /** Known spend this calendar month (UTC), in USD. */
    async monthToDate(projectId: string): Promise<number> {
      const now = deps.now();
      const month = monthStart(now);
      let entry = cache.get(projectId);
      if (entry?.month !== month) {
        entry = { month, readAt: Number.NEGATIVE_INFINITY, base: 0, local: 0 };
        cache.set(projectId, entry);
      }
      if (now.getTime() - entry.readAt > refreshMs) {
        entry.loading ??= refresh(projectId, entry);
        try {
          await entry.loading;
        } catch (error) {
          // The database is down: keep judging on the last known figure rather than failing open.
          if (entry.readAt === Number.NEGATIVE_INFINITY) throw error;
        }
      }
      return entry.base + entry.local;
    },
    /** Adds a cost recorded on this instance and not yet read back from the database. */
    add(projectId: string, usd: number | null): void {
      if (!usd) return;
      const entry = cache.get(projectId);
      if (entry) entry.local += usd;
    },
  };
}

export type SpendGuard = ReturnType<typeof createSpendGuard>;

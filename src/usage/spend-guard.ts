import type { UsageRepository } from "../storage/usage-repository.js";

/**
 * Month-to-date spend per project, for the optional monthly cap. Reads the database at most once
 * per `refreshMs` per project and adds what this instance spent since, so the hot path does not
 * wait on the database. Several instances each see the others' spend within `refreshMs`.
 */
export function createSpendGuard(deps: { usage: UsageRepository; now: () => Date; refreshMs?: number }) {
  const refreshMs = deps.refreshMs ?? 5000;
  const cache = new Map<
    string,
    { month: string; readAt: number; base: number; local: number; loading?: Promise<void> }
  >();

  const monthStart = (date: Date) => `${date.toISOString().slice(0, 7)}-01T00:00:00.000Z`;

  async function refresh(projectId: string, month: string): Promise<void> {
    const base = await deps.usage.spendSince(projectId, month);
    cache.set(projectId, { month, readAt: deps.now().getTime(), base, local: 0 });
  }

  return {
    /** Known spend this calendar month (UTC), in USD. */
    async monthToDate(projectId: string): Promise<number> {
      const now = deps.now();
      const month = monthStart(now);
      const entry = cache.get(projectId);
      if (!entry || entry.month !== month || now.getTime() - entry.readAt > refreshMs) {
        try {
          await refresh(projectId, month);
        } catch (error) {
          // The database is down: keep judging on the last known figure rather than failing open.
          if (!entry || entry.month !== month) throw error;
        }
      }
      const current = cache.get(projectId);
      return (current?.base ?? 0) + (current?.local ?? 0);
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

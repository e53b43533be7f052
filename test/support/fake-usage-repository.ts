import {
  countsAsUnpriced,
  type SpendSince,
  type UsageRecord,
  type UsageRepository,
} from "../../src/storage/usage-repository.js";

/** A usage repository that stores nothing: each test overrides what it watches or breaks. */
export function fakeUsageRepository(overrides: Partial<UsageRepository> = {}): UsageRepository {
  return {
    insertBatch: async () => {},
    report: async () => [],
    spendSince: async () => spent(0),
    count: async () => 0,
    deleteBefore: async () => 0,
    ...overrides,
  };
}

/** The error a database outage shows: a refused connection, as pg reports it. */
export function connectionRefused(): Error {
  return Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
}

/**
 * A spend read of `totalUsd` whose largest row is `largestUsd` (none known: 0), with `unpricedCalls`
 * calls of unknown cost.
 */
export function spent(totalUsd: number, largestUsd = 0, unpricedCalls = 0): SpendSince {
  return { totalUsd, largestUsd, unpricedCalls };
}

/** The spend read of `rows` (of the project, in the span asked for), as the database answers it. */
export function spendOf(rows: readonly UsageRecord[]): SpendSince {
  const costs = rows.flatMap((row) => (row.cost_usd === null ? [] : [row.cost_usd]));
  return spent(
    costs.reduce((sum, cost) => sum + cost, 0),
    costs.reduce((largest, cost) => Math.max(largest, cost), 0),
    rows.reduce((calls, row) => calls + (countsAsUnpriced(row) ? row.requests : 0), 0),
  );
}

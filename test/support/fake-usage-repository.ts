import type { UsageRepository } from "../../src/storage/usage-repository.js";

/** A usage repository that stores nothing: each test overrides what it watches or breaks. */
export function fakeUsageRepository(overrides: Partial<UsageRepository> = {}): UsageRepository {
  return {
    insertBatch: async () => {},
    report: async () => [],
    spendSince: async () => 0,
    count: async () => 0,
    deleteBefore: async () => 0,
    ...overrides,
  };
}

/** The error a database outage shows: a refused connection, as pg reports it. */
export function connectionRefused(): Error {
  return Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" });
}

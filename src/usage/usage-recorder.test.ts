import { setImmediate as nextTurn } from "node:timers/promises";
import { describe, expect, it } from "vitest";
import type { UsageRecord, UsageRepository } from "../storage/usage-repository.js";
import { createUsageRecorder } from "./usage-recorder.js";

function row(index: number): UsageRecord {
  return {
    request_id: `req_${String(index).padStart(32, "0")}`,
    project_id: "prj_test",
    key_id: null,
    endpoint: "proxy",
    provider: "provider-a",
    model: "gpt-4o-mini",
    status: 200,
    error_code: null,
    input_tokens: 1,
    output_tokens: 1,
    cached_tokens: null,
    reasoning_tokens: null,
    cost_usd: null,
    latency_ms: 1,
    ttfb_ms: 1,
    streamed: 0,
    outcome: "ok",
    auth_method: "test-key",
    client_ip: "127.0.0.1",
    created_at: new Date(0).toISOString(),
  };
}

function recordingRepository(): UsageRepository & { batches: number[]; rows: string[] } {
  const batches: number[] = [];
  const rows: string[] = [];
  return {
    batches,
    rows,
    async insertBatch(batch) {
      await nextTurn();
      batches.push(batch.length);
      rows.push(...batch.map((written) => written.request_id));
    },
    report: async () => [],
    spendSince: async () => 0,
    count: async () => rows.length,
  };
}

describe("usage recorder", () => {
  it("writes full batches at once and leaves rows that trickle in for the next tick", async () => {
    const repository = recordingRepository();
    const recorder = createUsageRecorder({ repository, flushIntervalMs: 60_000, queueMax: 10_000 });
    for (let index = 0; index < 200; index++) recorder.record(row(index));
    for (let index = 200; index < 205; index++) recorder.record(row(index));
    for (let turn = 0; turn < 10; turn++) await nextTurn();
    // A transaction of a few rows per turn of the event loop is what made SQLite slow.
    expect(repository.batches).toEqual([200]);
    expect(recorder.depth()).toBe(5);
    await recorder.flush();
    expect(repository.batches).toEqual([200, 5]);
    expect(new Set(repository.rows).size).toBe(205);
    await recorder.stop();
  });

  it("writes what is queued on each tick, in batches", async () => {
    const repository = recordingRepository();
    const recorder = createUsageRecorder({
      repository,
      flushIntervalMs: 20,
      queueMax: 10_000,
      batchSize: 50,
    });
    for (let index = 0; index < 30; index++) recorder.record(row(index));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(repository.batches).toEqual([30]);
    for (let index = 30; index < 150; index++) recorder.record(row(index));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(repository.batches.reduce((sum, size) => sum + size, 0)).toBe(150);
    expect(Math.max(...repository.batches)).toBe(50);
    await recorder.stop();
  });
});

import { describe, expect, it } from "vitest";
import { usageRow } from "../../test/support/usage-row.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import { createRefusalCoalescer } from "./refusal-coalescer.js";

const minute = Date.parse("2026-11-02T10:00:00.000Z");

/** A rate-limit refusal of project p1's key k1 at `ms` past 10:00 (UTC). */
const refusal = (id: string, ms: number, overrides: Partial<UsageRecord> = {}): UsageRecord =>
  usageRow(id, {
    status: 429,
    error_code: "TOO_MANY_REQUESTS",
    outcome: "error",
    model: null,
    input_tokens: null,
    output_tokens: null,
    cached_tokens: null,
    reasoning_tokens: null,
    cost_usd: null,
    ttfb_ms: null,
    created_at: new Date(minute + ms).toISOString(),
    ...overrides,
  });

function coalescer(options: { rowsPerMinute?: number; maxKeys?: number } = {}) {
  let now = minute;
  const written: UsageRecord[] = [];
  const coalesced: UsageRecord[] = [];
  const instance = createRefusalCoalescer({
    ...options,
    now: () => now,
    write: (row) => written.push(row),
    onCoalesced: (row) => coalesced.push(row),
  });
  return {
    instance,
    written,
    coalesced,
    at(ms: number) {
      now = minute + ms;
    },
  };
}

describe("the refusal coalescer", () => {
  it("writes the first rows of a minute one by one and holds the rest, counted", () => {
    const { instance, written, coalesced } = coalescer({ rowsPerMinute: 3 });
    for (let index = 0; index < 10; index++) instance.offer(refusal(`r${index}`, index * 1000));
    expect(written.map((row) => row.request_id)).toEqual(["r0", "r1", "r2"]);
    expect(written.every((row) => row.requests === 1)).toBe(true);
    expect(coalesced.map((row) => row.request_id)).toEqual(["r3", "r4", "r5", "r6", "r7", "r8", "r9"]);
    expect(instance.held()).toBe(7);
  });

  it("writes the held refusals as one row once their minute ended: the last's columns, their count", () => {
    const { instance, written, at } = coalescer({ rowsPerMinute: 2 });
    for (let index = 0; index < 6; index++)
      instance.offer(refusal(`r${index}`, index * 1000, { client_ip: `192.0.2.${index}` }));
    at(59_999);
    instance.sweep();
    expect(written).toHaveLength(2);
    at(60_000);
    instance.sweep();
    expect(written).toHaveLength(3);
    expect(written[2]).toEqual({
      ...refusal("r5", 5000, { client_ip: "192.0.2.5" }),
      requests: 4,
    });
    expect(instance.held()).toBe(0);
    expect(instance.keys()).toBe(0);
    // Swept once: nothing more to write.
    instance.sweep();
    expect(written).toHaveLength(3);
  });

  it("starts each minute again, and writes the minute before's held row when its key comes back first", () => {
    const { instance, written } = coalescer({ rowsPerMinute: 1 });
    for (let index = 0; index < 4; index++) instance.offer(refusal(`a${index}`, index));
    // The key's next refusal, in the next minute, before any sweep.
    instance.offer(refusal("b0", 60_000));
    instance.offer(refusal("b1", 60_001));
    expect(written.map((row) => [row.request_id, row.requests])).toEqual([
      ["a0", 1],
      ["a3", 3],
      ["b0", 1],
    ]);
    expect(instance.held()).toBe(1);
  });

  it("keeps apart refusals of another project, key, code, endpoint, provider or auth method", () => {
    const { instance, written } = coalescer({ rowsPerMinute: 1 });
    const variants: Array<Partial<UsageRecord>> = [
      {},
      { project_id: "p2" },
      { key_id: "k2" },
      { key_id: null },
      { status: 403, error_code: "FORBIDDEN" },
      { endpoint: "text" },
      { provider: "provider-b" },
      { auth_method: "bearer-device-check" },
    ];
    for (const [index, variant] of variants.entries()) {
      instance.offer(refusal(`first-${index}`, 0, variant));
      instance.offer(refusal(`second-${index}`, 1, variant));
    }
    expect(written.map((row) => row.request_id)).toEqual(variants.map((_, index) => `first-${index}`));
    expect(instance.keys()).toBe(variants.length);
    const rest = instance.takeAll();
    expect(rest.map((row) => [row.request_id, row.requests])).toEqual(
      variants.map((_, index) => [`second-${index}`, 1]),
    );
  });

  it("hands over every held row at once (flush, shutdown), and coalesces afresh after", () => {
    const { instance, written } = coalescer({ rowsPerMinute: 2 });
    for (let index = 0; index < 5; index++) instance.offer(refusal(`r${index}`, index));
    instance.offer(refusal("other", 5, { key_id: "k2" }));
    const taken = instance.takeAll();
    expect(taken.map((row) => [row.request_id, row.requests])).toEqual([["r4", 3]]);
    expect(instance.held()).toBe(0);
    // The minute's count goes on: the key's next refusal in it is held again, not written.
    instance.offer(refusal("r5", 6));
    expect(written.map((row) => row.request_id)).toEqual(["r0", "r1", "other"]);
    expect(instance.takeAll().map((row) => [row.request_id, row.requests])).toEqual([["r5", 1]]);
  });

  it("tracks at most `maxKeys` keys: a refusal of one more is written as its own row, none dropped", () => {
    const { instance, written, coalesced, at } = coalescer({ rowsPerMinute: 1, maxKeys: 3 });
    for (let key = 0; key < 5; key++)
      for (let index = 0; index < 4; index++)
        instance.offer(refusal(`k${key}-${index}`, index, { key_id: `key-${key}` }));
    expect(instance.keys()).toBe(3);
    // Keys 0 to 2: their first written, 3 held each; keys 3 and 4: every refusal written.
    expect(written).toHaveLength(3 + 8);
    expect(coalesced).toHaveLength(9);
    expect(written.filter((row) => row.key_id === "key-4")).toHaveLength(4);
    // Once the minute ended, the full map makes room: the held rows are written, the keys tracked anew.
    at(60_000);
    instance.offer(refusal("k4-next", 60_000, { key_id: "key-4" }));
    expect(written.slice(11).map((row) => [row.request_id, row.requests])).toEqual([
      ["k0-3", 3],
      ["k1-3", 3],
      ["k2-3", 3],
      ["k4-next", 1],
    ]);
    expect(instance.keys()).toBe(1);
  });

  it("counts the requests a row already stands for", () => {
    const { instance } = coalescer({ rowsPerMinute: 0 });
    instance.offer(refusal("r0", 0, { requests: 2 }));
    instance.offer(refusal("r1", 1));
    expect(instance.held()).toBe(3);
    expect(instance.takeAll().map((row) => row.requests)).toEqual([3]);
  });
});

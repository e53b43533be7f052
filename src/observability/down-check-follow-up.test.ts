import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { HealthCheck } from "../http/public-routes.js";
import { createDownCheckFollowUp } from "./down-check-follow-up.js";

/** A check whose ping answers while `up` is true, counting its pings. */
function switchableCheck(name: string) {
  const state = { up: false, pings: 0 };
  const check: HealthCheck = {
    name,
    required: false,
    ping: async () => {
      state.pings++;
      if (!state.up) throw new Error("down");
    },
  };
  return { check, state };
}

describe("the follow-up of a check /health found down", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("pings it again every interval until it answers, so the report returns to up without another /health", async () => {
    const redis = switchableCheck("redis");
    const reports: Array<[string, boolean]> = [];
    const followUp = createDownCheckFollowUp([redis.check], (name, ok) => reports.push([name, ok]), 1000);
    followUp.heard("redis", false);
    followUp.heard("redis", false); // a second /health while followed: still one follow-up
    await vi.advanceTimersByTimeAsync(999);
    expect(redis.state.pings).toBe(0);
    await vi.advanceTimersByTimeAsync(2001);
    expect(redis.state.pings).toBe(3);
    expect(reports.at(-1)).toEqual(["redis", false]);

    redis.state.up = true;
    await vi.advanceTimersByTimeAsync(1000);
    expect(redis.state.pings).toBe(4);
    expect(reports.at(-1)).toEqual(["redis", true]);
    // Once it answered, no more pings.
    await vi.advanceTimersByTimeAsync(5000);
    expect(redis.state.pings).toBe(4);
    followUp.stop();
  });

  it("ends when /health finds the check up, and reports nothing after stop", async () => {
    const database = switchableCheck("database");
    const reports: Array<[string, boolean]> = [];
    const followUp = createDownCheckFollowUp([database.check], (name, ok) => reports.push([name, ok]), 1000);
    followUp.heard("database", false);
    followUp.heard("database", true);
    await vi.advanceTimersByTimeAsync(3000);
    expect(database.state.pings).toBe(0);
    expect(reports).toEqual([
      ["database", false],
      ["database", true],
    ]);

    followUp.heard("database", false);
    followUp.stop();
    await vi.advanceTimersByTimeAsync(3000);
    expect(database.state.pings).toBe(0);
    expect(reports).toHaveLength(3);
  });

  it("does not report a ping's answer that a later /health overtook", async () => {
    const redis = switchableCheck("redis");
    let answer: (() => void) | undefined;
    redis.check.ping = () => new Promise<void>((_, reject) => (answer = () => reject(new Error("down"))));
    const reports: Array<[string, boolean]> = [];
    const followUp = createDownCheckFollowUp([redis.check], (name, ok) => reports.push([name, ok]), 1000);
    followUp.heard("redis", false);
    await vi.advanceTimersByTimeAsync(1000); // the follow-up's ping is on its way
    followUp.heard("redis", true); // a /health meanwhile found it up
    answer?.();
    await vi.advanceTimersByTimeAsync(0);
    expect(reports.at(-1)).toEqual(["redis", true]);
    followUp.stop();
  });
});

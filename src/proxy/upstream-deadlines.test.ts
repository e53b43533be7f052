import { afterEach, describe, expect, it, vi } from "vitest";
import { createUpstreamDeadlines, type Watched } from "./upstream-deadlines.js";

function exchange(): Watched & { errors: Error[]; paused: boolean } {
  return {
    deadlineSlot: -1,
    deadlineRestarted: false,
    deadline: 0,
    awaitingHeaders: true,
    paused: false,
    errors: [],
    upstreamPaused() {
      return this.paused;
    },
    timedOut(error) {
      this.errors.push(error);
    },
  };
}

const codes = (watched: { errors: Error[] }) =>
  watched.errors.map((error) => (error as { code?: string }).code);

afterEach(() => {
  vi.restoreAllMocks();
});

describe("upstream deadlines", () => {
  it("times out a call waiting for its headers past the headers timeout, with undici's error, not before", () => {
    const deadlines = createUpstreamDeadlines({ headersMs: 1000, idleMs: 300 });
    const call = exchange();
    deadlines.watch(call);
    deadlines.sweep(50); // the first tick after the request went out starts its clock
    deadlines.sweep(1049);
    expect(call.errors).toEqual([]);
    deadlines.sweep(1050);
    expect(codes(call)).toEqual(["UND_ERR_HEADERS_TIMEOUT"]);
    expect(deadlines.size).toBe(0);
    deadlines.sweep(5000);
    expect(call.errors).toHaveLength(1);
    deadlines.close();
  });

  it("restarts the idle clock at each body chunk, and stops it while the provider is paused", () => {
    const deadlines = createUpstreamDeadlines({ headersMs: 1000, idleMs: 300 });
    const call = exchange();
    deadlines.watch(call);
    deadlines.sweep(0);
    call.awaitingHeaders = false; // the headers came
    call.deadlineRestarted = true;
    deadlines.sweep(100); // idle from 100
    call.deadlineRestarted = true; // a chunk
    deadlines.sweep(350); // idle from 350, not 100
    deadlines.sweep(649);
    expect(call.errors).toEqual([]);
    call.paused = true; // a client behind: no idle timeout however long
    deadlines.sweep(5000);
    deadlines.sweep(9000);
    expect(call.errors).toEqual([]);
    call.paused = false; // resumed: the clock starts at the next tick
    deadlines.sweep(9100);
    deadlines.sweep(9399);
    expect(call.errors).toEqual([]);
    deadlines.sweep(9400);
    expect(codes(call)).toEqual(["UND_ERR_BODY_TIMEOUT"]);
    deadlines.close();
  });

  it("times out every late call of one tick, the others still watched, and forgets those unwatched", () => {
    const deadlines = createUpstreamDeadlines({ headersMs: 100, idleMs: 100 });
    const calls = Array.from({ length: 6 }, () => exchange());
    for (const call of calls) deadlines.watch(call);
    deadlines.sweep(0);
    deadlines.unwatch(calls[1] as Watched);
    (calls[4] as Watched).deadlineRestarted = true;
    deadlines.sweep(100);
    expect(calls.map((call) => call.errors.length)).toEqual([1, 0, 1, 1, 0, 1]);
    expect(deadlines.size).toBe(1);
    deadlines.sweep(200);
    expect(calls.map((call) => call.errors.length)).toEqual([1, 0, 1, 1, 1, 1]);
    expect(deadlines.size).toBe(0);
    deadlines.close();
  });

  it("runs one unref'd interval from the first call watched, of a quarter of a short timeout, stopped at close", () => {
    const started: NodeJS.Timeout[] = [];
    const setInterval = globalThis.setInterval;
    vi.spyOn(globalThis, "setInterval").mockImplementation(((...args: Parameters<typeof setInterval>) => {
      const interval = setInterval(...args);
      started.push(interval);
      return interval;
    }) as typeof setInterval);
    const deadlines = createUpstreamDeadlines({ headersMs: 600_000, idleMs: 300 });
    expect(deadlines.tickMs).toBe(75);
    expect(createUpstreamDeadlines({ headersMs: 600_000, idleMs: 300_000 }).tickMs).toBe(250);
    expect(started).toHaveLength(0);
    deadlines.watch(exchange());
    deadlines.watch(exchange());
    expect(started).toHaveLength(1);
    expect(started[0]?.hasRef()).toBe(false);
    expect(deadlines.running).toBe(true);
    deadlines.close();
    expect(deadlines.running).toBe(false);
    deadlines.watch(exchange());
    expect(started).toHaveLength(1);
  });
});

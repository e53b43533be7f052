import { describe, expect, it } from "vitest";
import { collectGarbage } from "../../test/support/garbage-collection.js";
import { deadlineSignal } from "./deadline-signal.js";

describe("deadlineSignal", () => {
  it("aborts at its deadline with a TimeoutError, as AbortSignal.timeout does, also after a collection", async () => {
    const { signal, clear } = deadlineSignal(50);
    // Held only through what the caller keeps (`signal`): a collection must not take the timer.
    collectGarbage();
    await new Promise((resolve) => setTimeout(resolve, 120));
    expect(signal.aborted).toBe(true);
    expect((signal.reason as DOMException).name).toBe("TimeoutError");
    clear();
  });

  it("follows the client's signal, with its reason, aborted before or after", () => {
    const before = new AbortController();
    before.abort(new Error("gone"));
    expect(deadlineSignal(10_000, before.signal).signal.reason).toEqual(new Error("gone"));
    const after = new AbortController();
    const { signal, clear } = deadlineSignal(10_000, after.signal);
    expect(signal.aborted).toBe(false);
    after.abort(new Error("left"));
    expect(signal.reason).toEqual(new Error("left"));
    clear();
  });

  it("stops at clear: neither the deadline nor the client's signal aborts it then", async () => {
    const client = new AbortController();
    const { signal, clear } = deadlineSignal(30, client.signal);
    clear();
    client.abort();
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(signal.aborted).toBe(false);
  });
});

import { describe, expect, it } from "vitest";
import { bodyBudgetFull, createBodyBudget, defaultMaxBufferedBodyBytes } from "./body-budget.js";

describe("createBodyBudget", () => {
  it("holds the bytes its shares take, up to the budget, and refuses the byte past it", () => {
    const budget = createBodyBudget(100);
    const first = budget.share();
    const second = budget.share();
    expect(first.take(60)).toBe(true);
    expect(second.take(40)).toBe(true);
    expect(budget.held()).toBe(100);
    expect(second.take(1)).toBe(false);
    expect(first.take(1)).toBe(false);
    // A refused take holds nothing, and is counted.
    expect(budget.held()).toBe(100);
    expect(budget.refused()).toBe(2);
    expect(budget.share().fits(1)).toBe(false);
    expect(budget.refused()).toBe(3);
  });

  it("gives a share's bytes back once, at its release, and lets a later body in", () => {
    const budget = createBodyBudget(100);
    const first = budget.share();
    const second = budget.share();
    first.take(70);
    second.take(30);
    expect(budget.share().fits(1)).toBe(false);
    first.release();
    first.release();
    expect(budget.held()).toBe(30);
    expect(budget.share().fits(70)).toBe(true);
    expect(budget.share().fits(71)).toBe(false);
    // A released share takes nothing more: its call has ended.
    expect(first.take(1)).toBe(false);
    second.release();
    expect(budget.held()).toBe(0);
  });

  it("gives back part of a share (a copy let go), never more than it holds", () => {
    const budget = createBodyBudget(100);
    const share = budget.share();
    const other = budget.share();
    share.take(30);
    other.take(20);
    share.giveBack(10);
    expect(budget.held()).toBe(40);
    share.giveBack(50);
    expect(budget.held()).toBe(20);
    share.release();
    other.giveBack(5);
    expect(budget.held()).toBe(15);
    other.release();
    expect(budget.held()).toBe(0);
  });

  it("lets a body no other call holds any of in, whatever its size", () => {
    const budget = createBodyBudget(100);
    const alone = budget.share();
    expect(alone.fits(500)).toBe(true);
    expect(alone.take(300)).toBe(true);
    expect(alone.take(200)).toBe(true);
    expect(budget.held()).toBe(500);
    expect(budget.share().fits(1)).toBe(false);
    alone.release();
    expect(budget.held()).toBe(0);
  });

  it("holds bytes a call already has past the budget, refusing none, and gives them back at its release", () => {
    const budget = createBodyBudget(100);
    const share = budget.share();
    const other = budget.share();
    other.take(60);
    share.take(30);
    share.hold(50);
    expect(budget.held()).toBe(140);
    expect(budget.refused()).toBe(0);
    expect(other.take(1)).toBe(false);
    share.release();
    share.hold(10);
    expect(budget.held()).toBe(60);
    other.release();
    expect(budget.held()).toBe(0);
  });

  it("counts nothing and refuses nothing when 0 (no budget)", () => {
    const budget = createBodyBudget(0);
    const share = budget.share();
    expect(share.fits(Number.MAX_SAFE_INTEGER)).toBe(true);
    expect(share.take(1e12)).toBe(true);
    expect(budget.held()).toBe(0);
  });

  it("refuses with a retryable 503 and Retry-After, naming the setting", () => {
    expect(bodyBudgetFull()).toMatchObject({
      code: "SERVICE_UNAVAILABLE",
      status: 503,
      headers: { "retry-after": "5" },
      details: { retryable: true },
      message: expect.stringContaining("SLUICE_MAX_BUFFERED_BODY_BYTES"),
    });
  });

  it("is an eighth of V8's heap limit by default: 518 MiB for Node's largest default heap", () => {
    expect(defaultMaxBufferedBodyBytes(4144 * 1024 * 1024)).toBe(518 * 1024 * 1024);
    expect(defaultMaxBufferedBodyBytes(1072 * 1024 * 1024)).toBe(134 * 1024 * 1024);
  });
});

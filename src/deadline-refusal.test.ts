import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { refusalOf, refuseAtDeadline, untilRefused } from "./deadline-refusal.js";

const response = () => new EventEmitter() as unknown as ServerResponse;

describe("untilRefused", () => {
  it("answers the work's outcome, and stops listening once it has settled", async () => {
    const answered = response();
    expect(await untilRefused(answered, Promise.resolve(7))).toBe(7);
    const failure = new Error("down");
    await expect(untilRefused(answered, Promise.reject(failure))).rejects.toBe(failure);
    // Nothing listens any more: a refusal now is no one's to answer.
    expect(refuseAtDeadline(answered)).toBe(false);
  });

  it("fails with the refusal when the deadline comes first, the work left to end on its own", async () => {
    const refused = response();
    let finish: (value: number) => void = () => {};
    const waiting = untilRefused(refused, new Promise<number>((resolve) => (finish = resolve)));
    expect(refuseAtDeadline(refused)).toBe(true);
    await expect(waiting).rejects.toBe(refusalOf(refused));
    finish(1);
    // A wait begun after the refusal fails with it at once.
    await expect(untilRefused(refused, Promise.reject(new Error("ignored")))).rejects.toBe(
      refusalOf(refused),
    );
  });
});

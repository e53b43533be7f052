import { describe, expect, it } from "vitest";
import { createBodyBudget } from "../http/body-budget.js";
import { createUsageMeter, type MeterRoom } from "./usage-meter.js";

const kib = 1024;

/** A room of `bytes`, counting what it holds, as ProxyExchange's share of the body budget does. */
function roomOf(bytes: number): MeterRoom & { held: () => number } {
  const budget = createBodyBudget(bytes);
  const other = budget.share();
  other.take(1); // another call's body: the meter's share is not alone, so its room is the budget's
  const share = budget.share();
  return {
    takeRoom: (more) => share.takeIfRoom(more),
    giveRoom: (less) => share.giveBack(less),
    held: () => budget.held() - 1,
  };
}

/** A provider B message of about `bytes` whose last tool call's input spells a usage object. */
function message(bytes: number): string {
  const text = "x".repeat(bytes);
  return `{"id":"msg_1","type":"message","model":"claude-sonnet-4-5","content":[{"type":"text","text":"${text}"},{"type":"tool_use","id":"t","name":"f","input":{"usage":{"input_tokens":1,"output_tokens":1}}}],"usage":{"input_tokens":500,"output_tokens":70}}`;
}

function run(body: string, room: MeterRoom, ended: boolean) {
  const meter = createUsageMeter("provider-b", { streaming: false, room });
  const bytes = Buffer.from(body);
  for (let at = 0; at < bytes.length; at += 16 * kib) meter.push(bytes.subarray(at, at + 16 * kib));
  if (ended) meter.end();
  return meter.finish();
}

describe("a JSON meter's kept bytes in the body budget", () => {
  it("counts the bytes over 64 KiB it keeps whole, and reads a body that finds no room from its ends", () => {
    const room = roomOf(1024 * kib);
    const meter = createUsageMeter("provider-b", { streaming: false, room });
    const bytes = Buffer.from(message(600 * kib));
    meter.push(bytes.subarray(0, 32 * kib));
    expect(room.held()).toBe(0); // a small answer counts nowhere
    meter.push(bytes.subarray(32 * kib, 100 * kib));
    expect(room.held()).toBe(100 * kib);
    meter.push(bytes.subarray(100 * kib));
    expect(room.held()).toBe(bytes.length);
    meter.end();
    expect(meter.finish().usage).toMatchObject({ inputTokens: 500, outputTokens: 70 });
    // No room: read from its ends, the same usage; nothing stays counted.
    const small = roomOf(200 * kib);
    expect(run(message(600 * kib), small, true).usage).toMatchObject({ inputTokens: 500, outputTokens: 70 });
    expect(small.held()).toBe(0);
  });

  it("takes no usage from a cut body read from its ends for want of room: the tool call's may be its last", () => {
    // Cut just after the tool call's input closes: what follows its usage closes one object, as the body's own would.
    const cut = (body: string) => body.slice(0, body.indexOf('"output_tokens":1}}') + 19);
    // Kept whole, the members are walked: the tool call's usage is not the body's.
    expect(run(cut(message(100 * kib)), roomOf(1024 * kib), false).usage.inputTokens).toBeNull();
    // From its ends it could be: none is taken.
    expect(run(cut(message(600 * kib)), roomOf(200 * kib), false).usage.inputTokens).toBeNull();
  });

  it("is no refusal of the budget's", () => {
    const budget = createBodyBudget(100);
    budget.share().take(60);
    expect(budget.share().takeIfRoom(50)).toBe(false);
    expect(budget.refused()).toBe(0);
  });
});

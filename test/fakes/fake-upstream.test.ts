import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "./fake-upstream.js";

let fake: FakeUpstream;

beforeAll(async () => {
  fake = await startFakeUpstream();
});

afterAll(() => fake.close());

const chat = () =>
  fetch(`${fake.url}/a/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-5.4-mini", messages: [{ role: "user", content: "hi" }] }),
  });

describe("the fake upstream's clear()", () => {
  // Tests call clear() in beforeEach: a response one test queued and never used (it failed before
  // its call, say) would otherwise answer the next test's first call.
  it("drops the answers still queued by enqueueResponse and failNext, with the recorded requests", async () => {
    fake.enqueueResponse({ status: 418, body: { error: "queued" } });
    fake.failNext(500, 2);
    expect((await chat()).status).toBe(418);
    fake.clear();
    expect(fake.requests).toHaveLength(0);
    const response = await chat();
    expect(response.status).toBe(200);
    expect(((await response.json()) as { object?: string }).object).toBe("chat.completion");
    expect(fake.requests).toHaveLength(1);
  });
});

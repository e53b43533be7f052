import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * A call of a project that is deleted, and created again under its id, while the call streams: its
 * row is stamped when it ends (rows are stamped at the call's end), after the new project's
 * creation, and its place among the calls in flight was taken under the deleted project's cap.
 * The row must stay (nothing is lost), but it is the deleted project's call: the new project's
 * usage report and spend cap count neither it nor its place in flight.
 */
describe("a call in flight when its project is deleted and created again under its id", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
  });
  afterAll(async () => {
    fake?.setPlan(null);
    await sluice?.close();
    await fake?.close();
  });
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const call = (bearer: string, stream = false) =>
    fetch(`${sluice.url}/v1/provider-a/again/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages: [],
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      }),
    });
  /** Lets the clock move past the last timestamp written (they are in milliseconds). */
  const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

  it("counts the old call neither in the new project's report nor against its cap, and keeps its row", async () => {
    const first = await createTestProject(sluice.gateway, { id: "again", monthlySpendCapUsd: 100 });
    // The stream's first event comes at once, the rest when `sendRest` is called: 0.60 USD (a
    // million output tokens of gpt-4o-mini), reported in its last chunk.
    let sendRest = () => {};
    const rest = new Promise<void>((resolve) => {
      sendRest = resolve;
    });
    fake.setPlan(() => ({ restSentAfter: rest, usage: { output: 1_000_000 } }));
    let bearer = "";
    try {
      const old = await call(first.bearer("provider-a"), true);
      expect(old.status).toBe(200);
      const reader = (old.body as ReadableStream<Uint8Array>).getReader();
      expect((await reader.read()).done).toBe(false);

      // Mid-stream: the project goes, and another is created under its id, its cap 0.10 USD: one
      // call in flight (at SLUICE_UNPRICED_CALL_USD, 0.10, while it knows no cost) takes it all.
      expect((await admin("DELETE", "/again")).status).toBe(204);
      await tick();
      const second = await createTestProject(sluice.gateway, { id: "again", monthlySpendCapUsd: 0.1 });
      bearer = second.bearer("provider-a");
      fake.setPlan(null);
      // The old call's place in flight is not the new project's: its first call is admitted.
      const fresh = await call(bearer);
      await fresh.arrayBuffer();
      expect.soft(fresh.status, "the new project's first call, the old one in flight").toBe(200);

      // The old stream ends now, after the new project's creation: its row is stamped then.
      sendRest();
      for (let read = await reader.read(); !read.done; read = await reader.read());
    } finally {
      sendRest();
      fake.setPlan(null);
    }
    await sluice.gateway.flushUsage();

    // Nothing lost: the old call's row is in the table, with its cost.
    const rows = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .select(["cost_usd", "streamed"])
      .where("project_id", "=", "again")
      .where("streamed", "=", 1)
      .execute();
    expect(rows).toHaveLength(1);
    expect(rows[0]?.cost_usd).toBeCloseTo(0.6, 4);

    // The new project's report counts only its own call (7 output tokens of gpt-4o-mini).
    const report = (await (await admin("GET", "/again/usage?groupBy=endpoint")).json()) as {
      rows: { requests: number; outputTokens: number; costUsd: number | null }[];
    };
    expect
      .soft(
        report.rows.map(({ requests, outputTokens }) => ({ requests, outputTokens })),
        "the new project's report",
      )
      .toEqual([{ requests: 1, outputTokens: 7 }]);

    // And its cap: 0.50 USD, which the old call's 0.60 alone would reach.
    expect((await admin("PATCH", "/again", { monthlySpendCapUsd: 0.5 })).status).toBe(200);
    const capped = await call(bearer);
    await capped.arrayBuffer();
    expect.soft(capped.status, "the new project's call under a cap of 0.50 USD").toBe(200);
  });
});

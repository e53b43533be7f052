import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";
import { usageRow } from "../support/usage-row.js";

/**
 * A project deleted and created again under its id is a new project: its usage rows stay in the
 * table (DELETE keeps them), but neither the new project's usage report nor its spend cap counts
 * them. Before, the report showed them as the new project's, and their cost refused its calls.
 */
describe("a project created again under a deleted project's id", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  const admin = (method: string, path: string) =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}` },
    });
  /** Lets the clock move past the last timestamp written (they are in milliseconds). */
  const tick = () => new Promise((resolve) => setTimeout(resolve, 5));
  /**
   * A row of the first project, written after it was created and before the second one is: the
   * first project counts it (each test checks so), the second must not. Its call took no time: a
   * row's call began at its time less its latency_ms, and one begun before the project's creation is
   * another project's (decision 0042).
   */
  const oldRow = async (id: string, projectId: string, costUsd: number) => {
    await tick();
    await sluice.gateway.database.db
      .insertInto("usage_records")
      .values([
        usageRow(id, {
          project_id: projectId,
          created_at: new Date().toISOString(),
          cost_usd: costUsd,
          latency_ms: 0,
        }),
      ])
      .execute();
    await tick();
  };

  it("reports none of the deleted project's rows", async () => {
    await createTestProject(sluice.gateway, { id: "reborn" });
    await oldRow("req_old_report", "reborn", 42);
    const before = (await (await admin("GET", "/reborn/usage?groupBy=model")).json()) as { rows: unknown[] };
    expect(before.rows).toHaveLength(1);
    expect((await admin("DELETE", "/reborn")).status).toBe(204);
    await createTestProject(sluice.gateway, { id: "reborn" });
    const report = (await (await admin("GET", "/reborn/usage?groupBy=model")).json()) as { rows: unknown[] };
    expect(report.rows).toEqual([]);
  });

  it("counts none of the deleted project's spend against its monthly cap", async () => {
    const first = await createTestProject(sluice.gateway, { id: "capped", monthlySpendCapUsd: 100 });
    const call = (bearer: string) =>
      fetch(`${sluice.url}/v1/provider-a/capped/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
      });
    await oldRow("req_old_cap", "capped", 50);
    // The first project's month (50 USD) is read, and held by the spend guard, before it goes.
    expect((await call(first.bearer("provider-a"))).status).toBe(200);
    await sluice.gateway.flushUsage();
    // It counts the row: under a cap of 40 its next call is refused.
    expect(
      (
        await fetch(`${sluice.url}/admin/v1/projects/capped`, {
          method: "PATCH",
          headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
          body: JSON.stringify({ monthlySpendCapUsd: 40 }),
        })
      ).status,
    ).toBe(200);
    const refused = await call(first.bearer("provider-a"));
    await refused.arrayBuffer();
    expect(refused.status).toBe(403);
    expect((await admin("DELETE", "/capped")).status).toBe(204);
    const second = await createTestProject(sluice.gateway, { id: "capped", monthlySpendCapUsd: 10 });
    const response = await call(second.bearer("provider-a"));
    await response.arrayBuffer();
    expect(response.status).toBe(200);
  });

  // Found by an audit of admin changes under traffic: the spend guard kept the largest cost of one
  // call it had recorded for the deleted project, and counted the new project's calls in flight and
  // its calls of unknown cost at it (for the rest of the month on that instance), where a project
  // with no call of known cost counts each at SLUICE_UNPRICED_CALL_USD (0.10 USD).
  it("counts neither its calls in flight nor its calls of unknown cost at the deleted project's largest call", async () => {
    const chat = (bearer: string, model = "gpt-4o-mini") =>
      fetch(`${sluice.url}/v1/provider-a/dear/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
        body: JSON.stringify({ model, messages: [] }),
      }).then(async (response) => {
        await response.arrayBuffer();
        return response.status;
      });
    const first = await createTestProject(sluice.gateway, { id: "dear", monthlySpendCapUsd: 100 });
    // One call of 0.60 USD (a million output tokens of gpt-4o-mini), recorded on this instance.
    fake.setUsage({ output: 1_000_000 });
    try {
      expect(await chat(first.bearer("provider-a"))).toBe(200);
    } finally {
      fake.setUsage({ output: 7 });
    }
    await sluice.gateway.flushUsage();
    expect((await admin("DELETE", "/dear")).status).toBe(204);
    await tick();
    const second = await createTestProject(sluice.gateway, { id: "dear", monthlySpendCapUsd: 1 });
    // No call of known cost yet: each in flight counts at 0.10 USD, so six at once fit under 1 USD
    // (at 0.60, the deleted project's call, only two did).
    fake.setLatencyMs(300);
    try {
      const statuses = await Promise.all(Array.from({ length: 6 }, () => chat(second.bearer("provider-a"))));
      expect(statuses).toEqual(Array(6).fill(200));
    } finally {
      fake.setLatencyMs(0);
    }
    // Calls of unknown cost (a model the catalogue does not price) count at the new project's
    // largest known cost, which is tiny, or 0.10 USD: three more fit (at 0.60, the second was refused).
    for (let index = 0; index < 3; index++)
      expect(await chat(second.bearer("provider-a"), "gpt-uncatalogued-x")).toBe(200);
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createUsageRepository } from "../../src/storage/usage-repository.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";
import { usageRow } from "../support/usage-row.js";

/**
 * A proxied call's usage row names whatever model the client's body named, so a client with a valid
 * key can fill a project's usage with made-up models: a hostile audit's 100,000 of them (200
 * characters each, as long as a row keeps) made one `groupBy=model` report answer 32 MB, every group
 * summed and serialized in one go. The report answers `limit` groups at most (1000 unless asked,
 * 5000 at most) and a `next` cursor to the groups after them.
 */
describe("the usage report of a project with 100,000 made-up model names", () => {
  let sluice: TestGateway;
  const models = 100_000;
  const name = (index: number) => `m${String(index).padStart(6, "0")}-${"x".repeat(192)}`;

  beforeAll(async () => {
    sluice = await startTestGateway({}, { now: () => new Date("2026-11-20T00:00:00.000Z") });
    await sluice.gateway.admin.createProject({ id: "flooded", name: "Flooded", provider: "provider-a" });
    const { database } = sluice.gateway;
    const usage = createUsageRepository(database.db, database.sqlite);
    // Written in an order of their own, so the report's order is its own, not the rows'.
    const rows = Array.from({ length: models }, (_, index) =>
      usageRow(`flood-${index}`, {
        project_id: "flooded",
        model: name((index * 7919) % models),
        created_at: new Date(Date.parse("2026-11-21T00:00:00.000Z") + index).toISOString(),
      }),
    );
    for (let start = 0; start < rows.length; start += 10_000)
      await usage.insertBatch(rows.slice(start, start + 10_000));
  }, 120_000);
  afterAll(async () => {
    await sluice?.close();
  });

  const report = async (query: string) => {
    const response = await fetch(`${sluice.url}/admin/v1/projects/flooded/usage?${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(200);
    const text = await response.text();
    return {
      bytes: Buffer.byteLength(text),
      body: JSON.parse(text) as { rows: { group: string }[]; next?: string },
    };
  };

  it("answers the first 1000 groups in order, and a cursor to the rest, in a bounded answer", async () => {
    const first = await report("from=2026-11-01&to=2026-11-30&groupBy=model");
    expect({ groups: first.body.rows.length, bytes: first.bytes }).toEqual({
      groups: 1000,
      bytes: expect.any(Number),
    });
    expect(first.bytes).toBeLessThan(1000 * 400);
    expect(first.body.rows.map((row) => row.group)).toEqual(
      Array.from({ length: 1000 }, (_, index) => name(index)),
    );
    expect(typeof first.body.next).toBe("string");
    // The cursor carries the window and grouping: the next page needs nothing else.
    const second = await report(`limit=5000&cursor=${encodeURIComponent(first.body.next as string)}`);
    expect(second.body.rows.map((row) => row.group)).toEqual(
      Array.from({ length: 5000 }, (_, index) => name(1000 + index)),
    );
    expect(second.bytes).toBeLessThan(5000 * 400);
  }, 60_000);
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  usageRowOf,
} from "../support/test-gateway.js";

/**
 * The monthly spend cap at the turn of a month (UTC), on one long-running gateway whose clock the
 * test sets: the figures it read and the costs it added in the old month must not follow a project
 * into the new one, and a cost recorded at the old month's last millisecond stays in that month.
 */
describe("monthly spend cap at the turn of the month", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let clock = Date.parse("2026-11-15T12:00:00.000Z");

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) }, { now: () => new Date(clock) });
    // gpt-4o: 1M input and 1M output tokens cost 12.5 USD, above the cap of 1 below.
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  // The last millisecond of a month, a millisecond in the same month that might pass for the next
  // (a leap day), and the first millisecond of the next month.
  const turns = [
    { name: "a month of 30 days", last: "2026-11-30T23:59:59.999Z", next: "2026-12-01T00:00:00.000Z" },
    { name: "the turn of a year", last: "2026-12-31T23:59:59.999Z", next: "2027-01-01T00:00:00.000Z" },
    { name: "a February of 28 days", last: "2027-02-28T23:59:59.999Z", next: "2027-03-01T00:00:00.000Z" },
    {
      name: "a February of 29 days",
      last: "2028-02-29T23:59:59.999Z",
      next: "2028-03-01T00:00:00.000Z",
      within: "2028-02-29T00:00:00.000Z",
    },
    { name: "a month of 31 days", last: "2027-01-31T23:59:59.999Z", next: "2027-02-01T00:00:00.000Z" },
  ];

  for (const turn of turns) {
    it(`admits a project capped in the old month again in the new one: ${turn.name}`, async () => {
      clock = Date.parse(turn.last) - 3 * 86_400_000;
      const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
      const chat = () => proxiedChat(sluice.url, project, { body: { model: "gpt-4o", messages: [] } });
      // The call that reaches the cap: at the month's last millisecond, or the leap day's eve.
      const paidAt = turn.within ? new Date(Date.parse(turn.within) - 1).toISOString() : turn.last;
      if (turn.within) {
        clock = Date.parse(paidAt);
        expect((await chat()).status).toBe(200);
        clock = Date.parse(turn.within);
        const sameMonth = await chat();
        await sameMonth.arrayBuffer();
        expect(sameMonth.status).toBe(403);
      } else {
        // The cap is reached at the month's last millisecond: its row belongs to the old month.
        clock = Date.parse(turn.last);
        const last = await chat();
        expect(last.status).toBe(200);
        expect((await usageRowOf(sluice.gateway, last)).created_at).toBe(turn.last);
      }
      clock = Date.parse(turn.last);
      const capped = await chat();
      await capped.arrayBuffer();
      expect(capped.status).toBe(403);

      clock = Date.parse(turn.next);
      const first = await chat();
      expect(first.status).toBe(200);
      expect((await usageRowOf(sluice.gateway, first)).created_at).toBe(turn.next);
      // The new month's first call counts in the new month: the cap is reached again.
      const again = await chat();
      await again.arrayBuffer();
      expect(again.status).toBe(403);

      // A day's report holds the rows of that UTC day: the last millisecond's cost in the old month's
      // last day, the first millisecond's in the new month's first. (Refusals cost nothing.)
      const dayReport = async (day: string) =>
        (await sluice.gateway.admin.usageReport(project.projectId, { from: day, to: day })).rows;
      expect(await dayReport(turn.next.slice(0, 10))).toEqual([
        expect.objectContaining({ group: turn.next.slice(0, 10), costUsd: 12.5 }),
      ]);
      expect(await dayReport(paidAt.slice(0, 10))).toEqual([
        expect.objectContaining({ group: paidAt.slice(0, 10), costUsd: 12.5 }),
      ]);
    });
  }
});

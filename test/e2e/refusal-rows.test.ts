import { rmSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * An authenticated client that ignores Retry-After and keeps hitting its rate limit (429), or keeps
 * calling a disabled project (403), is held back by no throttle: its refusals used to write a usage
 * row each. Past the first 10 a minute per key they are coalesced into one row counting them
 * (decision 0015): the report's figures stay exact while the table holds a few rows.
 */
const rowsPerMinute = 10;
/** The most rows a key's refusals take: the first of a minute and one coalesced row, over two minutes at most (a test crossing a minute). */
const refusalRowsBound = 2 * (rowsPerMinute + 1);

/** `count` chat calls, `inParallel` at a time: their statuses. */
async function hammer(sluice: TestGateway, project: TestProject, count: number, inParallel = 25) {
  const statuses: number[] = [];
  for (let sent = 0; sent < count; sent += inParallel) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(inParallel, count - sent) }, async () => {
        return proxiedChatStatus(sluice.url, project);
      }),
    );
    statuses.push(...batch);
  }
  return statuses;
}

const tally = (statuses: number[]) => {
  const byStatus: Record<number, number> = {};
  for (const status of statuses) byStatus[status] = (byStatus[status] ?? 0) + 1;
  return byStatus;
};

describe("an authenticated client's repeated refusals", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
  });

  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });

  async function report(projectId: string) {
    await sluice.gateway.flushUsage();
    const response = await fetch(`${sluice.url}/admin/v1/projects/${projectId}/usage?groupBy=endpoint`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    expect(response.status).toBe(200);
    return ((await response.json()) as { rows: Array<{ group: string; requests: number; errors: number }> })
      .rows;
  }

  async function rows(projectId: string) {
    return sluice.gateway.database.db
      .selectFrom("usage_records")
      .select(["request_id", "status", "requests"])
      .where("project_id", "=", projectId)
      .execute();
  }

  it("over its rate limit (429): the report counts every request and error, the table holds a few rows", async () => {
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 3 } });
    const statuses = tally(await hammer(sluice, project, 200));
    // A minute may begin during the test: its allowance is admitted too.
    const admitted = statuses[200] ?? 0;
    expect(admitted).toBeGreaterThanOrEqual(3);
    expect(statuses[429]).toBe(200 - admitted);
    expect(await report(project.projectId)).toEqual([
      expect.objectContaining({ group: "proxy", requests: 200, errors: 200 - admitted }),
    ]);
    const stored = await rows(project.projectId);
    expect(stored.length).toBeLessThanOrEqual(admitted + refusalRowsBound);
    expect(stored.filter((row) => row.status === 200)).toHaveLength(admitted);
    expect(stored.reduce((sum, row) => sum + Number(row.requests), 0)).toBe(200);
    // Most refusals are in one or two coalesced rows (two when a minute began during the test).
    expect(Math.max(...stored.map((row) => Number(row.requests)))).toBeGreaterThan(50);
  });

  it("a disabled project (403 after authentication): exact counts, a few rows", async () => {
    const project = await createTestProject(sluice.gateway);
    await sluice.gateway.admin.updateProject(project.projectId, { disabled: true });
    const statuses = tally(await hammer(sluice, project, 80));
    expect(statuses).toEqual({ 403: 80 });
    expect(await report(project.projectId)).toEqual([
      expect.objectContaining({ group: "proxy", requests: 80, errors: 80 }),
    ]);
    const stored = await rows(project.projectId);
    expect(stored.length).toBeLessThanOrEqual(refusalRowsBound);
    expect(stored.reduce((sum, row) => sum + Number(row.requests), 0)).toBe(80);
  });

  it("successful calls are never coalesced: a row each", async () => {
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 1000 } });
    expect(tally(await hammer(sluice, project, 40))).toEqual({ 200: 40 });
    await sluice.gateway.flushUsage();
    const stored = await rows(project.projectId);
    expect(stored).toHaveLength(40);
    expect(stored.every((row) => Number(row.requests) === 1)).toBe(true);
  });
});

describe("an authenticated client's repeated refusals at shutdown", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    await fake.close();
  });

  it("are written when the gateway closes, never lost", async () => {
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
    const dataDir = sluice.gateway.config.dataDir;
    const project = await createTestProject(sluice.gateway, { rateLimits: { perMinute: 2 } });
    const statuses = tally(await hammer(sluice, project, 60));
    sluice.server.closeAllConnections();
    sluice.server.close();
    await sluice.gateway.close();
    const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
    try {
      const stored = database
        .prepare("select status, requests from usage_records where project_id = ?")
        .all(project.projectId) as Array<{ status: number; requests: number }>;
      const refused = stored.filter((row) => row.status === 429);
      expect(refused.reduce((sum, row) => sum + row.requests, 0)).toBe(statuses[429]);
      expect(refused.length).toBeLessThanOrEqual(refusalRowsBound);
    } finally {
      database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

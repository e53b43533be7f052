import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { Gateway } from "../../src/deps.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

// Provider A's Responses API in background mode: the POST answers `queued` without usage, and the
// run's tokens reach every later poll (or resumed stream, or cancel answer) that sees it finished.

const model = "gpt-4o-mini";
/** The fake's default usage (11 in, 3 of them cached, 7 out) at gpt-4o-mini's prices. */
const runCost = ((11 - 3) * 0.15 + 3 * 0.075 + 7 * 0.6) / 1e6;
const tokenColumns = { input_tokens: 11, output_tokens: 7, cached_tokens: 3, reasoning_tokens: 2 };

async function usageRows(gateway: Gateway, projectId: string) {
  await gateway.flushUsage();
  return gateway.database.db
    .selectFrom("usage_records")
    .selectAll()
    .where("project_id", "=", projectId)
    .orderBy("created_at")
    .execute();
}

const withTokens = (rows: Awaited<ReturnType<typeof usageRows>>) =>
  rows.filter((row) => row.input_tokens !== null || row.output_tokens !== null);

/** `sluice_tokens_total{provider="provider-a",kind="input"}` on the gateway's /metrics. */
async function inputTokensCounted(url: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const match = /^sluice_tokens_total\{provider="provider-a",kind="input"\} (\d+)$/m.exec(text);
  return Number(match?.[1] ?? 0);
}

/** Sluice's request id (the key of the call's usage row). */
const requestIdOf = (response: Response) =>
  response.headers.get("x-sluice-request-id") ?? response.headers.get("x-request-id");

/** The row id a run gets: `bg_`, its creation time in ms (12 hex digits), 20 hex digits of a digest. */
const rowIdOf = (createdAt: number) =>
  new RegExp(`^bg_${(createdAt * 1000).toString(16).padStart(12, "0")}[0-9a-f]{20}$`);

function client(url: string, project: TestProject): OpenAI {
  return new OpenAI({
    baseURL: `${url}/v1/provider-a/${project.projectId}`,
    apiKey: project.bearer("provider-a"),
    maxRetries: 0,
  });
}

describe("provider A background responses, driven by the official SDK", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // Within one month: the spend cap tests below would see its spend start again on the 1st (UTC).
    sluice = await startTestGateway(
      { providerABaseUrl: `${fake.url}/a/v1`, metricsEnabled: true },
      { now: clockAwayFromMonthEnd() },
    );
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => {
    fake.setUsage({ input: 11, output: 7, cached: 3, reasoning: 2 });
    fake.setResponsesPollsBeforeDone(1);
  });

  it("records a background run's tokens once, on a row of its own, however often it is polled", async () => {
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    const countedBefore = await inputTokensCounted(sluice.url);
    const { data: queued, response: posted } = await openai.responses
      .create({ model, input: "Hi", background: true })
      .withResponse();
    expect(queued.status).toBe("queued");
    const polls = [];
    for (let poll = 0; poll < 4; poll++)
      polls.push(await openai.responses.retrieve(queued.id).withResponse());
    expect(polls.map(({ data }) => data.status)).toEqual([
      "in_progress",
      "completed",
      "completed",
      "completed",
    ]);
    expect(polls[3]?.data.output_text).toBe("Hello from the fake upstream");

    const rows = await usageRows(sluice.gateway, project.projectId);
    // The POST, four polls, and the run's row.
    expect(rows).toHaveLength(6);
    const calls = [posted, ...polls.map(({ response }) => response)].map(requestIdOf);
    for (const requestId of calls) {
      expect(rows.find((row) => row.request_id === requestId)).toMatchObject({
        status: 200,
        outcome: "ok",
        input_tokens: null,
        output_tokens: null,
        // The POST's cost is the run's, on the run's row; a poll is a read, free.
        cost_usd: requestId === requestIdOf(posted) ? null : 0,
      });
    }
    const [run, ...others] = withTokens(rows);
    expect(others).toEqual([]);
    expect(run).toMatchObject({
      project_id: project.projectId,
      key_id: project.keyIds["provider-a"],
      endpoint: "proxy",
      provider: "provider-a",
      model,
      status: 200,
      error_code: null,
      outcome: "ok",
      latency_ms: 0,
      streamed: 0,
      auth_method: "bearer-test-key",
      ...tokenColumns,
    });
    expect(run?.request_id).toMatch(rowIdOf(queued.created_at));
    expect(run?.cost_usd).toBeCloseTo(runCost, 12);
    expect((await inputTokensCounted(sluice.url)) - countedBefore).toBe(11);

    const report = await sluice.gateway.admin.usageReport(project.projectId, {
      from: "2000-01-01",
      to: "2100-01-01",
      groupBy: "model",
    });
    expect(report.rows.find((row) => row.group === model)).toMatchObject({
      inputTokens: 11,
      outputTokens: 7,
    });
  });

  it("prices a large answer at its own model, not at a model named in the metadata it echoes", async () => {
    // Instructions past the answer's first 4 KiB before its `model`, and an output past its last
    // 4 KiB after it: the answer's last `"model"` was the app's metadata's, which named the row's
    // model (unpriced, so no cost reached the spend cap) for the call and for a background run.
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    fake.setText("word ".repeat(60_000));
    const large = { model, input: "Hi", instructions: "Be brief. ".repeat(500) };
    try {
      await openai.responses.create({ ...large, metadata: { model: "not-a-model" } });
      const queued = await openai.responses.create({ ...large, background: true, metadata: { model: "x" } });
      let done = await openai.responses.retrieve(queued.id);
      while (done.status !== "completed") done = await openai.responses.retrieve(queued.id);
    } finally {
      fake.setText("Hello from the fake upstream");
    }
    const rows = withTokens(await usageRows(sluice.gateway, project.projectId));
    expect(rows).toHaveLength(2);
    for (const row of rows) {
      expect(row).toMatchObject({ model, ...tokenColumns });
      expect(row.cost_usd).toBeCloseTo(runCost, 12);
    }
  });

  it("takes no tokens for the queued POST from a usage its echoed tool schemas spell", async () => {
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    // The API echoes the tools as sent, after the run's own `"usage": null`, before it once finished.
    const report = { type: "object", examples: [{ usage: { input_tokens: 5000, output_tokens: 5000 } }] };
    const tools = [
      {
        type: "function" as const,
        name: "log_call",
        strict: false,
        parameters: { type: "object", properties: { report } },
      },
    ];
    const { data: queued, response: posted } = await openai.responses
      .create({ model, input: "Hi", background: true, tools })
      .withResponse();
    expect(queued.status).toBe("queued");
    expect(queued.usage).toBeNull();
    let done = await openai.responses.retrieve(queued.id);
    while (done.status !== "completed") done = await openai.responses.retrieve(queued.id);
    const rows = await usageRows(sluice.gateway, project.projectId);
    expect(rows.find((row) => row.request_id === requestIdOf(posted))).toMatchObject({
      input_tokens: null,
      output_tokens: null,
    });
    const [run, ...others] = withTokens(rows);
    expect(others).toEqual([]);
    expect(run).toMatchObject({ model, ...tokenColumns });
  });

  it("counts a streamed background POST once when the run is polled afterwards", async () => {
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    const { data: stream, response: posted } = await openai.responses
      .create({ model, input: "Hi", background: true, stream: true })
      .withResponse();
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === "response.completed") completed = event.response;
    expect(completed?.background).toBe(true);
    const polled = await openai.responses.retrieve(completed?.id ?? "");
    expect(polled.status).toBe("completed");

    const rows = await usageRows(sluice.gateway, project.projectId);
    expect(rows).toHaveLength(3);
    expect(rows.find((row) => row.request_id === requestIdOf(posted))).toMatchObject({
      streamed: 1,
      input_tokens: null,
    });
    expect(withTokens(rows)).toEqual([
      expect.objectContaining({
        request_id: expect.stringMatching(rowIdOf(polled.created_at)),
        streamed: 1,
        ...tokenColumns,
      }),
    ]);
  });

  it("counts a run once when a resumed stream, a poll or a cancel answer reports it", async () => {
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    fake.setResponsesPollsBeforeDone(5);
    const first = await openai.responses.create({ model, input: "Hi", background: true });
    const resumed = await openai.responses.retrieve(first.id, { stream: true });
    const types: string[] = [];
    for await (const event of resumed) types.push(event.type);
    expect(types.at(-1)).toBe("response.completed");
    expect((await openai.responses.retrieve(first.id)).status).toBe("completed");

    const second = await openai.responses.create({ model, input: "Hi", background: true });
    const cancelled = await openai.responses.cancel(second.id);
    expect(cancelled.status).toBe("cancelled");
    expect((await openai.responses.retrieve(second.id)).status).toBe("cancelled");
    expect((await openai.responses.cancel(second.id)).status).toBe("cancelled");

    const rows = await usageRows(sluice.gateway, project.projectId);
    // Two POSTs, a resumed stream, two polls, two cancels, and one row per run.
    expect(rows).toHaveLength(9);
    const runs = withTokens(rows);
    expect(runs).toHaveLength(2);
    expect(
      runs.find((row) => rowIdOf(first.created_at).test(row.request_id) && row.streamed === 1),
    ).toBeDefined();
    expect(runs.every((row) => row.request_id.startsWith("bg_") && row.input_tokens === 11)).toBe(true);
    expect(new Set(runs.map((row) => row.request_id)).size).toBe(2);
  });

  it("counts nothing for a GET of a response that ran in the foreground (its POST counted it)", async () => {
    const project = await createTestProject(sluice.gateway);
    const openai = client(sluice.url, project);
    const created = await openai.responses.create({
      model,
      input: "Hi",
      tools: [{ type: "image_generation", background: "transparent" }],
    });
    expect(created.background).toBe(false);
    for (let poll = 0; poll < 2; poll++) await openai.responses.retrieve(created.id);
    const rows = await usageRows(sluice.gateway, project.projectId);
    expect(rows).toHaveLength(3);
    expect(withTokens(rows)).toEqual([
      expect.objectContaining({ request_id: expect.stringMatching(/^req_/), ...tokenColumns }),
    ]);
  });

  it("adds a run's cost to the spend cap once, however often it is polled", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    // Each run costs 12.5 USD on gpt-4o, and its queued POST, whose row has no cost (the run's is
    // known only if it is polled), counts toward the cap at the largest known cost of one call,
    // 12.5 (decision 0057): one run and its POST stay under the cap (25), two reach it (50).
    const project = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 40 });
    const openai = client(sluice.url, project);
    const run = async (polls: number) => {
      const queued = await openai.responses.create({ model: "gpt-4o", input: "Hi", background: true });
      const statuses = [];
      for (let poll = 0; poll < polls; poll++)
        statuses.push((await openai.responses.retrieve(queued.id)).status);
      return statuses;
    };
    // Counted at each of its three completed polls, the run would reach the cap before the last one.
    expect(await run(4)).toEqual(["in_progress", "completed", "completed", "completed"]);
    expect(await run(2)).toEqual(["in_progress", "completed"]);
    const refused = await openai.responses.create({ model: "gpt-4o", input: "Hi" }).catch((error) => error);
    expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(withTokens(await usageRows(sluice.gateway, project.projectId))).toHaveLength(2);
  });

  // Two projects whose provider keys reach the same provider account (the fake has one): each sees
  // the run, so each counts it, on a row of its own, for its own spend cap.
  it("records a run polled through two projects on each project's own row, and each project's cap sees it", async () => {
    fake.setUsage({ input: 1_000_000, output: 1_000_000, cached: 0, reasoning: 0 });
    fake.setResponsesPollsBeforeDone(0);
    const owner = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 1 });
    const other = await createTestProject(sluice.gateway);
    const [viaOwner, viaOther] = [client(sluice.url, owner), client(sluice.url, other)];
    const queued = await viaOwner.responses.create({ model: "gpt-4o", input: "Hi", background: true });
    // The other project polls first, then the owner, then the other again.
    for (const openai of [viaOther, viaOwner, viaOther])
      expect((await openai.responses.retrieve(queued.id)).status).toBe("completed");
    const runs = await Promise.all(
      [owner, other].map(async (project) => withTokens(await usageRows(sluice.gateway, project.projectId))),
    );
    for (const [index, project] of [owner, other].entries()) {
      expect(runs[index]).toEqual([
        expect.objectContaining({
          project_id: project.projectId,
          request_id: expect.stringMatching(rowIdOf(queued.created_at)),
          input_tokens: 1_000_000,
          cost_usd: 12.5,
        }),
      ]);
    }
    expect(runs[0]?.[0]?.request_id).not.toBe(runs[1]?.[0]?.request_id);
    // The owner's 12.5 USD run reached its 1 USD cap: its next call is refused.
    const refused = await viaOwner.responses.retrieve(queued.id).catch((error) => error);
    expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
  });
});

describe.skipIf(!postgresAvailable)(
  "provider A background responses on two instances sharing PostgreSQL",
  () => {
    let fake: FakeUpstream;
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    let one: TestGateway;
    let two: TestGateway;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      schema = await createPostgresSchema();
      const shared = {
        providerABaseUrl: `${fake.url}/a/v1`,
        databaseUrl: schema.url,
        masterKey: randomBytes(32).toString("base64"),
        metricsEnabled: true,
      };
      one = await startTestGateway(shared);
      two = await startTestGateway(shared);
    }, 30_000);

    afterAll(async () => {
      await one?.close();
      await two?.close();
      await fake?.close();
      await schema?.drop();
    });

    it("records a run polled through both instances once, and each instance's token metrics count it once", async () => {
      const project = await createTestProject(one.gateway);
      const [viaOne, viaTwo] = [client(one.url, project), client(two.url, project)];
      const countedBefore = [await inputTokensCounted(one.url), await inputTokensCounted(two.url)];
      const queued = await viaOne.responses.create({ model, input: "Hi", background: true });
      expect((await viaTwo.responses.retrieve(queued.id)).status).toBe("in_progress");
      for (let poll = 0; poll < 3; poll++) {
        expect((await viaTwo.responses.retrieve(queued.id)).status).toBe("completed");
        expect((await viaOne.responses.retrieve(queued.id)).status).toBe("completed");
      }
      await one.gateway.flushUsage();
      const rows = await usageRows(two.gateway, project.projectId);
      expect(rows).toHaveLength(9);
      expect(withTokens(rows)).toEqual([
        expect.objectContaining({
          request_id: expect.stringMatching(rowIdOf(queued.created_at)),
          ...tokenColumns,
        }),
      ]);
      expect((await inputTokensCounted(one.url)) - (countedBefore[0] ?? 0)).toBe(11);
      expect((await inputTokensCounted(two.url)) - (countedBefore[1] ?? 0)).toBe(11);
    });
  },
);

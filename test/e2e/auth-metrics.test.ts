import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

describe("metrics of authentication and its throttle", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      metricsEnabled: true,
      authFailureLimit: 2,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  const call = (projectId: string, bearer: string, path = "chat/completions") =>
    fetch(`${sluice.url}/v1/provider-a/${projectId}/${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });

  it("counts the throttle's refusals, and takes no label from what a caller sent", async () => {
    const unknownProject = "no-such-project-4f1c2a";
    const strangePath = "chat/completions-8e7d6c";
    // Forwarded: the fake provider's own 404 for a path it does not know.
    expect((await call(project.projectId, project.bearer("provider-a"), strangePath)).status).toBe(404);
    expect((await call(unknownProject, project.bearer("provider-a"))).status).toBe(404);
    // Failures on a project that exists count for this address and that project (limit 2).
    const failures: Response[] = [];
    for (let index = 0; index < 2; index++) {
      const failure = await call(project.projectId, `${project.partialKeys["provider-a"]}.tk_wrong`);
      expect(failure.status).toBe(401);
      failures.push(failure);
    }
    const throttled = await call(project.projectId, project.bearer("provider-a"));
    expect(throttled.status).toBe(429);
    // The failures the throttle let through have their rows; its refusal has none (a row each would
    // let a client without credentials grow the table as fast as it sends).
    for (const failure of failures)
      expect(await usageRowOf(sluice.gateway, failure)).toMatchObject({
        status: 401,
        error_code: "UNAUTHORIZED",
      });
    await sluice.gateway.flushUsage();
    const throttledRows = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .select("request_id")
      .where("request_id", "=", throttled.headers.get("x-request-id") ?? "")
      .execute();
    expect(throttledRows).toEqual([]);

    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toContain(
      'sluice_rate_limit_decisions_total{limit="auth_failures",decision="limited"} 1',
    );
    expect(metrics).toContain('sluice_auth_results_total{method="none",result="TOO_MANY_REQUESTS"} 1');
    for (const input of [
      unknownProject,
      project.projectId,
      strangePath,
      project.testKey,
      project.partialKeys["provider-a"],
      project.providerKeys["provider-a"],
    ]) {
      expect(metrics.includes(input), input).toBe(false);
    }
  });

  it("counts the model lists' refusals by the same throttle", async () => {
    // This address is over the limit since the test above: the list refuses before any lookup.
    const list = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/models`);
    expect(list.status).toBe(429);
    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toContain(
      'sluice_rate_limit_decisions_total{limit="auth_failures",decision="limited"} 2',
    );
  });
});

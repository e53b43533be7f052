import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/** What /metrics says of the usage rows: queued, written, dropped (audit: observe). */
describe("usage rows in the metrics", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, metricsEnabled: true });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  const metric = async (name: string) => {
    const body = await (await fetch(`${sluice.url}/metrics`)).text();
    const line = body.split("\n").find((each) => each.startsWith(`${name} `));
    return line === undefined ? undefined : Number(line.slice(name.length + 1));
  };

  it("counts the rows written, so an operator sees the writes go on and not only their failures", async () => {
    const project = await createTestProject(sluice.gateway);
    expect(await metric("sluice_usage_rows_written_total")).toBe(0);
    for (let call = 0; call < 3; call++) {
      const response = await proxiedChat(sluice.url, project);
      expect(response.status).toBe(200);
      await response.arrayBuffer();
    }
    // A refused request's row is written too.
    const refused = await proxiedChat(sluice.url, { projectId: project.projectId, bearer: "wrong" });
    expect(refused.status).toBe(401);
    await refused.arrayBuffer();
    await sluice.gateway.flushUsage();
    expect(await metric("sluice_usage_rows_written_total")).toBe(4);
    expect(await metric("sluice_usage_queue_depth")).toBe(0);
    expect(await metric("sluice_usage_rows_dropped_total")).toBe(0);
  });
});

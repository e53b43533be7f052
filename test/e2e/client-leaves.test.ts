import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

describe("a structured analysis or image generation whose client leaves", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
    project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  it.each([
    ["/v1/text", { text: "hello" }, "text"],
    ["/v1/image", { prompt: "a cat" }, "image"],
  ])(
    "%s aborts the provider call and records the request as aborted (499), not answered",
    async (path, payload, endpoint) => {
      fake.clear();
      fake.setLatencyMs(1000);
      const body = JSON.stringify(payload);
      const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
      socket.on("error", () => {});
      socket.write(
        `POST ${path}/${project.projectId} HTTP/1.1\r\nhost: x\r\n` +
          `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      const started = Date.now() + 2000;
      while (fake.requests.length === 0 && Date.now() < started)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(fake.requests).toHaveLength(1);
      socket.destroy();
      const upstream = await fake.waitForAbort(500);
      expect(upstream.aborted).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, 50));
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .selectAll()
        .where("project_id", "=", project.projectId)
        .where("endpoint", "=", endpoint)
        .execute();
      expect(rows).toHaveLength(1);
      expect(rows[0]).toMatchObject({ status: 499, outcome: "aborted" });
    },
  );
});

import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  logLinesOf,
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
      // The provider holds its answer far longer than the abort may take on a loaded machine.
      fake.setLatencyMs(10_000);
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
      const upstream = await fake.waitForAbort(5000);
      expect(upstream.aborted).toBe(true);
      fake.setLatencyMs(0);
      // The row is written once the gateway has seen its call end, which may come after the abort.
      const rows = await vi.waitFor(
        async () => {
          await sluice.gateway.flushUsage();
          const found = await sluice.gateway.database.db
            .selectFrom("usage_records")
            .selectAll()
            .where("project_id", "=", project.projectId)
            .where("endpoint", "=", endpoint)
            .execute();
          expect(found).toHaveLength(1);
          return found;
        },
        { timeout: 5000, interval: 20 },
      );
      expect(rows[0]).toMatchObject({ status: 499, outcome: "aborted" });
    },
  );
});

describe("the access line and request metric of a client that leaves", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake), metricsEnabled: true });
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  /** Sends a proxied chat call on a socket of its own, to be cut by the test. */
  const send = (body: object) => {
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    socket.on("error", () => {});
    const text = JSON.stringify({ model: "gpt-4o-mini", messages: [], ...body });
    socket.write(
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(text)}\r\n\r\n${text}`,
    );
    return socket;
  };
  const accessLineOf = (requestId: string) =>
    logLinesOf(sluice).find((line) => line.msg === "request" && line.requestId === requestId);

  it("says 499 for a client that left before the answer began, and aborted for a stream it cut", async () => {
    fake.setLatencyMs(400);
    const early = send({});
    // Gone once its call reached the provider (which holds the answer 400 ms), not after a fixed
    // wait: a slow gateway that had not called the provider yet would make no call to abort.
    await vi.waitFor(() => expect(fake.requests).toHaveLength(1), { timeout: 2000, interval: 5 });
    early.destroy();
    await fake.waitForAbort(2000);
    fake.setLatencyMs(0);
    fake.setSseDelayMs(100);
    const mid = send({ stream: true });
    await new Promise<void>((resolve) => mid.once("data", () => resolve()));
    const streamCall = fake.requests[1];
    mid.destroy();
    // This stream's own abort: the first call's, seen above, would answer at once.
    await fake.waitForAbort(2000, (request) => request === streamCall);
    fake.setSseDelayMs(0);
    const rows = await vi.waitFor(
      async () => {
        await sluice.gateway.flushUsage();
        const found = await sluice.gateway.database.db
          .selectFrom("usage_records")
          .select(["request_id", "status"])
          .where("project_id", "=", project.projectId)
          .orderBy("request_id")
          .execute();
        expect(found).toHaveLength(2);
        return found;
      },
      { timeout: 5000, interval: 20 },
    );
    expect(rows.map((row) => row.status)).toEqual([499, 200]);
    const [left, cut] = rows.map((row) => row.request_id) as [string, string];
    // Before, the line and the metric said 200 for the first: Node's status before anything is sent.
    await vi.waitFor(() => {
      expect(accessLineOf(left)).toMatchObject({ status: 499 });
      expect(accessLineOf(cut)).toMatchObject({ status: 200, aborted: true });
    });
    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toMatch(/sluice_http_requests_total\{[^}]*status="499"[^}]*\} 1/);
  });
});

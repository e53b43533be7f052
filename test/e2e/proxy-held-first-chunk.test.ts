import type { Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLocalTcpServer } from "../support/local-server.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/** What the raw provider does once it has sent its head and first bytes: close, or go silent. */
type After = "cut" | "silent";

interface Plan {
  head: string;
  first: string;
  after: After;
}

/**
 * A provider whose first body chunk the gateway holds back whole (the unfinished first event of a
 * stream Sluice asked usage for; an error body shorter than the key it masks), and which then fails:
 * nothing reached the client, so it gets the clean 502 or 504 a provider that fails before its
 * first chunk gets (docs/proxy.md, Bodies and streams), not a connection closed without an answer.
 */
describe("a provider that fails while the gateway holds its whole first chunk back", () => {
  let sluice: TestGateway;
  let project: TestProject;
  let upstream: Awaited<ReturnType<typeof startLocalTcpServer>>;
  let plan: Plan;
  const silent: Socket[] = [];

  beforeAll(async () => {
    upstream = await startLocalTcpServer((socket) =>
      socket.once("data", () => {
        socket.write(`${plan.head}\r\n${plan.first.length.toString(16)}\r\n${plan.first}\r\n`);
        if (plan.after === "cut") setTimeout(() => socket.destroy(), 50);
        else silent.push(socket);
      }),
    );
    const url = `http://127.0.0.1:${upstream.port}`;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/v1`,
      providerBBaseUrl: `${url}/v1`,
      providerCBaseUrl: `${url}/v1beta`,
      upstreamIdleTimeoutMs: 1000,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    for (const socket of silent) socket.destroy();
    await sluice?.close();
    await upstream?.close();
  });

  const streamHead = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n";
  const errorHead =
    "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n";

  const cases: Array<[string, Plan, number, string]> = [
    [
      "a stream Sluice asked usage for, cut inside its first event",
      { head: streamHead, first: 'data: {"id":"chatcmpl-1","choi', after: "cut" },
      502,
      "PROVIDER_ERROR",
    ],
    [
      "a stream Sluice asked usage for, silent inside its first event",
      { head: streamHead, first: 'data: {"id":"chatcmpl-1","choi', after: "silent" },
      504,
      "PROVIDER_TIMEOUT",
    ],
    [
      "an error answer cut within the bytes held back to mask the key",
      { head: errorHead, first: '{"error":', after: "cut" },
      502,
      "PROVIDER_ERROR",
    ],
  ];

  it.each(cases)("%s: answered cleanly, and its row says so", async (_name, given, status, code) => {
    plan = given;
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({
        model: "gpt-5.4-mini",
        stream: true,
        messages: [{ role: "user", content: "Hi" }],
      }),
    });
    expect(response.status).toBe(status);
    const body = (await response.json()) as { error: { code: string; details: { retryable: boolean } } };
    expect(body.error.code).toBe(code);
    expect(body.error.details.retryable).toBe(true);
    const row = await usageRowById(sluice.gateway, response.headers.get("x-request-id"));
    expect(row).toMatchObject({ status, error_code: code, outcome: "error" });
  });
});

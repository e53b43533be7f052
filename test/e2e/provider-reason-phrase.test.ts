import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import { startLocalTcpServer } from "../support/local-server.js";
import {
  createProjectOnEachProvider,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const chat = {
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: '{"title":"A"}' }, finish_reason: "stop" }],
  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
};
const images = { created: 1, data: [{ b64_json: tinyPng.toString("base64") }] };

/**
 * A provider's status line whose reason phrase has bytes past ASCII (RFC 9112 lets it: obs-text),
 * which Sluice's HTTP client decodes as UTF-8: the structured and image endpoints take the answer
 * as they take any, whatever the phrase (no SDK reads it).
 */
describe("a provider whose reason phrase is not ASCII", () => {
  let reason = Buffer.alloc(0);
  let upstream: { port: number; close(): Promise<void> };
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalTcpServer((socket) => {
      let received = "";
      socket.on("data", (data: Buffer) => {
        received += data.toString("latin1");
        const headEnd = received.indexOf("\r\n\r\n");
        if (headEnd < 0) return;
        const length = Number(/content-length:\s*(\d+)/i.exec(received.slice(0, headEnd))?.[1] ?? 0);
        if (received.length < headEnd + 4 + length) return;
        const body = JSON.stringify(received.startsWith("POST /v1/images") ? images : chat);
        socket.end(
          Buffer.concat([
            Buffer.from("HTTP/1.1 200 "),
            reason,
            Buffer.from(
              `\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
            ),
          ]),
        );
      });
    });
    sluice = await startTestGateway({ providerABaseUrl: `http://127.0.0.1:${upstream.port}/v1` });
    project = (await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema }))["provider-a"];
  });
  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  it.each([
    ["UTF-8 within latin-1", Buffer.from("\u00c7a va", "utf8")],
    ["UTF-8 past latin-1", Buffer.from("\u30b5\u30fc\u30d3\u30b9", "utf8")],
    ["latin-1, not UTF-8", Buffer.from("Caf\u00e9", "latin1")],
  ])("/v1/text and /v1/image answer 200 for a reason phrase in %s", async (_name, phrase) => {
    reason = phrase;
    for (const route of ["text", "image"] as const) {
      const response = await fetch(`${sluice.url}/v1/${route}/${project.projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify(route === "text" ? { text: "x" } : { prompt: "a lighthouse" }),
      });
      const body = (await response.clone().json()) as Record<string, unknown>;
      expect({ route, status: response.status, error: body.error }).toEqual({
        route,
        status: 200,
        error: undefined,
      });
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 200, outcome: "ok" });
    }
  });
});

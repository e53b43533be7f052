import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { providerA, providerB, providerC } from "../fakes/fake-upstream-responses.js";
import { startProxyStage } from "../support/proxy-stage.js";
import { createTestProject, type TestProject, titleSchema, usageRowOf } from "../support/test-gateway.js";

/**
 * A provider answers in UTF-8: a model name it gives that is not ASCII is recorded in the usage row
 * as it reads, not as its bytes read one by one (`modÃ¨le-Ã¼`), whether the answer is one JSON body
 * or a stream, proxied or a structured call's.
 */
describe("a model name of the provider's answer that is not ASCII", () => {
  const model = "modèle-ü";
  const usage = { input: 11, output: 7, cached: 3, reasoning: 2 };
  let stage: Awaited<ReturnType<typeof startProxyStage>>;
  let structured: TestProject;

  beforeAll(async () => {
    stage = await startProxyStage();
    structured = await createTestProject(stage.sluice.gateway, {
      model: "gpt-4o-mini",
      outputSchema: titleSchema,
    });
  });
  afterAll(async () => {
    await stage?.close();
  });

  const sse = (events: unknown[]) => events.map((event) => `data: ${JSON.stringify(event)}\n\n`);

  const calls: Array<[string, "provider-a" | "provider-b" | "provider-c", string, () => void]> = [
    [
      "provider A's chat answer",
      "provider-a",
      "chat/completions",
      () => stage.fake.enqueueResponse({ status: 200, body: providerA.chat(model, "hi", usage) }),
    ],
    [
      "provider A's chat stream",
      "provider-a",
      "chat/completions",
      () =>
        stage.fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "text/event-stream" },
          parts: providerA.chunks(model, "hi", usage, true),
        }),
    ],
    [
      "provider B's message",
      "provider-b",
      "messages",
      () =>
        stage.fake.enqueueResponse({
          status: 200,
          body: providerB.message(model, [{ type: "text", text: "hi" }], usage),
        }),
    ],
    [
      "provider B's message stream",
      "provider-b",
      "messages",
      () =>
        stage.fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "text/event-stream" },
          parts: providerB.events(model, "hi", usage),
        }),
    ],
    [
      "provider C's answer",
      "provider-c",
      "models/gemini-2.5-flash:generateContent",
      () => stage.fake.enqueueResponse({ status: 200, body: providerC.response(model, "hi", usage) }),
    ],
    [
      "provider C's stream",
      "provider-c",
      "models/gemini-2.5-flash:streamGenerateContent?alt=sse",
      () =>
        stage.fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "text/event-stream" },
          parts: sse(providerC.chunks(model, "hi", usage)),
        }),
    ],
    [
      "provider C's stream as a JSON array",
      "provider-c",
      "models/gemini-2.5-flash:streamGenerateContent",
      () => {
        const text = JSON.stringify(providerC.chunks(model, "hi", usage));
        const half = text.indexOf("},{") + 2;
        stage.fake.enqueueResponse({
          status: 200,
          headers: { "content-type": "application/json" },
          parts: [text.slice(0, half), text.slice(half)],
        });
      },
    ],
  ];

  it.each(calls)("is recorded as it reads for %s, proxied", async (_, provider, path, answer) => {
    answer();
    const { sluice, project } = stage;
    const response = await fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });
    expect(Buffer.from(await response.arrayBuffer()).toString("utf8")).toContain(model);
    expect(response.status).toBe(200);
    const row = await usageRowOf(sluice.gateway, response);
    expect(row.model).toBe(model);
    expect(row.input_tokens).toBe(11);
  });

  it("is recorded as it reads for a structured call's answer", async () => {
    const { sluice, fake } = stage;
    fake.enqueueResponse({
      status: 200,
      body: providerA.chat(model, JSON.stringify({ title: "A title" }), usage),
    });
    const response = await fetch(`${sluice.url}/v1/text/${structured.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${structured.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "x" }),
    });
    expect(response.status).toBe(200);
    const row = await usageRowOf(sluice.gateway, response);
    expect(row.model).toBe(model);
  });
});

import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const schema = {
  type: "object",
  properties: { title: { type: "string" } },
  required: ["title"],
  additionalProperties: false,
};

/** Each provider's answer when its filter stopped the output, as its API sends one (recorded shapes). */
const filtered = {
  "provider-a": {
    id: "chatcmpl-filtered",
    object: "chat.completion",
    created: 1_700_000_000,
    model: "gpt-5.4-mini",
    choices: [{ index: 0, message: { role: "assistant", content: null }, finish_reason: "content_filter" }],
    usage: { prompt_tokens: 11, completion_tokens: 0, total_tokens: 11 },
  },
  "provider-b": {
    id: "msg_refused",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-5-5",
    content: [],
    stop_reason: "refusal",
    stop_sequence: null,
    usage: { input_tokens: 11, output_tokens: 0 },
  },
  "provider-c": {
    candidates: [{ finishReason: "SAFETY", index: 0, safetyRatings: [] }],
    usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
    modelVersion: "gemini-3.5-flash-lite",
  },
} as const;

/** Provider C's answer to a prompt its filter blocked: no candidates at all. */
const promptBlocked = {
  promptFeedback: { blockReason: "SAFETY", safetyRatings: [] },
  usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
  modelVersion: "gemini-3.5-flash-lite",
};

describe("a structured analysis the provider's content filter stopped", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  const projects = {} as Record<keyof typeof filtered, TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const)
      projects[provider] = await createTestProject(sluice.gateway, { provider, outputSchema: schema });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  const post = (provider: keyof typeof filtered) =>
    fetch(`${sluice.url}/v1/text/${projects[provider].projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${projects[provider].bearer(provider)}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ text: "x" }),
    });

  it.each([
    ["provider-a", filtered["provider-a"]],
    ["provider-b", filtered["provider-b"]],
    ["provider-c", filtered["provider-c"]],
    ["provider-c", promptBlocked],
  ] as const)("answers 502 saying so on %s, with the tokens of both attempts", async (provider, body) => {
    fake.enqueueResponse({ status: 200, body });
    fake.enqueueResponse({ status: 200, body });
    const response = await post(provider);
    expect(response.status).toBe(502);
    const { error } = (await response.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe("PROVIDER_ERROR");
    expect(error.message).toBe(
      "The provider's content filter stopped the model's answer, also after one repair attempt",
    );
    expect(fake.requests).toHaveLength(2);
    const row = await usageRowOf(sluice.gateway, response);
    expect(row).toMatchObject({ status: 502, outcome: "error", input_tokens: 22 });
  });
});

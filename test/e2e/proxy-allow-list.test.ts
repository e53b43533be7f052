import OpenAI from "openai";
import { beforeEach, describe, expect, it } from "vitest";
import type { ProxyAllowListRules } from "../../src/storage/project-repository.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import { usageRowById, usageRowOf } from "../support/test-gateway.js";

/** The rules of a mobile app that only chats, on each provider (docs/proxy.md). */
const chatOnly: ProxyAllowListRules = {
  "provider-a": ["POST chat/completions", "GET responses/*"],
  "provider-b": ["POST messages"],
  "provider-c": ["POST models/*:generateContent"],
};

describe("a project's proxy allow-list, driven by the official SDKs", () => {
  const allow = (proxyAllowList: ProxyAllowListRules | null) =>
    stage.sluice.gateway.admin.updateProject(stage.project.projectId, { proxyAllowList });

  /** A call to provider A's proxy with the project's Bearer, as a client without an SDK sends it. */
  const callA = (method: string, path: string) =>
    fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/${path}`, {
      method,
      headers: { authorization: `Bearer ${stage.project.bearer("provider-a")}` },
    });

  const stage = useProxyStage(sdkClients);
  beforeEach(async () => {
    await allow(chatOnly);
    stage.fake.clear();
  });

  it("passes a chat completion the list allows, and answers files.list() 403 without calling the provider", async () => {
    const completion = await stage.openai.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(completion.choices[0]?.message.content).toBe("Hello from the fake upstream");
    expect(stage.fake.requests.map((request) => request.path)).toEqual(["/a/v1/chat/completions"]);

    const refused = await stage.openai.files.list().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
    const error = refused as InstanceType<typeof OpenAI.PermissionDeniedError>;
    expect(error.status).toBe(403);
    expect(error.error).toEqual({
      code: "FORBIDDEN",
      message: "This project's proxy allow-list does not include GET files on provider-a",
      requestId: error.headers?.get("x-request-id"),
      details: { provider: "provider-a", method: "GET", path: "files" },
    });
    expect(stage.fake.requests).toHaveLength(1);
    expect(await usageRowById(stage.sluice.gateway, error.headers?.get("x-request-id"))).toMatchObject({
      endpoint: "proxy",
      provider: "provider-a",
      key_id: stage.project.keyIds["provider-a"],
      status: 403,
      error_code: "FORBIDDEN",
      outcome: "error",
      auth_method: "bearer-test-key",
    });
  });

  it("refuses provider A's account-wide calls, and still serves the public model list", async () => {
    const calls: Array<() => Promise<unknown>> = [
      () => stage.openai.chat.completions.list(),
      () => stage.openai.files.retrieve("file_1"),
      () => stage.openai.files.content("file_1"),
      () => stage.openai.files.delete("file_1"),
      () => stage.openai.models.delete("ft:gpt-4o-mini:org::abc"),
      () => stage.openai.fineTuning.jobs.create({ model: "gpt-4o-mini", training_file: "file_1" }),
      () => stage.openai.embeddings.create({ model: "text-embedding-3-small", input: "Hi" }),
    ];
    for (const call of calls) await expect(call()).rejects.toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(stage.fake.requests).toEqual([]);
    const models = await stage.openai.models.list();
    expect(models.data.length).toBeGreaterThan(0);
    expect(stage.fake.requests).toEqual([]);
  });

  it("matches the path as the provider reads it, decoded, without its query string", async () => {
    const reached = async (method: string, path: string) => {
      stage.fake.clear();
      const response = await callA(method, path);
      await response.arrayBuffer();
      return { status: response.status, upstream: stage.fake.requests.map((request) => request.path) };
    };
    expect(await reached("GET", "responses/resp_1?include[]=x")).toMatchObject({
      upstream: ["/a/v1/responses/resp_1?include[]=x"],
    });
    expect((await reached("HEAD", "responses/resp_1")).upstream).toEqual(["/a/v1/responses/resp_1"]);
    expect((await reached("GET", "resp%6Fnses/resp_1")).upstream).toEqual(["/a/v1/responses/resp_1"]);
    for (const refused of [
      "responses/resp_1/input_items",
      "responses/resp_1%3F",
      "responses/r%25",
      "files?x=1",
    ])
      expect(await reached("GET", refused)).toEqual({ status: 403, upstream: [] });
    expect(await reached("DELETE", "responses/resp_1")).toEqual({ status: 403, upstream: [] });
    // Refused before the list is read, as without one.
    expect(await reached("GET", "responses/a%2Ffiles")).toEqual({ status: 400, upstream: [] });
  });

  it("passes provider B's messages and refuses its batches and token counts", async () => {
    const message = await stage.anthropic.messages.create({
      model: "claude-sonnet-5-5",
      max_tokens: 16,
      messages: [{ role: "user", content: "Hi" }],
    });
    expect(message.type).toBe("message");
    const refused = await stage.anthropic.messages.batches
      .create({ requests: [] })
      .catch((error: unknown) => error as { status: number; error: unknown });
    expect(refused).toMatchObject({
      status: 403,
      error: {
        error: {
          code: "FORBIDDEN",
          message: "This project's proxy allow-list does not include POST v1/messages/batches on provider-b",
        },
      },
    });
    await expect(
      stage.anthropic.messages.countTokens({
        model: "claude-sonnet-5-5",
        messages: [{ role: "user", content: "Hi" }],
      }),
    ).rejects.toMatchObject({ status: 403 });
    expect(stage.fake.requests.map((request) => request.path)).toEqual(["/b/v1/messages"]);
  });

  it("passes provider C's generateContent for any model, and refuses its streaming and context caches", async () => {
    const result = await stage.google.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
    expect(result.text).toBeTypeOf("string");
    await expect(
      stage.google.models.generateContentStream({ model: "gemini-2.5-flash", contents: "Hi" }),
    ).rejects.toMatchObject({ status: 403 });
    await expect(
      stage.google.caches.create({ model: "gemini-2.5-flash", config: { contents: "A long document" } }),
    ).rejects.toMatchObject({ status: 403 });
    // @google/genai 3.x addresses v1 (1.x and 2.x: v1beta): the rule names neither.
    expect(stage.fake.requests.map((request) => request.path)).toEqual([
      "/c/v1/models/gemini-2.5-flash:generateContent",
    ]);
  });

  it("allows nothing of a provider a set list leaves out", async () => {
    await allow({ "provider-a": ["POST chat/completions"] });
    const response = await stage.anthropic.messages
      .create({ model: "claude-sonnet-5-5", max_tokens: 16, messages: [{ role: "user", content: "Hi" }] })
      .catch((error: unknown) => error);
    expect(response).toMatchObject({ status: 403 });
    expect(stage.fake.requests).toEqual([]);
  });

  it("lets every call through again once the list is removed (null)", async () => {
    await allow(null);
    const response = await callA("GET", "files");
    await response.arrayBuffer();
    expect(response.status).not.toBe(403);
    expect(stage.fake.requests.map((request) => request.path)).toEqual(["/a/v1/files"]);
    expect((await usageRowOf(stage.sluice.gateway, response)).error_code).not.toBe("FORBIDDEN");
  });
});

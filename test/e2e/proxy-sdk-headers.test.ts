import type { IncomingMessage } from "node:http";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { createOpenAI } from "@ai-sdk/openai";
import Anthropic from "@anthropic-ai/sdk";
import { GoogleGenAI } from "@google/genai";
import { generateText } from "ai";
import OpenAI from "openai";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { FakeUpstream } from "../fakes/fake-upstream.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";
import { type TestGateway, type TestProject, usageRowOf } from "../support/test-gateway.js";

/**
 * Every header each official SDK sends on a call (with the options that add headers set), as it
 * reaches Sluice, and what Sluice does with it (docs/proxy.md, "Headers"): `forwarded` reach the
 * provider as sent, `dropped` never do, `replaced` are dropped and set by Sluice itself. The list is
 * checked against what the SDK sends: a header a new SDK version adds fails here until it is
 * decided on.
 */
interface SdkHeaders {
  forwarded: string[];
  dropped: string[];
  replaced: string[];
}

const stainless = [
  "x-stainless-arch",
  "x-stainless-lang",
  "x-stainless-os",
  "x-stainless-package-version",
  "x-stainless-retry-count",
  "x-stainless-runtime",
  "x-stainless-runtime-version",
  "x-stainless-timeout",
];

/** What Node's fetch, which every SDK here sends with, adds of its own: `accept` and `user-agent` only when the SDK sets none. */
const nodeFetch = { dropped: ["accept-language", "sec-fetch-mode"], replaced: ["accept-encoding"] };

const sdkHeaders: Record<string, SdkHeaders> = {
  // `organization`, `project` and a request `timeout` set.
  openai: {
    forwarded: ["accept", "content-type", "user-agent", ...stainless],
    // The app's Sluice key; the account selectors are the operator's choice, made with the key.
    dropped: ["authorization", "openai-organization", "openai-project", ...nodeFetch.dropped],
    replaced: nodeFetch.replaced,
  },
  // `files.content` (a GET, no body), a download resumed: the app's `Range` and `If-Range` given as
  // request headers, which it sends as given; forwarded because Sluice does not meter the answer.
  // With a conditional header (`If-Range`) Node's fetch adds `Cache-Control` and `Pragma: no-cache`.
  "openai files.content": {
    forwarded: ["accept", "user-agent", "range", "if-range", "cache-control", ...stainless],
    dropped: ["authorization", "pragma", ...nodeFetch.dropped],
    replaced: nodeFetch.replaced,
  },
  // `dangerouslyAllowBrowser`, `timeout`, `betas`, `workspace_id`, `user_profile_id` set.
  anthropic: {
    forwarded: [
      "accept",
      "content-type",
      "user-agent",
      "anthropic-beta",
      "anthropic-dangerous-direct-browser-access",
      ...stainless,
    ],
    dropped: ["authorization", "anthropic-workspace-id", "anthropic-user-profile-id", ...nodeFetch.dropped],
    replaced: ["anthropic-version", ...nodeFetch.replaced],
  },
  // `httpOptions.timeout` set.
  google: {
    forwarded: ["accept", "content-type", "user-agent", "x-server-timeout"],
    dropped: ["x-goog-api-key", ...nodeFetch.dropped],
    replaced: ["x-goog-api-client", ...nodeFetch.replaced],
  },
  // `organization`, `project` set.
  "@ai-sdk/openai": {
    forwarded: ["accept", "content-type", "user-agent"],
    dropped: ["authorization", "openai-organization", "openai-project", ...nodeFetch.dropped],
    replaced: nodeFetch.replaced,
  },
  "@ai-sdk/anthropic": {
    forwarded: ["accept", "content-type", "user-agent"],
    dropped: ["x-api-key", ...nodeFetch.dropped],
    replaced: ["anthropic-version", ...nodeFetch.replaced],
  },
  "@ai-sdk/google": {
    forwarded: ["accept", "content-type", "user-agent"],
    dropped: ["x-goog-api-key", ...nodeFetch.dropped],
    replaced: nodeFetch.replaced,
  },
};

/** The injected headers of each provider (fake upstream's name for it). */
const injected = {
  a: ["authorization", "accept-encoding"],
  b: ["x-api-key", "anthropic-version", "accept-encoding"],
  c: ["x-goog-api-key", "x-goog-api-client", "accept-encoding"],
};

/** What a request carries for the connection, whoever sends it: not the app's. */
const transport = new Set(["host", "connection", "content-length"]);

describe("the official SDKs' request headers through the proxies", () => {
  let stage: ProxyStage;
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  const base = (provider: string) => `${sluice.url}/v1/${provider}/${project.projectId}`;
  /** The names of the headers of each proxied request, as it reached Sluice. */
  const arrived: string[][] = [];

  beforeAll(async () => {
    stage = await startProxyStage();
    ({ fake, sluice, project } = stage);
    sluice.server.on("request", (request: IncomingMessage) => {
      if (request.url?.startsWith("/v1/provider-")) arrived.push(Object.keys(request.headers));
    });
  });
  afterAll(() => stage.close());
  beforeEach(() => {
    fake.clear();
    arrived.length = 0;
  });

  const calls: Record<string, () => Promise<unknown>> = {
    openai: () =>
      new OpenAI({
        baseURL: base("provider-a"),
        apiKey: project.bearer("provider-a"),
        organization: "org-app",
        project: "proj_app",
        maxRetries: 0,
      }).chat.completions.create(
        { model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] },
        { timeout: 30_000 },
      ),
    "openai files.content": () =>
      new OpenAI({
        baseURL: base("provider-a"),
        apiKey: project.bearer("provider-a"),
        maxRetries: 0,
      }).files.content("file-abc", {
        headers: { Range: "bytes=100-", "If-Range": '"file-content-v1"' },
        timeout: 30_000,
      }),
    anthropic: () =>
      new Anthropic({
        baseURL: base("provider-b"),
        apiKey: project.bearer("provider-b"),
        dangerouslyAllowBrowser: true,
        timeout: 30_000,
        maxRetries: 0,
      }).beta.messages.create({
        model: "claude-sonnet-4-5",
        max_tokens: 64,
        messages: [{ role: "user", content: "Hi" }],
        betas: ["prompt-caching-2024-07-31"],
        workspace_id: "wrkspc_app",
        user_profile_id: "uprof_app",
      }),
    google: () =>
      new GoogleGenAI({
        apiKey: project.bearer("provider-c"),
        httpOptions: { baseUrl: base("provider-c"), timeout: 30_000 },
      }).models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" }),
    "@ai-sdk/openai": () =>
      generateText({
        model: createOpenAI({
          baseURL: base("provider-a"),
          apiKey: project.bearer("provider-a"),
          organization: "org-app",
          project: "proj_app",
        }).chat("gpt-4o-mini"),
        prompt: "Hi",
        maxRetries: 0,
      }),
    "@ai-sdk/anthropic": () =>
      generateText({
        model: createAnthropic({ baseURL: `${base("provider-b")}/v1`, apiKey: project.bearer("provider-b") })(
          "claude-sonnet-4-5",
        ),
        prompt: "Hi",
        maxRetries: 0,
      }),
    "@ai-sdk/google": () =>
      generateText({
        model: createGoogleGenerativeAI({
          baseURL: `${base("provider-c")}/v1beta`,
          apiKey: project.bearer("provider-c"),
        })("gemini-2.5-flash"),
        prompt: "Hi",
        maxRetries: 0,
      }),
  };

  it.each(Object.keys(sdkHeaders))(
    "%s: each header it sends is forwarded, dropped or replaced as listed",
    async (sdk) => {
      const { forwarded, dropped, replaced } = sdkHeaders[sdk] as SdkHeaders;
      await (calls[sdk] as () => Promise<unknown>)();
      expect(arrived).toHaveLength(1);
      const sent = (arrived[0] as string[]).filter((name) => !transport.has(name));
      expect(sent.sort(), "the headers the SDK sends").toEqual(
        [...forwarded, ...dropped, ...replaced].sort(),
      );
      const upstream = fake.last()!;
      const own = injected[upstream.provider];
      const received = Object.keys(upstream.headers).filter((name) => !transport.has(name));
      expect(received.sort(), "the headers the provider gets").toEqual([...forwarded, ...own].sort());
      // A dropped header of the name Sluice injects (the app's key) never carries the app's value.
      for (const name of own) expect(upstream.headers[name]).not.toContain(project.testKey);
      expect(upstream.headers["accept-encoding"]).toBe("identity");
      if (upstream.provider === "b") expect(upstream.headers["anthropic-version"]).toBe("2023-06-01");
      if (upstream.provider === "c") expect(upstream.headers["x-goog-api-client"]).toMatch(/^sluice\//);
    },
  );
});

describe("conditional requests through the proxies", () => {
  let stage: ProxyStage;
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    stage = await startProxyStage();
    ({ fake, sluice, project } = stage);
  });
  afterAll(() => stage.close());
  beforeEach(() => fake.clear());

  const conditional = {
    "if-none-match": '"file-v1"',
    "if-modified-since": "Tue, 01 Jul 2025 10:00:00 GMT",
  };

  it("forwards a revalidation and passes the provider's 304 back without a body, on a free row", async () => {
    fake.enqueueResponse({
      status: 304,
      headers: { etag: '"file-v1"', "cache-control": "private, max-age=0" },
      body: "",
    });
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/files/file-abc`, {
      headers: { authorization: `Bearer ${project.bearer("provider-a")}`, ...conditional },
    });
    const upstream = fake.last()!;
    expect(upstream.headers["if-none-match"]).toBe('"file-v1"');
    expect(upstream.headers["if-modified-since"]).toBe(conditional["if-modified-since"]);
    expect(response.status).toBe(304);
    expect(response.headers.get("etag")).toBe('"file-v1"');
    expect(response.headers.get("cache-control")).toBe("private, max-age=0");
    expect(response.headers.get("x-request-id")).toMatch(/^req_/);
    expect(Buffer.from(await response.arrayBuffer()).length).toBe(0);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      provider: "provider-a",
      status: 304,
      outcome: "ok",
      streamed: 0,
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
  });

  it("records a 304 to a POST (a compatible server's) as a call without tokens that cost nothing", async () => {
    // Its representation's coding named, as a 304 may: there is no body to decode, for the meter or the key mask.
    fake.enqueueResponse({ status: 304, headers: { etag: '"m1"', "content-encoding": "gzip" }, body: "" });
    const response = await fetch(`${sluice.url}/v1/provider-b/${project.projectId}/v1/messages`, {
      method: "POST",
      headers: {
        "x-api-key": project.bearer("provider-b"),
        "content-type": "application/json",
        "if-none-match": '"m1"',
      },
      body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 16, messages: [] }),
    });
    expect(fake.last()!.headers["if-none-match"]).toBe('"m1"');
    expect(response.status).toBe(304);
    expect(Buffer.from(await response.arrayBuffer()).length).toBe(0);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
      provider: "provider-b",
      model: "claude-sonnet-4-5",
      status: 304,
      outcome: "ok",
      input_tokens: null,
      output_tokens: null,
      cost_usd: 0,
    });
  });

  it("passes a failed precondition (412) back as the provider's error, on an error row", async () => {
    fake.enqueueResponse({ status: 412 });
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/files/file-abc`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${project.bearer("provider-a")}`, "if-match": '"file-v0"' },
    });
    expect(fake.last()!.headers["if-match"]).toBe('"file-v0"');
    expect(response.status).toBe(412);
    await response.arrayBuffer();
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 412, outcome: "error" });
  });
});

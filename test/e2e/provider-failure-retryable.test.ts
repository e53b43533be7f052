import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, type ProgrammedResponse, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import { startLocalTcpServer } from "../support/local-server.js";
import { refusedPort } from "../support/refused-port.js";
import {
  createProjectOnEachProvider,
  logLinesOf,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const cap = 64 * 1024;

/** Provider A's chat completion holding `content`, finished with `finish`. */
const chat = (content: string, finish = "stop") => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: finish }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});

/** Provider C's Imagen answer with one image of this base64. */
const imagen = (base64: string) => ({ predictions: [{ bytesBase64Encoded: base64, mimeType: "image/png" }] });

/** The structured and image routes on each provider that serves them. */
const routesOnProviders = [
  ["text", "provider-a"],
  ["text", "provider-b"],
  ["text", "provider-c"],
  ["image", "provider-a"],
  ["image", "provider-c"],
] as const;

/** A call of `/v1/text` or `/v1/image` for `project` on `provider`. */
function postRoute(sluice: TestGateway, project: TestProject, route: "text" | "image", provider: ProviderId) {
  return fetch(`${sluice.url}/v1/${route}/${project.projectId}`, {
    method: "POST",
    headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
    body: JSON.stringify(route === "text" ? { text: "x" } : { prompt: "a lighthouse" }),
  });
}

interface Case {
  route: "text" | "image" | "proxy";
  provider: ProviderId;
  answers: ProgrammedResponse[];
  status: number;
  message: string | RegExp;
  retryable: boolean;
}

/**
 * Every 502 PROVIDER_ERROR (and 504 PROVIDER_TIMEOUT) says in `details.retryable` whether the same
 * call may succeed later (docs/api.md): true for a failure that may pass (a body cut short, an
 * answer the model may give otherwise, a provider not reached), false for one the same call gets
 * again (an answer over the gateway's cap, data in a form no image is, an answer the SDK cannot use).
 */
const cases: Record<string, Case> = {
  "a structured answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES": {
    route: "text",
    provider: "provider-a",
    answers: [{ status: 200, body: chat(`{"title":"${"x".repeat(cap)}"}`) }],
    status: 502,
    message: /larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES/,
    retryable: false,
  },
  "a structured answer that does not match the schema after the repair": {
    route: "text",
    provider: "provider-a",
    answers: [
      { status: 200, body: chat('{"other":1}') },
      { status: 200, body: chat('{"other":2}') },
    ],
    status: 502,
    message: "The model's output did not match the project's output schema, also after one repair attempt",
    retryable: true,
  },
  "a structured answer cut off at the token limit after the repair": {
    route: "text",
    provider: "provider-a",
    answers: [
      { status: 200, body: chat('{"title":"A calm la', "length") },
      { status: 200, body: chat('{"title":"A calm la', "length") },
    ],
    status: 502,
    message: "The model's output was cut off at its output token limit, also after one repair attempt",
    retryable: false,
  },
  "a structured answer the AI SDK cannot use (no choice at all)": {
    route: "text",
    provider: "provider-a",
    answers: [{ status: 200, body: { ...chat(""), choices: [] } }],
    status: 502,
    message: "The provider failed to process the request",
    retryable: false,
  },
  "an image answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES": {
    route: "image",
    provider: "provider-c",
    answers: [{ status: 200, body: imagen(Buffer.alloc(cap).toString("base64")) }],
    status: 502,
    message: /larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES/,
    retryable: false,
  },
  "an image whose base64 breaks off": {
    route: "image",
    provider: "provider-c",
    answers: [{ status: 200, body: imagen(`${tinyPng.toString("base64")}A`) }],
    status: 502,
    message: "The provider (provider-c) answered with an image that is not valid base64",
    retryable: true,
  },
  "an image whose data is no image": {
    route: "image",
    provider: "provider-c",
    answers: [{ status: 200, body: imagen(Buffer.from("hello world").toString("base64")) }],
    status: 502,
    message: "The provider (provider-c) answered with data that is not an image (11 bytes)",
    retryable: false,
  },
  "an image answer with no image and no word why": {
    route: "image",
    provider: "provider-a",
    answers: [{ status: 200, body: { created: 1, data: [] } }],
    status: 502,
    message: "The provider failed to generate images",
    retryable: true,
  },
  "a provider's 500 (as before)": {
    route: "text",
    provider: "provider-a",
    answers: [{ status: 500 }],
    status: 502,
    message: "The provider failed to process the request (status 500)",
    retryable: true,
  },
  "a proxied call to a provider that cannot be reached": {
    route: "proxy",
    provider: "provider-b",
    answers: [],
    status: 502,
    message: "The provider could not be reached",
    retryable: true,
  },
};

describe("details.retryable on every provider failure", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let projects: Record<ProviderId, TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      // Nothing listens there: the proxy's 502 for a provider not reached.
      providerBBaseUrl: `http://127.0.0.1:${refusedPort}/v1`,
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      maxProviderResponseBytes: cap,
    });
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });
  beforeEach(() => fake.clear());

  function call(route: Case["route"], provider: ProviderId) {
    const project = projects[provider];
    if (route !== "proxy") return postRoute(sluice, project, route, provider);
    return fetch(`${sluice.url}/v1/${provider}/${project.projectId}/messages`, {
      method: "POST",
      headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 8, messages: [] }),
    });
  }

  it.each(Object.entries(cases))("%s", async (_, each) => {
    for (const answer of each.answers) fake.enqueueResponse(answer);
    const response = await call(each.route, each.provider);
    const { error } = (await response.json()) as {
      error: { code: string; message: string; details?: { retryable?: unknown } };
    };
    expect(response.status).toBe(each.status);
    expect(error.message).toMatch(each.message);
    expect(typeof error.details?.retryable).toBe("boolean");
    expect(error.details?.retryable).toBe(each.retryable);
  });
});

/**
 * A base URL naming a server that speaks another protocol (an SSH port, say): no try ever gets an
 * HTTP answer, so the structured and image endpoints say so, not retryable, as the proxy does
 * (docs/proxy.md), and no longer "could not be reached", retryable, as for a provider down.
 */
describe("a provider whose server does not speak HTTP", () => {
  let upstream: { port: number; close(): Promise<void> };
  let sluice: TestGateway;
  let projects: Record<ProviderId, TestProject>;

  beforeAll(async () => {
    upstream = await startLocalTcpServer((socket) =>
      socket.once("data", () => socket.end("SSH-2.0-OpenSSH_9.2\r\n")),
    );
    const url = `http://127.0.0.1:${upstream.port}`;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/v1`,
      providerBBaseUrl: `${url}/v1`,
      providerCBaseUrl: `${url}/v1beta`,
    });
    projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
  });
  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  it.each(routesOnProviders)("/v1/%s on %s: 502, not retryable, no Retry-After", async (route, provider) => {
    const response = await postRoute(sluice, projects[provider], route, provider);
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBeNull();
    expect(((await response.json()) as { error: unknown }).error).toMatchObject({
      code: "PROVIDER_ERROR",
      message: "The provider's answer could not be read as HTTP",
      details: { providerStatus: null, retryable: false },
    });
  });
});

/**
 * An interim answer Sluice did not ask for (it sends no `Expect` and no `Upgrade`): undici, under the
 * AI SDK's fetch as under the proxies, closes the connection on it. The structured and image
 * endpoints name it as the proxies do (docs/proxy.md), message and log code alike, and not as a
 * provider not reached (retryable) or an answer that is not HTTP at all.
 */
describe("a provider that answers an interim 100 or 101 unasked", () => {
  const unasked = [
    [
      "100 Continue",
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
      "The provider's answer could not be read as HTTP: it sent an interim 100 Continue, which Sluice did not ask for (it sends no Expect) and does not take",
      "SLUICE_UNASKED_CONTINUE",
    ],
    [
      "101 Switching Protocols",
      "HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: h2c\r\n\r\n",
      "The provider's answer could not be read as HTTP: it switched protocols (101), which Sluice did not ask for (it sends no Upgrade)",
      "SLUICE_UNASKED_UPGRADE",
    ],
  ] as const;
  const routes = ["text", "image"] as const;
  const upstreams: Array<{ port: number; close(): Promise<void> }> = [];
  // A gateway per answer and route: each logs its first failure per provider and code (the others
  // in the window are counted, provider-failure-log.ts).
  const gateways = new Map<string, { sluice: TestGateway; projects: Record<ProviderId, TestProject> }>();

  beforeAll(async () => {
    for (const [index, [, answer]] of unasked.entries()) {
      const upstream = await startLocalTcpServer((socket) => socket.once("data", () => socket.write(answer)));
      upstreams.push(upstream);
      const url = `http://127.0.0.1:${upstream.port}`;
      for (const route of routes) {
        const sluice = await startTestGateway({
          providerABaseUrl: `${url}/v1`,
          providerBBaseUrl: `${url}/v1`,
          providerCBaseUrl: `${url}/v1beta`,
        });
        const projects = await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema });
        gateways.set(`${index} ${route}`, { sluice, projects });
      }
    }
  });
  afterAll(async () => {
    for (const { sluice } of gateways.values()) await sluice.close();
    for (const upstream of upstreams) await upstream.close();
  });

  it.each(
    unasked.flatMap(([name, , message, code], index) =>
      routesOnProviders.map(([route, provider]) => [name, route, provider, index, message, code] as const),
    ),
  )("%s: /v1/%s on %s names it, not retryable", async (_name, route, provider, index, message, code) => {
    const { sluice, projects } = gateways.get(`${index} ${route}`)!;
    const before = sluice.logs.length;
    const response = await postRoute(sluice, projects[provider], route, provider);
    expect(response.status).toBe(502);
    expect(response.headers.get("retry-after")).toBeNull();
    expect(((await response.json()) as { error: unknown }).error).toMatchObject({
      code: "PROVIDER_ERROR",
      message,
      details: { providerStatus: null, retryable: false },
    });
    expect(logLinesOf(sluice, before).find((line) => line.msg === "provider call failed")).toMatchObject({
      provider,
      code,
      status: 502,
    });
  });
});

import OpenAI from "openai";
import { request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createCorsPolicy } from "../../src/http/cors.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const app = "https://app.example.com";

describe("cross-origin calls from browser apps (SLUICE_CORS_ORIGINS)", () => {
  let upstream: FakeUpstream;
  let sluice: TestGateway;
  let plain: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startFakeUpstream();
    const providers = {
      providerABaseUrl: `${upstream.url}/a/v1`,
      providerBBaseUrl: `${upstream.url}/b`,
      providerCBaseUrl: `${upstream.url}/c`,
    };
    sluice = await startTestGateway({ ...providers, corsOrigins: [app, "http://localhost:5173"] });
    plain = await startTestGateway(providers);
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await plain.close();
    await upstream.close();
  });

  const preflight = (base: string, path: string, origin: string, requestHeaders?: string) =>
    request(`${base}${path}`, {
      method: "OPTIONS",
      headers: {
        origin,
        "access-control-request-method": "POST",
        ...(requestHeaders ? { "access-control-request-headers": requestHeaders } : {}),
      },
    });

  async function usageRows(): Promise<number> {
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .select(({ fn }) => fn.countAll<number>().as("count"))
      .executeTakeFirstOrThrow();
    return Number(rows.count);
  }

  it("answers a preflight itself: no authentication, no provider call, no usage row", async () => {
    upstream.clear();
    const before = await usageRows();
    const response = await preflight(
      sluice.url,
      `/v1/provider-b/${project.projectId}/v1/messages`,
      app,
      "authorization, content-type, anthropic-version, x-stainless-os",
    );
    expect(response.statusCode).toBe(204);
    await response.body.dump();
    expect(response.headers["access-control-allow-origin"]).toBe(app);
    expect(response.headers["access-control-allow-methods"]).toBe("POST");
    expect(response.headers["access-control-allow-headers"]).toBe(
      "authorization, content-type, anthropic-version, x-stainless-os",
    );
    expect(response.headers["access-control-max-age"]).toBe("600");
    expect(response.headers["access-control-allow-credentials"]).toBeUndefined();
    expect(String(response.headers.vary)).toContain("Origin");
    expect(upstream.requests).toHaveLength(0);
    expect(await usageRows()).toBe(before);
  });

  it("lists every method a path takes: provider A's proxy takes any, the structured routes POST", async () => {
    const a = await preflight(sluice.url, `/v1/provider-a/${project.projectId}/chat/completions`, app);
    await a.body.dump();
    expect(String(a.headers["access-control-allow-methods"]).split(", ")).toEqual(
      expect.arrayContaining(["GET", "POST", "DELETE", "OPTIONS"]),
    );
    const text = await preflight(sluice.url, "/v1/text", app);
    await text.body.dump();
    expect(text.headers["access-control-allow-methods"]).toBe("POST");
  });

  it("refuses a preflight from an origin not listed (403), and one for no route (404)", async () => {
    const other = await preflight(sluice.url, "/v1/text", "https://evil.example.net");
    expect(other.statusCode).toBe(403);
    expect(other.headers["access-control-allow-origin"]).toBeUndefined();
    const body = (await other.body.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("FORBIDDEN");
    expect(body.error.message).toContain("https://evil.example.net");
    const nowhere = await preflight(sluice.url, "/v1/nothing-here", app);
    expect(nowhere.statusCode).toBe(404);
    await nowhere.body.dump();
  });

  it("marks a refused preflight's answer as every other: Vary: Origin, and the origin's headers when listed", async () => {
    const other = await preflight(sluice.url, "/v1/text", "https://evil.example.net");
    await other.body.dump();
    expect(other.statusCode).toBe(403);
    expect(other.headers.vary).toBe("Origin");
    expect(other.headers["access-control-allow-origin"]).toBeUndefined();
    const nowhere = await preflight(sluice.url, "/v1/nothing-here", app);
    await nowhere.body.dump();
    expect(nowhere.statusCode).toBe(404);
    expect(nowhere.headers.vary).toBe("Origin");
    expect(nowhere.headers["access-control-allow-origin"]).toBe(app);
    expect(nowhere.headers["access-control-expose-headers"]).toBe("*");
  });

  it("never echoes requested header names that are not a plain list", async () => {
    const policy = createCorsPolicy([app]);
    const headers = policy.preflightHeaders(app, ["POST"], {
      "access-control-request-headers": "authorization, x-a\u0000b",
    });
    expect(headers["access-control-allow-headers"]).toBeUndefined();
  });

  it("marks a proxied answer with the gateway's CORS headers, not the provider's", async () => {
    upstream.enqueueResponse({
      status: 200,
      headers: {
        "access-control-allow-origin": "*",
        "access-control-allow-credentials": "true",
        vary: "Accept-Encoding",
      },
      body: {
        id: "chatcmpl-cors",
        object: "chat.completion",
        created: 1,
        model: "gpt-4o-mini",
        choices: [{ index: 0, message: { role: "assistant", content: "hi" }, finish_reason: "stop" }],
        usage: { prompt_tokens: 3, completion_tokens: 1, total_tokens: 4 },
      },
    });
    const response = await request(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        origin: app,
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(response.statusCode).toBe(200);
    await response.body.dump();
    expect(response.headers["access-control-allow-origin"]).toBe(app);
    expect(response.headers["access-control-allow-credentials"]).toBeUndefined();
    expect(response.headers["access-control-expose-headers"]).toBe("*");
    expect(response.headers.vary).toEqual(["Accept-Encoding", "Origin"]);
    expect(response.headers["x-request-id"]).toMatch(/^req_/);
  });

  it("marks error answers too, so a browser app can read them", async () => {
    const proxied = await request(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: { origin: app, authorization: "Bearer nope.nope", "content-type": "application/json" },
      body: "{}",
    });
    expect(proxied.statusCode).toBe(401);
    await proxied.body.dump();
    expect(proxied.headers["access-control-allow-origin"]).toBe(app);
    const structured = await request(`${sluice.url}/v1/text/${project.projectId}`, {
      method: "POST",
      headers: { origin: "http://localhost:5173", "content-type": "application/json" },
      body: JSON.stringify({ text: "x" }),
    });
    expect(structured.statusCode).toBe(401);
    await structured.body.dump();
    expect(structured.headers["access-control-allow-origin"]).toBe("http://localhost:5173");
  });

  it("works through the official SDK as a browser app would call it", async () => {
    const client = new OpenAI({
      apiKey: project.bearer("provider-a"),
      baseURL: `${sluice.url}/v1/provider-a/${project.projectId}`,
      defaultHeaders: { origin: app },
    });
    const { data, response } = await client.chat.completions
      .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] })
      .withResponse();
    expect(data.choices[0]?.message.content).toBeTypeOf("string");
    expect(response.headers.get("access-control-allow-origin")).toBe(app);
  });

  it("sends nothing to an origin not listed, to the admin API, or when the setting is unset", async () => {
    const other = await request(`${sluice.url}/health`, { headers: { origin: "https://evil.example.net" } });
    await other.body.dump();
    expect(other.statusCode).toBe(200);
    expect(other.headers["access-control-allow-origin"]).toBeUndefined();

    const adminPreflight = await preflight(sluice.url, "/admin/v1/projects", app);
    await adminPreflight.body.dump();
    expect(adminPreflight.statusCode).toBe(405);
    expect(adminPreflight.headers["access-control-allow-origin"]).toBeUndefined();
    const adminCall = await request(`${sluice.url}/admin/v1/projects`, {
      headers: { origin: app, authorization: `Bearer ${adminToken}` },
    });
    await adminCall.body.dump();
    expect(adminCall.statusCode).toBe(200);
    expect(adminCall.headers["access-control-allow-origin"]).toBeUndefined();

    const unset = await request(`${plain.url}/health`, { headers: { origin: app } });
    await unset.body.dump();
    expect(unset.headers["access-control-allow-origin"]).toBeUndefined();
    const unsetPreflight = await preflight(plain.url, "/v1/text", app);
    await unsetPreflight.body.dump();
    expect(unsetPreflight.statusCode).toBe(405);
  });

  it("varies on Origin with a list of origins, also for a request without one or from another", async () => {
    for (const headers of [{}, { origin: "https://elsewhere.test" }, { origin: app }]) {
      const response = await request(`${sluice.url}/health`, { headers });
      await response.body.dump();
      expect(String(response.headers.vary), JSON.stringify(headers)).toContain("Origin");
      expect(response.headers["access-control-allow-origin"]).toBe(headers.origin === app ? app : undefined);
    }
    // The router answers `/health/` as `/health`: so does CORS.
    const slash = await request(`${sluice.url}/health/`, { headers: { origin: app } });
    await slash.body.dump();
    expect(slash.statusCode).toBe(200);
    expect(slash.headers["access-control-allow-origin"]).toBe(app);
  });

  it("allows any origin with `*`, without Vary", async () => {
    const any = await startTestGateway({ corsOrigins: ["*"] });
    try {
      const response = await request(`${any.url}/health`, { headers: { origin: "https://anything.test" } });
      await response.body.dump();
      expect(response.headers["access-control-allow-origin"]).toBe("*");
      expect(response.headers.vary).toBeUndefined();
    } finally {
      await any.close();
    }
  });

  it("with `*`, answers a request without an Origin the same, so a shared cache can hand it to a browser", async () => {
    const any = await startTestGateway({ corsOrigins: ["*"] });
    try {
      // The model list is `public, max-age=300`: a CDN that stored the answer to a request without
      // an Origin (curl, a server) serves it to browsers too, which refuse it without these headers.
      for (const path of ["/v1/provider-a/models", "/health", "/v1/text"]) {
        const response = await request(`${any.url}${path}`, { method: path === "/v1/text" ? "POST" : "GET" });
        await response.body.dump();
        expect(response.headers["access-control-allow-origin"], path).toBe("*");
        expect(response.headers["access-control-expose-headers"], path).toBe("*");
        expect(response.headers.vary, path).toBeUndefined();
      }
      const admin = await request(`${any.url}/admin/v1/projects`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      await admin.body.dump();
      expect(admin.headers["access-control-allow-origin"]).toBeUndefined();
    } finally {
      await any.close();
    }
  });
});

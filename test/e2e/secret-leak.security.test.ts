import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/observability/logger.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable, redisAvailable, redisUrl } from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import {
  adminToken,
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * Drives every authentication path, successful and failing, and checks that no log line, error
 * body, response or usage row contains a provider key, a key share, a test key or a .p8 key.
 */
describe("no secret leaks", () => {
  let upstream: Server;
  let upstreamUrl: string;
  const seenByUpstream: IncomingHttpHeaders[] = [];
  let apple: FakeApple;
  let sluice: TestGateway;
  let project: TestProject;
  const apple_keys = generateAppleKeyPair();
  const deviceToken = Buffer.from("device-token-for-leak-test").toString("base64");
  const bodies: string[] = [];

  beforeAll(async () => {
    upstream = createServer((request, response) => {
      seenByUpstream.push(request.headers);
      request.resume();
      request.on("end", () => {
        const fail = request.url?.includes("fail");
        response.writeHead(fail ? 401 : 200, { "content-type": "application/json" });
        response.end(
          JSON.stringify(
            fail
              ? { error: { message: "Incorrect API key provided", type: "invalid_request_error" } }
              : {
                  id: "chatcmpl-1",
                  object: "chat.completion",
                  model: "gpt-4o-mini",
                  choices: [],
                  usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
                },
          ),
        );
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve));
    upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    apple = await startFakeApple({ label: "production", validTokens: [deviceToken] });
    apple.registerKey("KEY1234567", { teamId: "TEAM123456", publicKeyPem: apple_keys.publicKeyPem });
    sluice = await startTestGateway(
      {
        providerABaseUrl: `${upstreamUrl}/v1`,
        deviceCheckProductionUrl: apple.url,
        logLevel: "trace",
      },
      {
        // A route failing as an upstream call can: with an error (undici's, the AI SDK's) that
        // carries the upstream request's headers in mixed case, the rebuilt provider keys in them.
        registerApiRoutes(router) {
          router.on("POST", "/v1/leak-probe/:projectId", ({ request }) => {
            const cause = Object.assign(new Error("other side closed"), {
              code: "UND_ERR_SOCKET",
              headers: { "X-Goog-Api-Key": project.providerKeys["provider-c"] },
            });
            throw Object.assign(new Error("upstream call failed", { cause }), {
              request: {
                headers: {
                  Authorization: `Bearer ${project.providerKeys["provider-a"]}`,
                  "X-Api-Key": project.providerKeys["provider-b"],
                  "X-Sluice-Test-Key": request.headers["x-sluice-test-key"],
                },
              },
              details: { error: cause, rawHeaders: ["Authorization", request.headers.authorization] },
            });
          });
        },
      },
    );
    project = await createTestProject(sluice.gateway, {
      deviceCheck: {
        enabled: true,
        teamId: "TEAM123456",
        keyId: "KEY1234567",
        privateKey: apple_keys.privateKeyPem,
        environment: "production",
      },
    });
  });

  afterAll(async () => {
    await sluice.close();
    await apple.close();
    upstream.closeAllConnections();
    await new Promise((resolve) => upstream.close(resolve));
  });

  async function send(path: string, headers: Record<string, string>) {
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    bodies.push(`${response.status} ${JSON.stringify([...response.headers])} ${await response.text()}`);
    return response.status;
  }

  it("authenticates every method and refuses every wrong credential", async () => {
    const partial = project.partialKeys["provider-a"];
    const wrongShare = `${partial.slice(0, -6)}AAAAAA`;
    expect(
      await send("chat/completions", { "x-sluice-test-key": project.testKey, "x-ai-key": partial }),
    ).toBe(200);
    expect(await send("chat/completions", { authorization: `Bearer ${partial}.${project.testKey}` })).toBe(
      200,
    );
    expect(await send("chat/completions", { authorization: `Bearer ${partial}.${deviceToken}` })).toBe(200);
    expect(await send("chat/completions", { "x-device-token": deviceToken, "x-ai-key": partial })).toBe(200);
    expect(
      await send("chat/completions/fail", { authorization: `Bearer ${partial}.${project.testKey}` }),
    ).toBe(401);
    expect(await send("chat/completions", { authorization: `Bearer ${wrongShare}.${project.testKey}` })).toBe(
      401,
    );
    expect(await send("chat/completions", { authorization: `Bearer ${partial}.${project.testKey}x` })).toBe(
      401,
    );
    expect(
      await send("chat/completions", { "x-sluice-test-key": `${project.testKey}x`, "x-ai-key": partial }),
    ).toBe(401);
    expect(
      await send("chat/completions", {
        authorization: `Bearer ${project.partialKeys["provider-b"]}.${project.testKey}`,
      }),
    ).toBe(403);
    expect(await send("chat/completions", { authorization: `Bearer ${partial}` })).toBe(401);
    expect(
      await send("chat/completions", {
        authorization: `Basic ${Buffer.from(`${partial}:${project.testKey}`).toString("base64")}`,
      }),
    ).toBe(401);
    expect(seenByUpstream.map((headers) => headers.authorization)).toContain(
      `Bearer ${project.providerKeys["provider-a"]}`,
    );
  });

  it("logs an upstream error carrying mixed-case request headers without their secrets", async () => {
    const before = sluice.logs.length;
    const response = await fetch(`${sluice.url}/v1/leak-probe/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.partialKeys["provider-a"]}.${project.testKey}`,
        "x-sluice-test-key": project.testKey,
      },
    });
    bodies.push(`${response.status} ${await response.text()}`);
    expect(response.status).toBe(500);
    const logged = sluice.logs.slice(before).join("");
    expect(logged).toContain('"msg":"request failed"');
    expect(logged).toContain('"X-Api-Key":"[redacted]"');
    for (const secret of [
      project.testKey,
      project.partialKeys["provider-a"],
      project.providerKeys["provider-a"],
      project.providerKeys["provider-b"],
      project.providerKeys["provider-c"],
    ]) {
      expect(logged).not.toContain(secret);
    }
  });

  it("logs redacted credentials when a caller logs a request's headers", () => {
    const lines: string[] = [];
    const logger = createLogger("info", {
      write: (line: string) => {
        lines.push(line);
      },
    });
    logger.info(
      {
        headers: {
          authorization: `Bearer ${project.partialKeys["provider-a"]}.${project.testKey}`,
          "x-ai-key": "share",
          "x-sluice-test-key": project.testKey,
        },
        request: {
          headers: { "x-goog-api-key": project.providerKeys["provider-c"], "x-device-token": deviceToken },
        },
        apiKey: project.providerKeys["provider-a"],
        privateKey: apple_keys.privateKeyPem,
      },
      "a request",
    );
    // Header objects built by hand or received from upstream keep their letter case; errors carry them.
    logger.warn(
      {
        headers: {
          Authorization: `Bearer ${project.partialKeys["provider-a"]}.${project.testKey}`,
          "X-AI-Key": project.partialKeys["provider-b"],
          "X-Sluice-Test-Key": project.testKey,
          "X-Device-Token": deviceToken,
        },
        upstream: {
          headers: {
            "X-Api-Key": project.providerKeys["provider-b"],
            "X-Goog-Api-Key": project.providerKeys["provider-c"],
          },
        },
        err: Object.assign(new Error("request to Apple failed"), {
          headers: { Authorization: `Bearer ${apple_keys.privateKeyPem}` },
          cause: new Error("socket hang up"),
        }),
        attempts: [
          Object.assign(new Error("retry 1"), {
            requestHeaders: { AUTHORIZATION: `Bearer ${project.providerKeys["provider-a"]}` },
          }),
        ],
        PrivateKey: apple_keys.privateKeyPem,
      },
      "mixed case",
    );
    const text = lines.join("");
    expect(text).toContain("[redacted]");
    for (const secret of [
      project.testKey,
      project.partialKeys["provider-a"],
      project.partialKeys["provider-b"],
      project.providerKeys["provider-a"],
      project.providerKeys["provider-b"],
      project.providerKeys["provider-c"],
      deviceToken,
      "BEGIN PRIVATE KEY",
    ]) {
      expect(text).not.toContain(secret);
    }
  });

  it("logs a provider that cannot be reached without a key, a header value or a URL query", async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const down = `http://127.0.0.1:${port}`;
    const unreachable = await startTestGateway({
      providerABaseUrl: `${down}/v1`,
      providerBBaseUrl: `${down}/v1`,
      providerCBaseUrl: `${down}/v1beta`,
      // Every line the gateway can write, the access log's included.
      logLevel: "trace",
      metricsEnabled: true,
    });
    try {
      const downProject = await createTestProject(unreachable.gateway, {
        outputSchema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] },
      });
      const calls: Array<[string, Record<string, string>]> = [
        [
          "provider-a/{id}/chat/completions?trace=q-secret",
          { authorization: `Bearer ${downProject.bearer("provider-a")}` },
        ],
        ["provider-b/{id}/v1/messages", { "x-api-key": downProject.bearer("provider-b") }],
        [
          "provider-c/{id}/v1beta/models/gemini-2.0-flash:generateContent?key=q-secret",
          { "x-goog-api-key": downProject.bearer("provider-c") },
        ],
        // The routes that call the provider through the AI SDK fail through its errors.
        ["text/{id}", { authorization: `Bearer ${downProject.bearer("provider-a")}` }],
        ["image/{id}?trace=q-secret", { authorization: `Bearer ${downProject.bearer("provider-a")}` }],
      ];
      for (const [path, headers] of calls) {
        const response = await fetch(`${unreachable.url}/v1/${path.replace("{id}", downProject.projectId)}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: path.startsWith("text/")
            ? JSON.stringify({ text: "hi" })
            : path.startsWith("image/")
              ? JSON.stringify({ prompt: "a cat", model: "gpt-image-1" })
              : "{}",
        });
        expect(response.status, path).toBe(502);
        await response.arrayBuffer();
      }
      const metrics = await (await fetch(`${unreachable.url}/metrics`)).text();
      const logged = unreachable.logs.join("") + metrics;
      // Provider A's line per window (its proxy first), B's and C's.
      expect(logged.split('"msg":"provider call failed"')).toHaveLength(4);
      expect(logged).toContain('"msg":"request"');
      for (const secret of [
        downProject.testKey,
        "q-secret",
        ...Object.values(downProject.partialKeys),
        ...Object.values(downProject.providerKeys),
      ]) {
        expect(logged).not.toContain(secret);
      }
    } finally {
      await unreachable.close();
    }
  });

  it("logs each admin write that carries or issues a secret as one `admin change` line, without it", async () => {
    const before = sluice.logs.length;
    const otherKey = generateAppleKeyPair().privateKeyPem;
    const apiKeys = [`sk-proj-${randomBytes(24).toString("hex")}`, `AIza${randomBytes(18).toString("hex")}`];
    const wrongToken = `${adminToken}-${randomBytes(8).toString("hex")}`;
    const admin = async (method: string, path: string, body?: unknown, token = adminToken) => {
      const response = await fetch(`${sluice.url}/admin/v1${path}`, {
        method,
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      return {
        status: response.status,
        json: (await response.json().catch(() => ({}))) as Record<string, string>,
      };
    };
    const deviceCheck = {
      enabled: true,
      teamId: "TEAM123456",
      keyId: "KEY1234567",
      privateKey: apple_keys.privateKeyPem,
    };
    const created = await admin("POST", "/projects", { name: "Leak", provider: "provider-a", deviceCheck });
    expect(created.status).toBe(201);
    const id = (created.json.project as unknown as { id: string }).id;
    const issued: string[] = [created.json.testKey as string];
    for (const [provider, apiKey] of [
      ["provider-a", apiKeys[0]],
      ["provider-c", apiKeys[1]],
    ]) {
      const added = await admin("POST", `/projects/${id}/keys`, { provider, apiKey });
      expect(added.status).toBe(201);
      issued.push(
        added.json.partialKey as string,
        (added.json.partialKey as string).split("_").slice(3).join("_"),
      );
      expect((await admin("DELETE", `/projects/${id}/keys/${added.json.keyId}`)).status).toBe(204);
    }
    const patched = await admin("PATCH", `/projects/${id}`, { deviceCheck: { privateKey: otherKey } });
    expect(patched.status).toBe(200);
    const rotated = await admin("POST", `/projects/${id}/test-keys`);
    expect(rotated.status).toBe(201);
    issued.push(rotated.json.testKey as string);
    expect((await admin("DELETE", `/projects/${id}/test-keys/${rotated.json.testKeyId}`)).status).toBe(204);
    // Refused writes holding the same secrets: no `admin change`, and nothing of their bodies.
    const refused: Array<[number, string, string, unknown, string?]> = [
      [400, "POST", `/projects/${id}/keys`, { provider: "provider-q", apiKey: apiKeys[0] }],
      [
        400,
        "POST",
        `/projects/${id}/keys`,
        { provider: "provider-a", apiKey: apiKeys[0], [apiKeys[1] ?? ""]: 1 },
      ],
      [401, "POST", `/projects/${id}/keys`, { provider: "provider-a", apiKey: apiKeys[0] }, wrongToken],
      [404, "POST", `/projects/${apiKeys[1]}/keys`, { provider: "provider-a", apiKey: apiKeys[0] }],
      [
        422,
        "PATCH",
        `/projects/${id}`,
        { deviceCheck: { privateKey: otherKey.replace("KEY-----\n", "KEY-----\nAAAA") } },
      ],
      [400, "PATCH", `/projects/${id}`, { deviceCheck: { privateKey: otherKey, [apiKeys[0] ?? ""]: 1 } }],
      [400, "POST", "/projects", { name: "Leak 2", provider: "provider-a", deviceCheck, bogus: apiKeys[0] }],
    ];
    for (const [status, method, path, body, token] of refused)
      expect((await admin(method, path, body, token)).status, `${method} ${path}`).toBe(status);
    expect((await admin("DELETE", `/projects/${id}`)).status).toBe(204);

    const logged = sluice.logs.slice(before).join("");
    // create, 2 × (key add, key revoke), update, rotate, test key revoke, delete.
    expect(logged.split('"msg":"admin change"')).toHaveLength(10);
    const secrets = [
      ...apiKeys,
      ...issued,
      adminToken,
      wrongToken,
      ...[apple_keys.privateKeyPem, otherKey].map((pem) => pem.split("\n")[1] ?? "missing"),
    ];
    for (const secret of secrets) expect(logged).not.toContain(secret);
  });

  it("leaves no secret in logs, responses or usage rows", async () => {
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db.selectFrom("usage_records").selectAll().execute();
    expect(rows.length).toBeGreaterThanOrEqual(11);
    const haystacks = {
      logs: sluice.logs.join("\n"),
      responses: bodies.join("\n"),
      usage: JSON.stringify(rows),
    };
    expect(haystacks.logs.length).toBeGreaterThan(0);
    const secrets: Record<string, string> = {
      testKey: project.testKey,
      deviceToken,
      p8: apple_keys.privateKeyPem.split("\n")[1] ?? "missing",
    };
    for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
      secrets[`${provider} key`] = project.providerKeys[provider];
      secrets[`${provider} share`] = project.partialKeys[provider].slice(
        `sk_sluice_${project.keyIds[provider]}_`.length,
      );
    }
    for (const [where, text] of Object.entries(haystacks)) {
      for (const [name, secret] of Object.entries(secrets)) {
        expect(text.includes(secret), `${name} found in ${where}`).toBe(false);
      }
    }
  });
});

/**
 * The error paths of the gateway's other dependencies, at trace: Apple failing every way it can
 * (the JWT Sluice signs is a credential too), the admin token, and PostgreSQL and Redis going away
 * under URLs that carry passwords. No log line, /health or /metrics answer may hold any of them.
 */
describe.skipIf(!postgresAvailable || !redisAvailable)("no secret leaks when dependencies fail", () => {
  it("logs Apple's failures, a wrong admin token and database and Redis outages without a secret", async () => {
    const schema = await createPostgresSchema();
    const postgres = await startTcpProxy(5432);
    const redis = await startTcpProxy(Number(new URL(redisUrl).port || 6379));
    const fake = await startFakeUpstream();
    const apple = await startFakeApple({ label: "production" });
    const keys = generateAppleKeyPair();
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    const databasePassword = `pg-password-${randomBytes(6).toString("hex")}`;
    const redisPassword = `redis-password-${randomBytes(6).toString("hex")}`;
    // PostgreSQL here trusts local connections and Redis needs no password: both are sent anyway.
    const databaseUrl = schema.url.replace(
      /^postgres:\/\/postgres@127\.0\.0\.1:5432\//,
      `postgres://postgres:${databasePassword}@127.0.0.1:${postgres.port}/`,
    );
    expect(databaseUrl).toContain(databasePassword);
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      databaseUrl,
      databaseQueryTimeoutMs: 1000,
      redisUrl: `redis://:${redisPassword}@127.0.0.1:${redis.port}`,
      redisKeyPrefix: `sluice-test:leak:${randomBytes(6).toString("hex")}:`,
      deviceCheckProductionUrl: apple.url,
      deviceCheckTimeoutMs: 200,
      logLevel: "trace",
      metricsEnabled: true,
      trustProxy: ["127.0.0.1"],
    });
    const answers: string[] = [];
    const clientIp = `2001:db8:${randomBytes(2).toString("hex")}::1`;
    const get = async (path: string, headers: Record<string, string> = {}) => {
      const response = await fetch(`${sluice.url}${path}`, {
        headers: { "x-forwarded-for": clientIp, ...headers },
      });
      answers.push(`${response.status} ${JSON.stringify([...response.headers])} ${await response.text()}`);
      return response.status;
    };
    try {
      const project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "cached");
      const deviceTokens: string[] = [];
      const call = async (headers: (deviceToken: string) => Record<string, string>) => {
        const deviceToken = Buffer.from(`leak-${randomBytes(12).toString("hex")}`).toString("base64");
        deviceTokens.push(deviceToken);
        apple.registerValidToken(deviceToken);
        const response = await proxiedChat(
          sluice.url,
          { projectId: project.projectId, bearer: "unused" },
          { headers: { "x-forwarded-for": clientIp, ...headers(deviceToken) } },
        );
        answers.push(`${response.status} ${JSON.stringify([...response.headers])} ${await response.text()}`);
        return response.status;
      };
      const partial = project.partialKeys["provider-a"];
      const bearer = (deviceToken: string) => ({ authorization: `Bearer ${partial}.${deviceToken}` });
      const legacy = (deviceToken: string) => ({
        authorization: "",
        "x-device-token": deviceToken,
        "x-ai-key": partial,
      });
      expect(await call(bearer)).toBe(200);
      apple.fail({ kind: "status", status: 500, body: "Internal error" }, 1);
      expect(await call(bearer)).toBe(503);
      apple.fail({ kind: "status", status: 401, body: "Missing or badly formatted authorization token" }, 1);
      expect(await call(legacy)).toBe(503);
      apple.fail({ kind: "status", status: 403 }, 1);
      expect(await call(bearer)).toBe(503);
      apple.fail({ kind: "close" }, 1);
      expect(await call(legacy)).toBe(503);
      apple.fail({ kind: "hang" }, 1);
      expect(await call(bearer)).toBe(503);
      apple.fail(null);
      expect(apple.calls.some((each) => each.jwtHeader !== null)).toBe(true);

      expect(await get("/admin/v1/projects", { authorization: `Bearer ${adminToken}` })).toBe(200);
      expect(await get("/admin/v1/projects", { authorization: `Bearer ${adminToken}-wrong` })).toBe(401);
      expect(await get("/admin/v1/projects", { authorization: `bearer ${adminToken.slice(0, -2)}` })).toBe(
        401,
      );

      postgres.cut();
      redis.cut();
      expect(await get("/admin/v1/projects", { authorization: `Bearer ${adminToken}` })).toBe(503);
      // A call served from the caches while both are down: its usage row waits, its limits run locally.
      expect(await call(bearer)).toBe(200);
      await get("/health");
      await new Promise((resolve) => setTimeout(resolve, 300));
      await get("/health");
      await get("/metrics");
      expect(answers.join("\n")).toContain('"status":"down"');

      const logged = sluice.logs.join("");
      expect(logged).toContain("Apple DeviceCheck");
      expect(logged).toContain("usage batch not written");
      expect(logged).toContain("Redis");
      const secrets: Record<string, string> = {
        databasePassword,
        redisPassword,
        adminToken,
        // The start of every JWT ('{"' in base64url): the one Sluice signs for Apple.
        jwt: "eyJ",
        p8: keys.privateKeyPem.split("\n")[1] ?? "missing",
        "provider key": project.providerKeys["provider-a"],
        "key share": partial.slice(`sk_sluice_${project.keyIds["provider-a"]}_`.length),
        ...Object.fromEntries(deviceTokens.map((token, index) => [`device token ${index}`, token])),
      };
      for (const [where, text] of Object.entries({ logs: logged, answers: answers.join("\n") }))
        for (const [name, secret] of Object.entries(secrets))
          expect(text.includes(secret), `${name} found in ${where}`).toBe(false);
    } finally {
      postgres.restore();
      redis.restore();
      await sluice.close();
      await postgres.close();
      await redis.close();
      await apple.close();
      await fake.close();
      await schema.drop();
    }
  });
});

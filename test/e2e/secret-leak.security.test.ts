import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../../src/observability/logger.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import {
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
      logLevel: "warn",
    });
    try {
      const downProject = await createTestProject(unreachable.gateway);
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
      ];
      for (const [path, headers] of calls) {
        const response = await fetch(`${unreachable.url}/v1/${path.replace("{id}", downProject.projectId)}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...headers },
          body: "{}",
        });
        expect(response.status).toBe(502);
        await response.arrayBuffer();
      }
      const logged = unreachable.logs.join("");
      expect(logged.split('"msg":"provider call failed"')).toHaveLength(4);
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

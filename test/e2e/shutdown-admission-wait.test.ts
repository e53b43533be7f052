import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { shutDown } from "../../src/server.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { heldRedisReplies } from "../support/held-redis-replies.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { redisAvailable, redisUrl } from "../support/services.js";
import { expectDeadlineRefusal, rowsAfterShutdown } from "../support/shutdown-refusal.js";
import {
  adminToken,
  createDeviceCheckProject,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const shutdownTimeoutMs = 300;
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

/** Shuts `sluice` down and checks it said it refused one call and cut no connection. */
async function shutDownRefusingOne(sluice: TestGateway): Promise<void> {
  const from = sluice.logs.length;
  await shutDown(sluice.server, sluice.gateway);
  const lines = logLinesOf(sluice, from);

  expect(lines).toContainEqual(
    expect.objectContaining({ msg: "shutdown deadline reached: unanswered calls refused", refused: 1 }),
  );
  expect(lines.filter((line) => line.msg === "shutdown deadline reached: connections cut")).toEqual([]);
  expect(lines.filter((line) => line.level === "error")).toEqual([]);
}

/**
 * At the shutdown's deadline a call still being admitted (its credentials checked with Apple, its
 * rate limits or spend cap asked of Redis or the database) has no answer begun either: it is refused
 * as a call waiting for its provider is (503, the envelope, Retry-After, `Connection: close`), its
 * row says 503, and nothing reaches the provider when the wait ends after all. Before, nothing
 * listened for the refusal there, and the connection was cut without an answer.
 */
describe("calls still being admitted at the shutdown deadline", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  const keys = generateAppleKeyPair();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey("KEY1234567", { teamId: "TEAM123456", publicKeyPem: keys.publicKeyPem });
  });

  afterEach(() => {
    apple.delay(0);
    fake.clear();
  });

  afterAll(async () => {
    await apple.close();
    await fake.close();
  });

  const deviceTokenCall = async (path: string, bearer: string, body: unknown) => {
    const deviceToken = Buffer.from(`waiting-${randomBytes(12).toString("hex")}`).toString("base64");
    apple.registerValidToken(deviceToken);
    apple.delay(2000);
    const appleCalls = apple.calls.length;
    const pending = fetch(path, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}.${deviceToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    }).catch((error: Error) => error);
    await vi.waitFor(() => expect(apple.calls.length).toBe(appleCalls + 1), { timeout: 5000 });
    return { pending, appleCall: apple.calls[appleCalls] };
  };

  it.each([
    { route: "a proxied call", endpoint: "proxy" },
    { route: "a /v1/text call", endpoint: "text" },
  ])("answers $route waiting for Apple's answer about its device token 503", async ({ endpoint }) => {
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      shutdownTimeoutMs,
    });
    const project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "single-use", {
      outputSchema: schema,
    });
    const partialKey = project.partialKeys["provider-a"];
    const { pending, appleCall } = await (endpoint === "proxy"
      ? deviceTokenCall(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, partialKey, {
          model: "gpt-4o-mini",
          messages: [],
        })
      : deviceTokenCall(`${sluice.url}/v1/text/${project.projectId}`, partialKey, { text: "hello" }));
    const closing = shutDownRefusingOne(sluice);
    const answer = await pending;
    await closing;
    const requestId = await expectDeadlineRefusal(answer);
    expect(rowsAfterShutdown(sluice)).toEqual([
      { request_id: requestId, endpoint, status: 503, outcome: "error", error_code: "SERVICE_UNAVAILABLE" },
    ]);
    // The gateway's close aborted the call to Apple, which nobody waited for any more: it did not run
    // on until Apple answered (2 s), and nothing went to the provider.
    await vi.waitFor(() => expect(appleCall?.aborted || appleCall?.status !== null).toBe(true), {
      timeout: 5000,
    });
    expect(appleCall).toMatchObject({ aborted: true });
    await new Promise((resolve) => setTimeout(resolve, 2000));
    expect(fake.requests).toEqual([]);
  });

  it.skipIf(!redisAvailable)("answers a proxied call waiting for its rate limits in Redis 503", async () => {
    const held = await heldRedisReplies(redisUrl);
    const sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      redisUrl: held.url,
      redisCommandTimeoutMs: 5000,
      shutdownTimeoutMs,
    });
    try {
      const project = await createTestProject(sluice.gateway);
      held.hold();
      const pending = proxiedChat(sluice.url, project).catch((error: Error) => error);
      await held.replied();
      const closing = shutDownRefusingOne(sluice);
      const answer = await pending;
      held.pass();
      await closing;
      const requestId = await expectDeadlineRefusal(answer);
      expect(rowsAfterShutdown(sluice)).toEqual([
        {
          request_id: requestId,
          endpoint: "proxy",
          status: 503,
          outcome: "error",
          error_code: "SERVICE_UNAVAILABLE",
        },
      ]);
      expect(fake.requests).toEqual([]);
    } finally {
      await held.close();
    }
  });
});

/**
 * The routes that write no usage row wait for Redis too before they answer: the admin API's check of
 * its token (a wrong one counted by the failed-token throttle), a project's model list (an unknown
 * project id counted by the failed-authentication throttle), `/health` (its pings). At the shutdown's
 * deadline such a call is refused as any other (503, the envelope, Retry-After, `Connection: close`),
 * not cut without an answer.
 */
describe.skipIf(!redisAvailable)(
  "calls waiting for Redis at the shutdown deadline, on routes without a row",
  () => {
    it.each([
      {
        route: "an admin API call with a wrong token",
        path: "/admin/v1/projects",
        bearer: `${adminToken}-wrong`,
      },
      { route: "an unknown project's model list", path: "/v1/provider-a/prj_unknown/models" },
      { route: "/health", path: "/health" },
    ])("answers $route 503", async ({ path, bearer }) => {
      const held = await heldRedisReplies(redisUrl);
      const sluice = await startTestGateway({
        redisUrl: held.url,
        redisCommandTimeoutMs: 5000,
        shutdownTimeoutMs,
      });
      try {
        held.hold();
        const pending = fetch(`${sluice.url}${path}`, {
          headers: bearer ? { authorization: `Bearer ${bearer}` } : {},
        }).catch((error: Error) => error);
        await held.replied();
        const closing = shutDownRefusingOne(sluice);
        const answer = await pending;
        held.pass();
        await closing;
        await expectDeadlineRefusal(answer);
      } finally {
        await held.close();
        rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
      }
    });
  },
);

import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  appleKeyId,
  appleTeamId,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const deviceToken = (name: string) =>
  Buffer.from(`${name}-${randomBytes(12).toString("hex")}`).toString("base64");

/**
 * SPEC Authentication: the methods are tried in order (1, 2a, 2b, 3) and the request fails only when
 * none succeeds. A Bearer credential refused once its token passed (403: a partial key of another
 * provider, or a revoked one) is one method failing: the legacy device-token header still gets its
 * turn, whichever token the Bearer value carried.
 */
describe("the methods after a Bearer credential refused with 403", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let sluice: TestGateway;
  const keys = generateAppleKeyPair();
  const deviceCheck = {
    enabled: true,
    teamId: appleTeamId,
    keyId: appleKeyId,
    privateKey: keys.privateKeyPem,
    environment: "production",
  } as const;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    sluice = await startTestGateway({ ...providerBaseUrls(fake), deviceCheckProductionUrl: apple.url });
  });
  afterAll(async () => {
    await sluice.close();
    await apple.close();
    await fake.close();
  });

  /** A project on Test Mode and DeviceCheck both, so either Bearer token can pass. */
  const project = () => createTestProject(sluice.gateway, { deviceCheck });

  /** Provider A's chat call with a Bearer value and the legacy headers that pass on their own. */
  async function chat(created: TestProject, bearer: string) {
    const legacyToken = deviceToken("legacy");
    apple.registerValidToken(legacyToken);
    const response = await fetch(`${sluice.url}/v1/provider-a/${created.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        authorization: `Bearer ${bearer}`,
        "x-device-token": legacyToken,
        "x-ai-key": created.partialKeys["provider-a"],
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    await response.arrayBuffer();
    return { status: response.status, method: (await usageRowOf(sluice.gateway, response)).auth_method };
  }

  it.each(["test key", "device token"])(
    "tries the legacy device-token header after a Bearer %s whose partial key is another provider's",
    async (token) => {
      const created = await project();
      const bearerToken = token === "test key" ? created.testKey : deviceToken("bearer");
      apple.registerValidToken(bearerToken);
      expect(await chat(created, `${created.partialKeys["provider-b"]}.${bearerToken}`)).toEqual({
        status: 200,
        method: "device-token-header",
      });
    },
  );

  it.each(["test key", "device token"])(
    "tries the legacy device-token header after a Bearer %s whose partial key was revoked",
    async (token) => {
      const created = await project();
      const revoked = await sluice.gateway.admin.addProviderKey(created.projectId, {
        provider: "provider-a",
        apiKey: `real-provider-a-key-${randomBytes(12).toString("hex")}`,
      });
      await sluice.gateway.admin.revokeProviderKey(created.projectId, revoked.keyId);
      const bearerToken = token === "test key" ? created.testKey : deviceToken("bearer");
      apple.registerValidToken(bearerToken);
      expect(await chat(created, `${revoked.partialKey}.${bearerToken}`)).toEqual({
        status: 200,
        method: "device-token-header",
      });
    },
  );

  it("counts a device token Apple refused as a failed authentication, whatever 403 another method earned", async () => {
    const limited = await startTestGateway({
      ...providerBaseUrls(fake),
      deviceCheckProductionUrl: apple.url,
      authFailureLimit: 2,
    });
    try {
      const created = await createTestProject(limited.gateway, { testMode: false, deviceCheck });
      const bearerToken = deviceToken("bearer");
      apple.registerValidToken(bearerToken);
      const statuses: number[] = [];
      for (let attempt = 0; attempt < 4; attempt++) {
        // The Bearer credential passes but is another provider's (403); the legacy header's token,
        // new each time, costs an Apple call and is refused.
        const response = await fetch(`${limited.url}/v1/provider-a/${created.projectId}/chat/completions`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            authorization: `Bearer ${created.partialKeys["provider-b"]}.${bearerToken}`,
            "x-device-token": deviceToken("junk"),
            "x-ai-key": created.partialKeys["provider-a"],
          },
          body: "{}",
        });
        await response.arrayBuffer();
        statuses.push(response.status);
      }
      expect(statuses).toEqual([403, 403, 429, 429]);
    } finally {
      await limited.close();
    }
  });
});

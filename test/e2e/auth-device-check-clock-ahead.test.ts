import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  startTestGateway,
} from "../support/test-gateway.js";

const keys = generateAppleKeyPair();

/**
 * A project created through an instance (or a CLI) whose clock is a minute ahead of the others':
 * its creation time, which no token verified before it may predate, lies a minute in the future on
 * the clock that stamps verifications (Redis's, or the serving instance's). A token Apple verified
 * for it is still trusted for its budget, and Apple is asked once, not on every request.
 */
describe.skipIf(!postgresAvailable)(
  "a DeviceCheck project written by an instance whose clock is ahead",
  () => {
    let fake: FakeUpstream;
    let apple: FakeApple;
    beforeAll(async () => {
      fake = await startFakeUpstream();
      apple = await startFakeApple({ label: "production" });
      apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    });
    afterAll(async () => {
      await apple?.close();
      await fake?.close();
    });

    async function budgetOnTheOtherInstance(shared: Record<string, unknown>) {
      const ahead = await startTestGateway(shared, { now: () => new Date(Date.now() + 60_000) });
      const other = await startTestGateway(shared);
      try {
        const project = await createDeviceCheckProject(ahead.gateway, keys.privateKeyPem, "cached");
        const deviceToken = Buffer.from(`ahead-${randomBytes(12).toString("hex")}`).toString("base64");
        apple.registerValidToken(deviceToken);
        const asked = apple.calls.length;
        const statuses: number[] = [];
        for (let index = 0; index < 5; index++)
          statuses.push(
            await proxiedChatStatus(
              other.url,
              { projectId: project.projectId, bearer: `${project.partialKeys["provider-a"]}.${deviceToken}` },
              { headers: { "x-forwarded-for": `2001:db8:${randomBytes(2).toString("hex")}::1` } },
            ),
          );
        expect({ statuses, appleCalls: apple.calls.length - asked }).toEqual({
          statuses: [200, 200, 200, 401, 401],
          appleCalls: 1,
        });
      } finally {
        await other.close();
        await ahead.close();
      }
    }

    const shared = (schema: { url: string }) => ({
      ...providerBaseUrls(fake),
      masterKey: randomBytes(32).toString("base64"),
      databaseUrl: schema.url,
      deviceCheckProductionUrl: apple.url,
      trustProxy: ["127.0.0.1"],
      deviceTokenBudget: 3,
    });

    it("keeps the token's budget on another instance, the ledger in its memory", async () => {
      const schema = await createPostgresSchema();
      try {
        await budgetOnTheOtherInstance(shared(schema));
      } finally {
        await schema.drop();
      }
    });

    it.skipIf(!redisAvailable)(
      "keeps the token's budget on another instance, the ledger in Redis",
      async () => {
        const schema = await createPostgresSchema();
        const space = redisTestSpace("device-check-clock-ahead");
        try {
          await budgetOnTheOtherInstance({
            ...shared(schema),
            redisUrl,
            redisKeyPrefix: `${space.nextPrefix()}:`,
          });
        } finally {
          await schema.drop();
          await space.cleanup();
        }
      },
    );
  },
);

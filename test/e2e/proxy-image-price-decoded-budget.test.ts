import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { heldRedisReplies } from "../support/held-redis-replies.js";
import { openUpload, until } from "../support/held-upload.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

const mib = 1024 * 1024;
const budget = 3 * mib;

/**
 * A capped project's image generation sent gzipped is decoded for its price before it is sent
 * (the proxy route's holdToImagePrice), and that copy is held until it is sent: up to
 * SLUICE_MAX_BODY_BYTES from a few KiB (JSON's whitespace between members). Such a copy is a body
 * the call holds, as the copy decoded to set the stream usage option is: one that would go past
 * SLUICE_MAX_BUFFERED_BODY_BYTES beside the other calls' bodies is answered 503, nothing sent. It
 * was counted without being checked, so any number of such calls went on at once, each holding
 * its copy past the budget while its price was counted (a Redis script, the database when the cap
 * is read) and its body sent.
 */
describe.skipIf(!redisAvailable)("a capped image generation's body decoded for its price", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let relay: Awaited<ReturnType<typeof heldRedisReplies>>;
  const space = redisTestSpace("proxy-price-decoded-budget");
  const held = () => sluice.gateway.bodyBudget.held();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    relay = await heldRedisReplies(redisUrl);
    sluice = await startTestGateway(
      {
        providerABaseUrl: `${fake.url}/a/v1`,
        redisUrl: relay.url,
        redisKeyPrefix: `${space.nextPrefix()}:`,
        maxBufferedBodyBytes: budget,
      },
      { now: clockAwayFromMonthEnd() },
    );
  });
  afterAll(async () => {
    relay?.pass();
    await sluice?.close();
    await relay?.close();
    await fake?.close();
    await space.cleanup();
  });

  it("is answered 503 when it would go past the budget beside another call's, and nothing is sent", async () => {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      monthlySpendCapUsd: 100,
    });
    const path = `/v1/provider-a/${project.projectId}/images/generations`;
    // 2 MiB decoded, a few KiB gzipped: two do not fit in the 3 MiB budget.
    const body = gzipSync(
      `{"model":"gpt-image-1",${" ".repeat(2 * mib)}"prompt":"a lighthouse","n":1,"quality":"low","size":"1024x1024"}`,
    );
    expect(body.length).toBeLessThan(64 * 1024);
    const headers = [`content-length: ${body.length}`, "content-encoding: gzip"];
    // Once through first: the scripts are loaded and the month's figure read.
    const warm = openUpload(sluice.url, path, project.bearer("provider-a"), headers);
    warm.socket.write(body);
    expect((await warm.answer).status).toBe(200);
    warm.socket.destroy();
    await until(() => held() === 0, "the first call's share was given back");
    fake.clear();

    // Both admitted, each waiting for the rest of its body.
    const first = openUpload(sluice.url, path, project.bearer("provider-a"), headers, "");
    const second = openUpload(sluice.url, path, project.bearer("provider-a"), headers, "");
    try {
      first.socket.write(body.subarray(0, 5));
      second.socket.write(body.subarray(0, 5));
      await new Promise((resolve) => setTimeout(resolve, 300));
      relay.hold();
      // The first is decoded and waits for its price script's reply, its copy held.
      first.socket.write(body.subarray(5));
      await relay.replied();
      expect(held()).toBeGreaterThanOrEqual(2 * mib);
      // The second's copy does not fit beside it.
      second.socket.write(body.subarray(5));
      const refused = await Promise.race([
        second.answer,
        new Promise<null>((resolve) => setTimeout(() => resolve(null), 1_000)),
      ]);
      expect(held(), "the bodies held stay within the budget").toBeLessThanOrEqual(budget);
      expect(refused?.status).toBe(503);
      relay.pass();
      expect((await first.answer).status).toBe(200);
      expect(fake.requests, "the refused call sent nothing").toHaveLength(1);
    } finally {
      relay.pass();
      first.socket.destroy();
      second.socket.destroy();
    }
    await until(() => held() === 0, "every share was given back");
  });
});

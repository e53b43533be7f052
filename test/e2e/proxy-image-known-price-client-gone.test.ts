import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { heldRedisReplies } from "../support/held-redis-replies.js";
import { openUpload } from "../support/held-upload.js";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

// A capped project's image generation waits, once its body is in, for its price to be counted in
// Redis (one script), and may wait for its credentials to be read again (the admission recheck):
// the client can leave meanwhile. On the proxies the exchange with the provider listened for the
// client's leaving only once it began, so a client gone before was not heard of: the generation was
// sent, ran and was billed (its row priced), for an answer nobody read. On /v1/image the provider
// call is made with the client's signal, aborted by then, so nothing went out; but its row said the
// provider may have run (499 of unknown cost), which the cap counts at its estimate of one call
// (decision 0057), for a call that never left.
describe.skipIf(!redisAvailable)("an image call whose client leaves while its price is counted", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let relay: Awaited<ReturnType<typeof heldRedisReplies>>;
  const space = redisTestSpace("proxy-known-price-gone");

  beforeAll(async () => {
    fake = await startFakeUpstream();
    relay = await heldRedisReplies(redisUrl);
    sluice = await startTestGateway(
      {
        providerABaseUrl: `${fake.url}/a/v1`,
        redisUrl: relay.url,
        redisKeyPrefix: `${space.nextPrefix()}:`,
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

  /**
   * A capped project's call of `body` to `route` (once through first, so that the scripts are loaded
   * and the figure read), then another whose client leaves while its price script's reply is held:
   * the provider's requests since, and the rows of the project.
   */
  async function leaveWhilePriced(route: (projectId: string) => string, body: string) {
    const project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      monthlySpendCapUsd: 1,
    });
    const path = route(project.projectId);
    const headers = [`content-length: ${body.length}`];
    const first = openUpload(sluice.url, path, project.bearer("provider-a"), headers, body);
    expect((await first.answer).status).toBe(200);
    first.socket.destroy();
    fake.clear();
    const upload = openUpload(sluice.url, path, project.bearer("provider-a"), headers, body.slice(0, 5));
    try {
      // Admitted (its place taken): the call waits for the rest of its body.
      await new Promise((resolve) => setTimeout(resolve, 300));
      relay.hold();
      upload.socket.write(body.slice(5));
      // The price script is on its way, its reply held: the client leaves.
      await relay.replied();
      upload.socket.destroy();
      await upload.closed;
      await new Promise((resolve) => setTimeout(resolve, 100));
      relay.pass();
      await new Promise((resolve) => setTimeout(resolve, 500));
    } finally {
      relay.pass();
      upload.socket.destroy();
    }
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .select(["status", "outcome", "cost_usd", "provider_answered"])
      .where("project_id", "=", project.projectId)
      .orderBy("created_at")
      .execute();
    return { sent: [...fake.requests], last: rows.at(-1) };
  }

  /** The row of a call whose client left before anything was sent: no cost, none counted under the cap. */
  const goneBeforeSent = { status: 499, outcome: "aborted", cost_usd: 0, provider_answered: null };

  it("on the proxy, sends nothing to the provider, and its row records the client gone (499)", async () => {
    const { sent, last } = await leaveWhilePriced(
      (projectId) => `/v1/provider-a/${projectId}/images/generations`,
      JSON.stringify({
        model: "gpt-image-1",
        prompt: "a lighthouse",
        n: 1,
        quality: "low",
        size: "1024x1024",
      }),
    );
    expect(sent, "nothing went to the provider").toHaveLength(0);
    expect(last).toEqual(goneBeforeSent);
  });

  it("on /v1/image, its row records nothing sent (no cost), not a call of unknown cost", async () => {
    const { sent, last } = await leaveWhilePriced(
      (projectId) => `/v1/image/${projectId}`,
      JSON.stringify({
        prompt: "a lighthouse",
        model: "gpt-image-1",
        size: "1024x1024",
        providerOptions: { "provider-a": { quality: "low" } },
      }),
    );
    expect(sent, "nothing went to the provider").toHaveLength(0);
    expect(last).toEqual(goneBeforeSent);
  });
});

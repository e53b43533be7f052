import { afterAll, describe, expect, it } from "vitest";
import { directoryWithSlowReads } from "../../test/support/directory-with-slow-reads.js";
import { createAuthThrottle } from "../rate-limit/auth-throttle.js";
import { openDatabase } from "../storage/database.js";
import { createAuthenticator } from "./authenticate.js";

/**
 * A client that sends many requests at once from one address (a server, or an app's users behind
 * one NAT) while its project's records are being read again (every SLUICE_PROJECT_CACHE_TTL_MS):
 * on PostgreSQL that read takes a round trip, during which every request of the burst is in flight.
 * Requests for a project this instance holds, with a credential it verified, are no attempts that
 * may fail, and must not fill the failed-authentication throttle's slots.
 */
describe("a burst of good credentials while the records are read again", () => {
  const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  afterAll(async () => (await opening).close());

  it("is admitted whole: a project held and a credential verified take no throttle slot", async () => {
    // While `gate` is set, the directory's reads wait for it (a database round trip in progress).
    let gate: Promise<void> | null = null;
    const { directory, partialKey, request, advance } = await directoryWithSlowReads(
      await opening,
      (read) =>
        async (...args) => {
          if (gate) await gate;
          return read(...args);
        },
    );
    const limit = 5;
    const authenticate = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "not used here" }) },
      throttle: createAuthThrottle({ failuresPerMinute: limit }),
      testModeAllowed: true,
    });
    expect(await authenticate(request)).toMatchObject({ ok: true, method: "bearer-test-key" });

    // Past the TTL the records are read again; the burst arrives while that read is out.
    advance(2000);
    let answer = () => {};
    gate = new Promise<void>((resolve) => {
      answer = resolve;
    });
    const burst = Array.from({ length: 4 * limit }, () => authenticate({ ...request }));
    await new Promise((resolve) => setTimeout(resolve, 20));
    gate = null;
    answer();
    const results = await Promise.all(burst);
    expect(results.map((result) => (result.ok ? "ok" : result.error.code))).toEqual(
      Array(4 * limit).fill("ok"),
    );

    // A wrong token is still an attempt that may fail: the throttle counts it as before.
    const wrong = { ...request, headers: { authorization: `Bearer ${partialKey}.wrong-token` } };
    const failures = [];
    for (let index = 0; index <= limit; index++) {
      const result = await authenticate({ ...wrong });
      failures.push(result.ok ? "ok" : result.error.code);
    }
    expect(failures).toEqual([...Array(limit).fill("UNAUTHORIZED"), "TOO_MANY_REQUESTS"]);
  });
});

import { afterAll, describe, expect, it } from "vitest";
import { beforeTimer } from "../../test/support/before-timer.js";
import { directoryWithSlowReads } from "../../test/support/directory-with-slow-reads.js";
import { openDatabase } from "../storage/database.js";
import { reloadWaitMs } from "../storage/database-unavailable.js";
import { createAuthenticator } from "./authenticate.js";

describe("authentication while the database hangs", () => {
  const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  afterAll(async () => (await opening).close());

  it("waits reloadWaitMs in all for its stale project, test keys and provider key, not that long for each", async () => {
    // From `hung` on, the directory's reads never answer.
    let hung = false;
    const { directory, request, advance } = await directoryWithSlowReads(
      await opening,
      (read) =>
        (...args) =>
          hung ? new Promise(() => {}) : read(...args),
    );
    const authenticate = createAuthenticator({
      directory,
      deviceTokens: { verify: async () => ({ kind: "invalid", reason: "not used here" }) },
      throttle: {
        policy: { failuresPerWindow: 30, windowSeconds: 60 },
        retryAfter: () => 0,
        retryAfterMissing: () => 0,
        recordFailure: async () => {},
        begin: () => () => {},
      },
      testModeAllowed: true,
    });
    expect(await authenticate(request)).toMatchObject({ ok: true, method: "bearer-test-key" });
    // Past the TTL, the three records are read again, and the database hangs.
    advance(2000);
    hung = true;
    // Waiting for each in turn would take 3 reloadWaitMs: told by the order of events, before a timer
    // of twice reloadWaitMs set at the same time fires, not by a duration a loaded machine stretches.
    expect(await beforeTimer(authenticate(request), 2 * reloadWaitMs)).toMatchObject({
      ok: true,
      method: "bearer-test-key",
    });
  });
});

import { Writable } from "node:stream";
import { afterAll, describe, expect, it } from "vitest";
import {
  developmentDeviceCheck,
  openingSecretBox,
  unreachableAppleConfig,
} from "../../test/support/device-check-settings.js";
import { directoryWithSlowReads, projectsReadAs } from "../../test/support/directory-with-slow-reads.js";
import { createLogger } from "../observability/logger.js";
import { createAuthThrottle } from "../rate-limit/auth-throttle.js";
import { openDatabase } from "../storage/database.js";
import { createAuthenticator } from "./authenticate.js";
import { createDeviceTokenVerifier } from "./device-token-verifier.js";

/**
 * A device token this instance passed takes no throttle slot for its ledger lookup (decision 0048):
 * only while that lookup almost always passes again. Once its budget is used up every replay is a
 * counted failure until its entry ends, so a burst of them takes slots again, held to the limit, as
 * a token never passed here is; without that, each burst from one address added its whole size in
 * failures (every one a ledger lookup) before the throttle blocked it.
 */
describe("a burst of replays of a token passed here whose budget is used up", () => {
  const opening = openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
  afterAll(async () => (await opening).close());

  it("is held to the limit: the slots left reach the ledger, the others are refused 429", async () => {
    // Test Mode off and DeviceCheck on, over the project the directory reads.
    const { directory, partialKey, request } = await directoryWithSlowReads(
      await opening,
      projectsReadAs((project) => ({
        ...project,
        testMode: false,
        deviceCheck: developmentDeviceCheck(project.deviceCheck),
      })),
    );
    const token = Buffer.from("a-device-token-of-budget-one").toString("base64");
    let appleCalls = 0;
    const deviceTokens = createDeviceTokenVerifier({
      config: unreachableAppleConfig(1),
      secretBox: openingSecretBox(),
      redis: undefined,
      logger: createLogger("silent", new Writable({ write: (_chunk, _encoding, done) => done() })),
      client: {
        async validate(input) {
          appleCalls++;
          return input.deviceToken === token
            ? { kind: "valid" }
            : { kind: "invalid", reason: "rejected-by-apple" };
        },
      },
    });
    const limit = 5;
    const authenticate = createAuthenticator({
      directory,
      deviceTokens,
      throttle: createAuthThrottle({ failuresPerMinute: limit }),
      testModeAllowed: true,
    });
    const replay = () =>
      authenticate({ ...request, headers: { authorization: `Bearer ${partialKey}.${token}` } });
    const outcome = (result: Awaited<ReturnType<typeof replay>>) => (result.ok ? "ok" : result.error.code);

    // Passed here (Apple asked), then refused: its budget of one is used up, one failure counted.
    expect([outcome(await replay()), outcome(await replay())]).toEqual(["ok", "UNAUTHORIZED"]);

    const results = (await Promise.all(Array.from({ length: 4 * limit }, replay))).map(outcome);
    const count = (code: string) => results.filter((value) => value === code).length;
    expect({ UNAUTHORIZED: count("UNAUTHORIZED"), TOO_MANY_REQUESTS: count("TOO_MANY_REQUESTS") }).toEqual({
      UNAUTHORIZED: limit - 1,
      TOO_MANY_REQUESTS: 4 * limit - (limit - 1),
    });
    expect(appleCalls).toBe(1);
  });
});

import { describe, expect, it } from "vitest";
import { redisKeyPrefixes } from "./redis-keys.js";

describe("redisKeyPrefixes", () => {
  it("keeps the key names of earlier versions without a prefix, so an upgrade keeps counts and ledger", () => {
    expect(redisKeyPrefixes()).toEqual({
      rateLimits: "sluice:rl",
      authFailures: "sluice:auth",
      adminAuthFailures: "sluice:admin-auth",
      deviceTokens: "sluice:device-token:",
      spendInFlight: "sluice:spend-in-flight",
      writeProbe: "sluice:write-probe",
    });
  });

  it("puts the prefix before every one of them, as written", () => {
    for (const key of Object.values(redisKeyPrefixes("staging:")))
      expect(key).toMatch(/^staging:sluice:[a-z-]+:?$/);
  });
});

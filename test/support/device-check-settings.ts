import type { SecretBox } from "../../src/auth/secret-box.js";
import type { Project } from "../../src/storage/project-repository.js";

/**
 * `deviceCheck` turned on for Apple's development host, with a sealed key the tests never open (the
 * Apple client is faked or never reached), in `tokenMode`: the settings a DeviceCheck project's
 * record holds, over the rest of `deviceCheck` as it was.
 */
export function developmentDeviceCheck(
  deviceCheck: Project["deviceCheck"],
  tokenMode: Project["deviceCheck"]["tokenMode"] = "cached",
): Project["deviceCheck"] {
  return {
    ...deviceCheck,
    enabled: true,
    teamId: "TEAM123456",
    keyId: "KEY1234567",
    sealedPrivateKey: "sealed",
    environment: "development",
    tokenMode,
  };
}

/**
 * The device token verifier's settings with both Apple hosts unreachable (its client is faked),
 * verified tokens trusted for an hour, each for `budget` uses.
 */
export function unreachableAppleConfig(budget: number) {
  return {
    deviceCheckProductionUrl: "http://127.0.0.1:1",
    deviceCheckDevelopmentUrl: "http://127.0.0.1:1",
    deviceCheckTimeoutMs: 1000,
    deviceTokenTtlSeconds: 3600,
    deviceTokenBudget: budget,
  };
}

/** A secret box that opens every sealed value to `opened` (a PEM's first line unless given). */
export function openingSecretBox(opened = "-----BEGIN PRIVATE KEY-----"): SecretBox {
  return {
    seal: () => "sealed",
    open: () => Buffer.from(opened),
    reseal: () => undefined,
    keyOpening: () => "current",
    deriveKey: () => Buffer.alloc(32),
    derivePreviousKey: () => undefined,
  };
}

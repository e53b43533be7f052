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

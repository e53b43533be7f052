import { randomBytes } from "node:crypto";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  appleKeyId,
  appleTeamId,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  titleSchema,
} from "./test-gateway.js";

/** SPEC's four authentication methods, in the order they are tried. */
export type AuthMethod =
  | "test-key-header"
  | "bearer-test-key"
  | "bearer-device-check"
  | "device-token-header";
export const authMethods: AuthMethod[] = [
  "test-key-header",
  "bearer-test-key",
  "bearer-device-check",
  "device-token-header",
];

/** A gateway, its fake providers and a fake Apple, with one project open to every SPEC method. */
export interface DeviceCheckStage {
  fake: FakeUpstream;
  apple: FakeApple;
  sluice: TestGateway;
  project: TestProject;
  /** A device token the fake Apple takes as valid, new at each call. */
  deviceToken(): string;
  /**
   * The credential headers of `method` with `provider`'s partial key, which `x-ai-key` carries for
   * the methods that are not Bearer (left out when `withPartialKey` is false).
   */
  credentials(method: AuthMethod, provider?: ProviderId, withPartialKey?: boolean): Record<string, string>;
  close(): Promise<void>;
}

/**
 * A project with Test Mode and DeviceCheck both on (production environment, cached tokens, the
 * structured endpoints' `titleSchema`), so a request may authenticate by any of SPEC's four methods;
 * `fields` are further project fields (rate limits, say).
 */
export async function startDeviceCheckStage(fields: Record<string, unknown> = {}): Promise<DeviceCheckStage> {
  const keys = generateAppleKeyPair();
  const fake = await startFakeUpstream();
  fake.setStructuredOutput({ title: "A calm lake" });
  const apple = await startFakeApple({ label: "production" });
  apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
  const sluice = await startTestGateway({ ...providerBaseUrls(fake), deviceCheckProductionUrl: apple.url });
  const project = await createTestProject(sluice.gateway, {
    outputSchema: titleSchema,
    deviceCheck: {
      enabled: true,
      teamId: appleTeamId,
      keyId: appleKeyId,
      privateKey: keys.privateKeyPem,
      environment: "production",
      tokenMode: "cached",
    },
    ...fields,
  });
  return {
    fake,
    apple,
    sluice,
    project,
    deviceToken: () => validDeviceToken(apple),
    credentials(method, provider = "provider-a", withPartialKey = true): Record<string, string> {
      const partialKey = project.partialKeys[provider];
      const aiKey: Record<string, string> = withPartialKey ? { "x-ai-key": partialKey } : {};
      switch (method) {
        case "test-key-header":
          return { "x-sluice-test-key": project.testKey, ...aiKey };
        case "bearer-test-key":
          return { authorization: `Bearer ${partialKey}.${project.testKey}` };
        case "bearer-device-check":
          return { authorization: `Bearer ${partialKey}.${validDeviceToken(apple)}` };
        case "device-token-header":
          return { "x-device-token": validDeviceToken(apple), ...aiKey };
      }
    },
    async close() {
      await sluice.close();
      await apple.close();
      await fake.close();
    },
  };
}

/** A new device token (24 random bytes, base64) that `apple` answers valid. */
export function validDeviceToken(apple: FakeApple): string {
  const token = randomBytes(24).toString("base64");
  apple.registerValidToken(token);
  return token;
}

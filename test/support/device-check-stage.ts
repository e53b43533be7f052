import { randomBytes } from "node:crypto";
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

/** A gateway, its fake providers and a fake Apple, with one project open to every SPEC method. */
export interface DeviceCheckStage {
  fake: FakeUpstream;
  apple: FakeApple;
  sluice: TestGateway;
  project: TestProject;
  /** A device token the fake Apple takes as valid, new at each call. */
  deviceToken(): string;
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

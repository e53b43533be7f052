import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../../test/fakes/fake-apple.js";
import {
  deviceTokenVerifierOn,
  openThrottle,
  wireAdminAndDirectory,
} from "../../test/support/authenticator-wiring.js";
import { heapUsedAfterGc } from "../../test/support/garbage-collection.js";
import { type OpenDatabase, openDatabase } from "../storage/database.js";
import { createAuthenticator } from "./authenticate.js";

const teamId = "TEAM123456";
const appleKeyId = "KEY1234567";
const keys = 400;
/** Bytes of a padded device token: 8,000 characters of base64, under the 8 KiB a token may have. */
const padding = 6_000;

/**
 * The authenticator remembers each partial key it rebuilt (up to 10,000, one per provider key an
 * operator made): the entry must hold its own key id, not a view of the Authorization header the
 * id was cut from, which carries a DeviceCheck token of a few KiB (V8 keeps the whole string behind
 * a substring of 13 characters or more).
 */
describe("memory kept per rebuilt partial key", () => {
  let apple: FakeApple;
  let database: OpenDatabase;
  let authenticate: ReturnType<typeof createAuthenticator>;
  let projectId: string;
  const partialKeys: string[] = [];

  beforeAll(async () => {
    const pair = generateAppleKeyPair();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId, publicKeyPem: pair.publicKeyPem });
    database = await openDatabase({ dataDir: "unused", sqliteFile: ":memory:" });
    const { secretBox, directory, admin } = wireAdminAndDirectory(database, 60_000);
    const created = await admin.createProject({
      name: "memory",
      provider: "provider-a",
      testMode: false,
      deviceCheck: {
        enabled: true,
        teamId,
        keyId: appleKeyId,
        privateKey: pair.privateKeyPem,
        environment: "production",
      },
    });
    projectId = created.project.id;
    for (let index = 0; index < 3 * keys; index++) {
      const apiKey = `sk-memory-${randomBytes(16).toString("hex")}`;
      partialKeys.push(
        (await admin.addProviderKey(projectId, { provider: "provider-a", apiKey })).partialKey,
      );
    }
    const deviceTokens = deviceTokenVerifierOn(
      { production: apple.url, development: apple.url },
      secretBox,
      1,
    );
    authenticate = createAuthenticator({
      directory,
      deviceTokens,
      throttle: openThrottle,
      testModeAllowed: true,
    });
  });

  afterAll(async () => {
    await database.close();
    await apple.close();
  });

  /** How much the heap grew after each of `partials` was rebuilt once, with a device token of `size` bytes. */
  async function heapGrowth(partials: string[], size: number): Promise<number> {
    const before = heapUsedAfterGc();
    for (let start = 0; start < partials.length; start += 20) {
      const results = await Promise.all(
        partials.slice(start, start + 20).map(async (partialKey) => {
          const token = randomBytes(size).toString("base64");
          apple.registerValidToken(token);
          const result = await authenticate({
            projectId,
            headers: { authorization: `Bearer ${partialKey}.${token}` },
            clientIp: "203.0.113.9",
            provider: "provider-a",
          });
          // The fake Apple runs in this process: what it keeps would count as Sluice's.
          apple.forgetValidToken(token);
          return result;
        }),
      );
      expect(results.map((result) => (result.ok ? "ok" : result.error.message))).toEqual(
        results.map(() => "ok"),
      );
    }
    return heapUsedAfterGc() - before;
  }

  it("keeps no Authorization header behind a rebuilt partial key", { timeout: 60_000 }, async () => {
    // The first keys rebuilt warm up what any request would (compiled code, the directory's caches).
    await heapGrowth(partialKeys.slice(0, keys), 24);
    const plain = await heapGrowth(partialKeys.slice(keys, 2 * keys), 24);
    const padded = await heapGrowth(partialKeys.slice(2 * keys), padding);
    // Kept, each header would add its token's 8,000 characters (3.2 MB in all); a quarter of it
    // allows for the noise of a heap that also holds the test's database and fake Apple.
    expect(padded - plain).toBeLessThan((keys * padding * 4) / 3 / 4);
  });
});

import { randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { createProjectAdmin } from "../../src/admin/project-admin.js";
import type { AuthThrottle } from "../../src/auth/authenticate.js";
import { createCredentialDirectory } from "../../src/auth/credential-directory.js";
import { createDeviceTokenVerifier } from "../../src/auth/device-token-verifier.js";
import { createSecretBox, type SecretBox } from "../../src/auth/secret-box.js";
import { createLogger } from "../../src/observability/logger.js";
import type { OpenDatabase } from "../../src/storage/database.js";
import { createKeyRepository } from "../../src/storage/key-repository.js";
import { createProjectRepository } from "../../src/storage/project-repository.js";
import { createUsageRepository } from "../../src/storage/usage-repository.js";

/** The failed-authentication throttle's policy the authenticator suites run under. */
export const throttlePolicy = { failuresPerWindow: 30, windowSeconds: 60 };

/** A failed-authentication throttle that never holds a caller back. */
export const openThrottle: AuthThrottle = {
  policy: throttlePolicy,
  retryAfter: () => 0,
  retryAfterMissing: () => 0,
  recordFailure: async () => {},
  begin: () => () => {},
};

/** Admin use cases and a credential directory over one database, as the composition root wires them. */
export function wireAdminAndDirectory(
  database: OpenDatabase,
  ttlMs: number,
  now: () => Date = () => new Date(),
) {
  const secretBox = createSecretBox(randomBytes(32));
  const projects = createProjectRepository(database.db);
  const keys = createKeyRepository(database.db);
  const directory = createCredentialDirectory({ projects, keys, secretBox, ttlMs });
  const admin = createProjectAdmin({
    projects,
    keys,
    usage: createUsageRepository(database.db),
    secretBox,
    now,
    onProjectChanged: directory.invalidate,
    testModeAllowed: true,
  });
  return { secretBox, directory, admin };
}

/**
 * The DeviceCheck verifier on fake Apple hosts (`production` and `development`, their base URLs), its
 * ledger in memory, with a budget of `budget` uses a token and Apple answering within 2 s.
 */
export function deviceTokenVerifierOn(
  apple: { production: string; development: string },
  secretBox: SecretBox,
  budget: number,
) {
  return createDeviceTokenVerifier({
    config: {
      deviceCheckProductionUrl: apple.production,
      deviceCheckDevelopmentUrl: apple.development,
      deviceCheckTimeoutMs: 2000,
      deviceTokenTtlSeconds: 60,
      deviceTokenBudget: budget,
    },
    secretBox,
    redis: undefined,
    logger: createLogger("silent", new Writable({ write: (_c, _e, done) => done() })),
  });
}

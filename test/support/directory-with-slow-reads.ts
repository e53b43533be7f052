import { randomBytes } from "node:crypto";
import { createProjectAdmin } from "../../src/admin/project-admin.js";
import type { AuthRequest } from "../../src/auth/authenticate.js";
import { createCredentialDirectory } from "../../src/auth/credential-directory.js";
import { createSecretBox } from "../../src/auth/secret-box.js";
import type { OpenDatabase } from "../../src/storage/database.js";
import { createKeyRepository, type KeyRepository } from "../../src/storage/key-repository.js";
import {
  createProjectRepository,
  type Project,
  type ProjectRepository,
} from "../../src/storage/project-repository.js";
import { createUsageRepository } from "../../src/storage/usage-repository.js";

/** What the directory's reads go through: the test holds them back, or never answers them. */
export type ReadWrapper = <A extends unknown[], R>(
  read: (...args: A) => Promise<R>,
) => (...args: A) => Promise<R>;

/**
 * A ReadWrapper that hands out every project record read as `change` makes it (Test Mode off and
 * DeviceCheck on, say); the key reads pass as they are.
 */
export function projectsReadAs(change: (project: Project) => Project): ReadWrapper {
  return (read) =>
    async (...args) => {
      const value = await read(...args);
      if (value === null || typeof value !== "object" || !("deviceCheck" in value)) return value;
      return change(value as unknown as Project) as unknown as typeof value;
    };
}

/**
 * A credential directory (TTL 1 s, on a clock the test moves) whose project, test-key and
 * provider-key reads go through `wrap`, and a test-mode project with a provider A key made through
 * the admin, with the request that authenticates as it (`Bearer <partial key>.<test key>`).
 */
export async function directoryWithSlowReads(database: OpenDatabase, wrap: ReadWrapper) {
  const secretBox = createSecretBox(randomBytes(32));
  const projects = createProjectRepository(database.db);
  const keys = createKeyRepository(database.db);
  let clock = Date.now();
  const directory = createCredentialDirectory({
    projects: { ...projects, get: wrap(projects.get) } satisfies ProjectRepository,
    keys: {
      ...keys,
      listTestKeys: wrap(keys.listTestKeys),
      getProviderKey: wrap(keys.getProviderKey),
    } satisfies KeyRepository,
    secretBox,
    ttlMs: 1000,
    now: () => clock,
  });
  const admin = createProjectAdmin({
    projects,
    keys,
    usage: createUsageRepository(database.db),
    secretBox,
    now: () => new Date(),
    onProjectChanged: directory.invalidate,
    testModeAllowed: true,
  });
  const created = await admin.createProject({ name: "Slow reads", provider: "provider-a", testMode: true });
  const { partialKey } = await admin.addProviderKey(created.project.id, {
    provider: "provider-a",
    apiKey: "sk-slow-reads-12345678",
  });
  const request: AuthRequest = {
    projectId: created.project.id,
    headers: { authorization: `Bearer ${partialKey}.${created.testKey}` },
    clientIp: "192.0.2.1",
    provider: "provider-a",
  };
  return {
    directory,
    partialKey,
    request,
    /** Moves the directory's clock on (past its TTL: the records are read again). */
    advance(ms: number) {
      clock += ms;
    },
  };
}

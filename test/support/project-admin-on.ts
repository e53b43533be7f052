import { createProjectAdmin, type ProjectAdmin } from "../../src/admin/project-admin.js";
import type { SecretBox } from "../../src/auth/secret-box.js";
import type { OpenDatabase } from "../../src/storage/database.js";
import { createKeyRepository } from "../../src/storage/key-repository.js";
import { createProjectRepository } from "../../src/storage/project-repository.js";
import { createUsageRepository } from "../../src/storage/usage-repository.js";

/**
 * The admin use cases over `database`, sealing with `secretBox` (Test Mode allowed, no cache to
 * tell): what the master key tests store their secrets through, under one key or another.
 */
export function projectAdminOn(database: OpenDatabase, secretBox: SecretBox): ProjectAdmin {
  return createProjectAdmin({
    projects: createProjectRepository(database.db),
    keys: createKeyRepository(database.db),
    usage: createUsageRepository(database.db, database.sqlite, database.runReport),
    secretBox,
    now: () => new Date(),
    onProjectChanged: () => {},
    testModeAllowed: true,
  });
}

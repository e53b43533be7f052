import { resealSecrets } from "../auth/master-key-reseal.js";
import { allowsTestMode, type Config } from "../config.js";
import { GatewayError } from "../errors.js";
import { openSealedStore } from "../open-sealed-store.js";
import { databaseUnavailable, isDatabaseUnavailable } from "../storage/database-unavailable.js";
import { createKeyRepository } from "../storage/key-repository.js";
import { DatabaseStartError } from "../storage/postgres-start.js";
import { createProjectRepository } from "../storage/project-repository.js";
import type { ResealCounts } from "../storage/sealed-secret-reseal.js";
import { createUsageRepository, insertUsageRowsCounted } from "../storage/usage-repository.js";
import { importDroppedRows, type UsageImportSummary } from "../usage/usage-import.js";
import { prunedMonthsProblem, pruneUsage } from "../usage/usage-retention.js";
import { createProjectAdmin, type ProjectAdmin } from "./project-admin.js";

export interface AdminContext {
  admin: ProjectAdmin;
  /**
   * `sluice master-key reseal` (see master-key-reseal.ts): its counts, and whether
   * SLUICE_MASTER_KEY_PREVIOUS is set, which every secret no longer needs once it has run.
   */
  resealSecrets(): Promise<{ counts: ResealCounts; previousKeySet: boolean }>;
  /**
   * `sluice usage prune`: deletes the usage rows created before `before`, in batches, and answers
   * how many. A `before` inside the current or previous calendar month is refused (400).
   */
  pruneUsage(before: Date): Promise<{ deleted: number; before: string }>;
  /**
   * `sluice usage import`: inserts the usage rows of the log's lines of dropped rows' contents,
   * skipping those stored already (usage-import.ts).
   */
  importUsage(lines: AsyncIterable<string>): Promise<UsageImportSummary>;
  close(): Promise<void>;
}

/**
 * The admin use cases over the configured database, without the HTTP server: what the CLI uses.
 * A running gateway sees the changes within SLUICE_PROJECT_CACHE_TTL_MS. `warn` hears what the
 * gateway would log as a warning at start (a master key generated, a database a newer Sluice migrated,
 * SLUICE_MASTER_KEY_PREVIOUS set when no stored secret needs it any more).
 */
export async function openAdminContext(
  config: Config,
  warn: (message: string) => void,
): Promise<AdminContext> {
  // A PostgreSQL that could not be opened (refused, unreachable, silent) is named, as the gateway's
  // start names it: DATABASE_URL without its password, and why. As at the gateway's start, a key
  // the stored secrets do not open is refused before any command.
  const { database, secretBox } = await openSealedStore(config, (_fields, message) => warn(message)).catch(
    (error: unknown) => {
      throw isDatabaseUnavailable(error) && !(error instanceof DatabaseStartError)
        ? databaseUnavailable(error)
        : error;
    },
  );
  const usage = createUsageRepository(database.db, database.sqlite, database.runReport);
  const admin = createProjectAdmin({
    projects: createProjectRepository(database.db),
    keys: createKeyRepository(database.db),
    usage,
    secretBox,
    now: () => new Date(),
    onProjectChanged: () => {},
    testModeAllowed: allowsTestMode(config),
  });
  return {
    admin,
    resealSecrets: async () => ({
      counts: await resealSecrets(database.db, secretBox, config),
      previousKeySet: Boolean(config.masterKeyPrevious),
    }),
    async pruneUsage(before) {
      const problem = prunedMonthsProblem(before, new Date());
      if (problem) throw new GatewayError("BAD_REQUEST", problem);
      const iso = before.toISOString();
      return { deleted: await pruneUsage(usage, iso), before: iso };
    },
    importUsage: (lines) => importDroppedRows(lines, (rows) => insertUsageRowsCounted(database.db, rows)),
    close: () => database.close(),
  };
}

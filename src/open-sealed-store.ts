import { loadMasterKey, loadPreviousMasterKey } from "./auth/master-key.js";
import { checkMasterKeyOpensDatabase, previousKeyUnneededWarning } from "./auth/master-key-check.js";
import { createSecretBox, type SecretBox } from "./auth/secret-box.js";
import type { Config } from "./config.js";
import { databaseOptionsOf, type OpenDatabase, openDatabase } from "./storage/database.js";
import { migratedByNewerWarning } from "./storage/migrations.js";

/** What an operator should hear at start: the line, and its fields for a structured log. */
export type StartWarning = (fields: Record<string, unknown>, message: string) => void;

/**
 * What the gateway's start and each CLI command do before anything else: the master key (and,
 * during a rotation, the previous one) loaded into the secret box and wiped from memory, the
 * database opened and migrated, and the key checked against the secrets it holds, refused when it
 * opens none of them (the database is closed again). What an operator should hear goes to `warn`:
 * a key generated, migrations a newer Sluice ran, damaged rows, a previous key no secret needs.
 */
export async function openSealedStore(
  config: Config,
  warn: StartWarning,
): Promise<{ database: OpenDatabase; secretBox: SecretBox }> {
  const masterKey = loadMasterKey(config, (file) =>
    warn(
      { file },
      `GENERATED A NEW MASTER KEY for secrets at rest at ${file}. Back it up: without it stored provider keys cannot be opened. Set SLUICE_MASTER_KEY in production.`,
    ),
  );
  // During a rotation, the key the secrets stored before it were sealed under opens them too.
  const previousKey = loadPreviousMasterKey(config);
  const secretBox = createSecretBox(masterKey, previousKey);
  masterKey.fill(0);
  previousKey?.fill(0);

  const database = await openDatabase(databaseOptionsOf(config));
  if (database.unknownMigrations.length > 0)
    warn({ migrations: database.unknownMigrations }, migratedByNewerWarning(database.unknownMigrations));
  const { damaged, previousKeyUnneeded } = await checkMasterKeyOpensDatabase(
    database.db,
    secretBox,
    config,
  ).catch(async (error: unknown) => {
    await database.close();
    throw error;
  });
  if (damaged.length > 0)
    warn(
      { secrets: damaged },
      `stored secrets that do not open with the master key, which opens the others: ${damaged.join("; ")}`,
    );
  // The rotation's reseal is done but the old key is still set: it should go (README, step 3).
  if (previousKeyUnneeded) warn({ masterKeyPreviousNeeded: false }, previousKeyUnneededWarning);
  return { database, secretBox };
}

import {
  ignoredKeyFileWarning,
  loadMasterKey,
  loadPreviousMasterKey,
  readMasterKey,
} from "./auth/master-key.js";
import {
  checkMasterKeyOpensDatabase,
  previousKeyUnneededWarning,
  sealedSecretName,
} from "./auth/master-key-check.js";
import { createSecretBox, type SecretBox } from "./auth/secret-box.js";
import type { Config } from "./config.js";
import {
  databaseOptionsOf,
  hasSqliteFile,
  type OpenDatabase,
  openDatabase,
  sqliteFileIn,
} from "./storage/database.js";
import { migratedByNewerWarning } from "./storage/migrations.js";
import { sealedSecretSamples } from "./storage/sealed-secret-sample.js";

/** What an operator should hear at start: the line, and its fields for a structured log. */
export type StartWarning = (fields: Record<string, unknown>, message: string) => void;

/**
 * What the gateway's start and each CLI command do before anything else: the master key (and,
 * during a rotation, the previous one) loaded into the secret box and wiped from memory, the
 * database opened and migrated, and the key checked against the secrets it holds, refused when it
 * opens none of them (the database is closed again). What an operator should hear goes to `warn`:
 * a key generated, migrations a newer Sluice ran, damaged rows, a previous key no secret needs, a
 * data dir's master.key that SLUICE_MASTER_KEY leaves unused while it holds another key.
 *
 * A key to generate (no SLUICE_MASTER_KEY, no master.key, the embedded default outside production)
 * is generated before the database is created on a fresh data dir, as before anything else there
 * (a data dir that cannot hold it is named so). Beside a database that already exists it is
 * generated only once that database is open and found to hold no secret: one sealed there under a
 * key now gone would open under no fresh key, and a master.key written beside it would be taken for
 * theirs by every later start (see `loadMasterKey`).
 *
 * `onKey` is given each key the secret box is built from (the master key, and the previous one during
 * a rotation) as base64, before its buffer is wiped: the gateway's log redacts them as it does the
 * keys set as settings, a key generated into the data dir or read from its master.key included.
 */
export async function openSealedStore(
  config: Config,
  warn: StartWarning,
  onKey: (base64: string) => void = () => {},
): Promise<{ database: OpenDatabase; secretBox: SecretBox }> {
  const onGenerated = (file: string) =>
    warn(
      { file },
      `GENERATED A NEW MASTER KEY for secrets at rest at ${file}. Back it up: without it stored provider keys cannot be opened. Set SLUICE_MASTER_KEY in production.`,
    );
  const masterKey =
    readMasterKey(config) ?? (hasSqliteFile(config.dataDir) ? undefined : loadMasterKey(config, onGenerated));
  let secretBox = masterKey && secretBoxOf(masterKey, config, onKey);

  const database = await openDatabase(databaseOptionsOf(config));
  if (secretBox === undefined) {
    try {
      // The newest live secret, as the check below samples them (a revoked key's share is never
      // opened again). loadMasterKey reads master.key again first: a process starting beside this
      // one on a fresh data dir may have generated it, and sealed that secret under it, meanwhile.
      const [stored] = await sealedSecretSamples(database.db, 1);
      const generated = loadMasterKey(
        config,
        onGenerated,
        stored && { secret: sealedSecretName(stored), file: sqliteFileIn(config.dataDir) },
      );
      secretBox = secretBoxOf(generated, config, onKey);
    } catch (error) {
      await database.close();
      throw error;
    }
  }
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
  // Told once the key is known to open the store: a start it fails names the file in its refusal.
  const ignored = ignoredKeyFileWarning(config);
  if (ignored) warn({ file: ignored.file }, ignored.message);
  return { database, secretBox };
}

/**
 * The secret box of `masterKey` and, during a rotation, the previous key: the key buffers are wiped
 * once the box holds copies of its own, and each is given to `onKey` as base64 first.
 */
function secretBoxOf(masterKey: Buffer, config: Config, onKey: (base64: string) => void): SecretBox {
  try {
    // During a rotation, the key the secrets stored before it were sealed under opens them too.
    const previousKey = loadPreviousMasterKey(config);
    try {
      for (const key of [masterKey, previousKey]) if (key) onKey(key.toString("base64"));
      return createSecretBox(masterKey, previousKey);
    } finally {
      previousKey?.fill(0);
    }
  } finally {
    masterKey.fill(0);
  }
}

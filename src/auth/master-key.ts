import { randomBytes } from "node:crypto";
import { linkSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { dataDirError, inDataDir } from "../storage/data-dir-error.js";
import { makeDirectorySync } from "../storage/make-directory.js";
import { unpooledCopy } from "../unpooled-copy.js";

export interface MasterKeySource {
  masterKey?: string | undefined;
  /** SLUICE_MASTER_KEY_PREVIOUS: during a rotation, the key secrets stored before it were sealed under. */
  masterKeyPrevious?: string | undefined;
  dataDir: string;
  environment: string;
  /** Set: the secrets live in a shared PostgreSQL database, so no key is generated (see below). */
  databaseUrl?: string | undefined;
}

/**
 * The master key from config, or (embedded default, not production) the one generated into the
 * data dir on first start. `onGenerated` lets the caller log loudly; the key itself is never logged.
 * With DATABASE_URL a key is never generated: the database is shared by other instances and the CLI,
 * whose data dirs hold other keys (or none), and secrets sealed under a fresh key would open nowhere
 * else. A key already in the data dir is still used there.
 *
 * `stored`: a secret the data dir's database (`file`) already holds, sealed under some key, if any
 * (see `openSealedStore`): then none is generated either, as a fresh key would open none of them
 * (its master.key deleted or lost, the database copied without it, or its secrets stored under a
 * SLUICE_MASTER_KEY now unset), and a key file written then would be taken for theirs by every later
 * start. The refusal names SLUICE_MASTER_KEY and the data dir, and nothing is written.
 */
export function loadMasterKey(
  source: MasterKeySource,
  onGenerated: (file: string) => void,
  stored?: { secret: string; file: string },
): Buffer {
  const given = readMasterKey(source);
  if (given !== undefined) return given;
  const file = join(source.dataDir, "master.key");
  if (stored !== undefined) {
    throw new Error(
      `SLUICE_MASTER_KEY is unset and SLUICE_DATA_DIR (${source.dataDir}) holds no master.key, but the ` +
        `database there holds secrets sealed under a master key (${stored.secret} among them), which a new ` +
        "key would not open, so none was generated: set SLUICE_MASTER_KEY to the key they were stored " +
        `under, or put that key back in ${file} (if it is lost, so are they: move ${stored.file} aside ` +
        "to start a new database)",
    );
  }
  // A data dir that cannot hold the key (a path through a file, no permission) is named as the setting.
  const key = randomBytes(32);
  const written = inDataDir(source.dataDir, `write the master key file ${file}`, () =>
    writeKeyFile(source.dataDir, file, key),
  );
  if (!written)
    return decodeMasterKey(readKeyFile(source.dataDir, file) ?? "", `The master key file ${file}`);
  onGenerated(file);
  return key;
}

/**
 * The master key `loadMasterKey` would use without generating one: SLUICE_MASTER_KEY, or the data
 * dir's master.key. Undefined when it would generate one; what it refuses (production, or
 * DATABASE_URL, without either) throws here too.
 */
export function readMasterKey(source: MasterKeySource): Buffer | undefined {
  if (source.masterKey) return decodeMasterKey(source.masterKey, "SLUICE_MASTER_KEY");
  if (source.environment === "production") throw new Error("SLUICE_MASTER_KEY is required in production");
  const file = join(source.dataDir, "master.key");
  const stored = readKeyFile(source.dataDir, file);
  if (stored !== undefined) return decodeMasterKey(stored, `The master key file ${file}`);
  if (source.databaseUrl) {
    throw new Error(
      `SLUICE_MASTER_KEY is required with DATABASE_URL (there is no ${file}): set the key every instance and the CLI share (a new deployment makes one with \`openssl rand -base64 32\`)`,
    );
  }
  return undefined;
}

/** The key file's text, or undefined when there is none; any other failure names SLUICE_DATA_DIR. */
function readKeyFile(dataDir: string, file: string): string | undefined {
  try {
    return readFileSync(file, "utf8").trim();
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw dataDirError(dataDir, `read the master key file ${file}`, error);
  }
}

/**
 * Writes `key` into `file`, whole under another name, then linked into place: a gateway and a CLI
 * command starting together on a fresh data dir both end up with the one key, and neither reads a
 * half-written file. False when another process generated it first (that one is used).
 */
function writeKeyFile(dataDir: string, file: string, key: Buffer): boolean {
  makeDirectorySync(dataDir, 0o700);
  const draft = `${file}.${process.pid}.${randomBytes(6).toString("hex")}`;
  writeFileSync(draft, `${key.toString("base64")}\n`, { mode: 0o600, flag: "wx" });
  try {
    linkSync(draft, file);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    return false;
  } finally {
    unlinkSync(draft);
  }
}

/**
 * SLUICE_MASTER_KEY_PREVIOUS decoded, or undefined when no rotation is under way. Config accepts it
 * only beside SLUICE_MASTER_KEY, so it never stands beside a key generated into the data dir.
 */
export function loadPreviousMasterKey(source: MasterKeySource): Buffer | undefined {
  return source.masterKeyPrevious
    ? decodeMasterKey(source.masterKeyPrevious, "SLUICE_MASTER_KEY_PREVIOUS")
    : undefined;
}

/**
 * Where `loadMasterKey` takes the key from, for a message about it: its name, and how to give the
 * right one back (beside SLUICE_MASTER_KEY, the data dir's master.key when it holds another key).
 */
export function masterKeyOrigin(source: MasterKeySource): { doesNotOpen: string; restore: string } {
  const restore = "set SLUICE_MASTER_KEY to the key the database's secrets were stored under";
  if (source.masterKey && source.masterKeyPrevious)
    return {
      doesNotOpen: "Neither SLUICE_MASTER_KEY nor SLUICE_MASTER_KEY_PREVIOUS opens",
      restore: `${restore}, or SLUICE_MASTER_KEY_PREVIOUS to it during a rotation${keyFileHint(source)}`,
    };
  if (source.masterKey)
    return { doesNotOpen: "SLUICE_MASTER_KEY does not open", restore: `${restore}${keyFileHint(source)}` };
  const file = join(source.dataDir, "master.key");
  return {
    doesNotOpen: `The master key file ${file} (SLUICE_MASTER_KEY is unset) does not open`,
    restore: `${restore}, or put that key back in ${file}`,
  };
}

/**
 * Beside a given SLUICE_MASTER_KEY, which a start then uses alone: the data dir's master.key when
 * it holds another valid key (one a start outside production generated, most likely the key the
 * secrets were stored under), named with how to pass it; never the key itself. Empty otherwise.
 */
function keyFileHint(source: MasterKeySource): string {
  const beside = keyFileBeside(source, [source.masterKey, source.masterKeyPrevious]);
  if (beside?.holds !== "another key") return "";
  const { file } = beside;
  return ` (${file}, generated by an earlier start outside production, holds another key, likely that one: export SLUICE_MASTER_KEY=$(cat ${file}))`;
}

/**
 * What the data dir's master.key holds beside the keys given as settings (`given`, base64): one of
 * them, another valid key, or no key. Undefined without the file, or when it cannot be read: a hint
 * or a warning is no reason to fail. The keys decoded only to compare are wiped, as loadMasterKey's
 * callers wipe theirs (the file's text, a string, cannot be).
 */
function keyFileBeside(
  source: MasterKeySource,
  given: readonly (string | undefined)[],
): { file: string; holds: "a given key" | "another key" | "no key" } | undefined {
  const file = join(source.dataDir, "master.key");
  let text: string | undefined;
  try {
    text = readKeyFile(source.dataDir, file);
  } catch {
    return undefined;
  }
  if (text === undefined) return undefined;
  const stored = Buffer.from(text, "base64");
  const keys = given.flatMap((key) => (key ? [Buffer.from(key, "base64")] : []));
  const holds =
    stored.length !== 32 ? "no key" : keys.some((key) => key.equals(stored)) ? "a given key" : "another key";
  for (const key of [stored, ...keys]) key.fill(0);
  return { file, holds };
}

/**
 * Beside a given SLUICE_MASTER_KEY, which a start uses alone: the warning that the data dir's
 * master.key is ignored, when it holds another key (one a start outside production generated, the
 * key a rotation retired) or none, so that no operator takes it for the key in use. It names the
 * file, never either key. Undefined without SLUICE_MASTER_KEY, without the file, when it holds that
 * key, or when it cannot be read (a start that does not use it is not failed by it).
 */
export function ignoredKeyFileWarning(
  source: MasterKeySource,
): { file: string; message: string } | undefined {
  if (!source.masterKey) return undefined;
  const beside = keyFileBeside(source, [source.masterKey]);
  if (beside === undefined || beside.holds === "a given key") return undefined;
  const { file } = beside;
  return {
    file,
    message:
      `SLUICE_MASTER_KEY is set, so the master key file ${file} is ignored: it does not hold that key ` +
      "(it may be one a start without SLUICE_MASTER_KEY generated there, or the key a rotation retired), " +
      "and secrets are sealed under SLUICE_MASTER_KEY. Move it out of the data dir (keep it only as long " +
      "as a backup of the database needs it), so that no one takes it for the key in use",
  };
}

/** The key decoded into memory of its own: it is held for the life of the process. */
function decodeMasterKey(value: string, origin: string): Buffer {
  const key = Buffer.from(value, "base64");
  if (key.length !== 32) {
    key.fill(0);
    throw new Error(`${origin} must be 32 bytes, base64-encoded`);
  }
  return unpooledCopy(key);
}

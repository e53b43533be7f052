import type { Kysely } from "kysely";
import { providerKeyAad } from "../admin/project-admin.js";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { Database } from "../storage/schema.js";
import { type SealedSecretSample, sealedSecretSamples } from "../storage/sealed-secret-sample.js";
import { type MasterKeySource, masterKeyOrigin } from "./master-key.js";
import type { SecretBox } from "./secret-box.js";

/** The AAD a stored secret was sealed with: it binds the secret to its row (see secret-box.ts). */
export function sealedSecretAad(secret: SealedSecretSample): string {
  return secret.kind === "provider-key"
    ? providerKeyAad(secret.projectId, secret.keyId)
    : deviceCheckKeyAad(secret.projectId);
}

/** A stored secret as messages name it. */
export function sealedSecretName(secret: SealedSecretSample): string {
  return secret.kind === "provider-key"
    ? `provider key ${secret.keyId} of project ${secret.projectId}`
    : `the DeviceCheck key of project ${secret.projectId}`;
}

/**
 * The master key does not open the secrets the database holds: they were sealed under another one
 * (SLUICE_MASTER_KEY changed, or another data dir's master.key). Raised at start, by the gateway and
 * the CLI alike, rather than answering every authenticated call 500 and sealing new secrets under a
 * key the stored ones do not share.
 */
export class MasterKeyMismatchError extends Error {
  override name = "MasterKeyMismatchError";
}

/**
 * Opens `samples` (a few stored secrets, see `sealedSecretSamples`) with `secretBox`. None opening
 * throws a `MasterKeyMismatchError` naming `keyOrigin` (see `masterKeyOrigin`) and the newest secret.
 * When some open, the key is the right one and those that do not are damaged rows: they are
 * returned, to be warned about (each fails only its own calls). During a rotation `secretBox` holds
 * the previous key too (SLUICE_MASTER_KEY_PREVIOUS), and a secret opens under either: a store only
 * partly re-sealed passes. No samples (a database without secrets) pass.
 */
export function checkMasterKey(
  secretBox: SecretBox,
  samples: readonly SealedSecretSample[],
  keyOrigin: { doesNotOpen: string; restore: string },
): string[] {
  const unopened: string[] = [];
  for (const sample of samples) {
    try {
      secretBox.open(sample.sealed, sealedSecretAad(sample)).fill(0);
    } catch {
      unopened.push(sealedSecretName(sample));
    }
  }
  if (samples.length > 0 && unopened.length === samples.length) {
    // Not chained: the cipher's own error ("unable to authenticate data") says no more than this.
    throw new MasterKeyMismatchError(
      `${keyOrigin.doesNotOpen} the secrets stored in the database (${unopened[0]} was sealed under ` +
        `another master key): ${keyOrigin.restore}`,
    );
  }
  return unopened;
}

/**
 * What the gateway's start and each CLI command run once the database is open, before anything is
 * sealed (the projects file, an admin command): `checkMasterKey` on a few secrets the database
 * holds. Returns the secrets that did not open though others did (damaged rows), to be warned about.
 */
export async function checkMasterKeyOpensDatabase(
  db: Kysely<Database>,
  secretBox: SecretBox,
  source: MasterKeySource,
): Promise<string[]> {
  return checkMasterKey(secretBox, await sealedSecretSamples(db), masterKeyOrigin(source));
}

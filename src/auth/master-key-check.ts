import type { Kysely } from "kysely";
import { formerProviderKeyAad, providerKeyAad } from "../admin/project-admin.js";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { Database } from "../storage/schema.js";
import { type SealedSecretSample, sealedSecretSamples } from "../storage/sealed-secret-sample.js";
import { type MasterKeySource, masterKeyOrigin } from "./master-key.js";
import type { SecretBox } from "./secret-box.js";

/**
 * The AAD a stored secret is sealed with, which binds it to its row (see secret-box.ts), and the one
 * it may have been sealed with before that AAD named its provider (decision 0053).
 */
export function sealedSecretAads(secret: SealedSecretSample): [aad: string, formerAad?: string] {
  return secret.kind === "provider-key"
    ? [
        providerKeyAad(secret.projectId, secret.provider, secret.keyId),
        formerProviderKeyAad(secret.projectId, secret.keyId),
      ]
    : [deviceCheckKeyAad(secret.projectId)];
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
 * partly re-sealed passes. No samples (a database without secrets) pass. A revoked provider key's
 * share (read during a rotation) takes no part in that: it is never opened again. `underPrevious`
 * counts the samples, revoked shares included, that only the previous key opens: those that still
 * need it (`sluice master-key reseal` would move them, and also shares under the current key sealed
 * before their AAD named the provider, which do not).
 */
function checkMasterKey(
  secretBox: SecretBox,
  samples: readonly (SealedSecretSample & { revoked?: true })[],
  /** Asked only for the refusal's message (it may read the data dir's key file for a hint). */
  keyOrigin: () => { doesNotOpen: string; restore: string },
): { damaged: string[]; underPrevious: number } {
  const unopened: string[] = [];
  let live = 0;
  let underPrevious = 0;
  for (const sample of samples) {
    if (!sample.revoked) live++;
    try {
      // Whether the previous key is still needed for it; it throws when neither key opens it.
      if (secretBox.keyOpening(sample.sealed, ...sealedSecretAads(sample)) === "previous") underPrevious++;
    } catch {
      if (!sample.revoked) unopened.push(sealedSecretName(sample));
    }
  }
  if (live > 0 && unopened.length === live) {
    const { doesNotOpen, restore } = keyOrigin();
    // Not chained: the cipher's own error ("unable to authenticate data") says no more than this.
    throw new MasterKeyMismatchError(
      `${doesNotOpen} the secrets stored in the database (${unopened[0]} was sealed under ` +
        `another master key): ${restore}`,
    );
  }
  return { damaged: unopened, underPrevious };
}

/** What the start check found, beyond refusing a key that opens none of the stored secrets. */
export interface MasterKeyCheck {
  /** Stored secrets that did not open though others did (damaged rows), to be warned about. */
  damaged: string[];
  /**
   * SLUICE_MASTER_KEY_PREVIOUS is set and no stored secret opens under it alone any more (the
   * reseal has moved them all): it should be removed (`previousKeyUnneededWarning`).
   */
  previousKeyUnneeded: boolean;
}

/**
 * What the gateway's start logs and each CLI command prints when `previousKeyUnneeded`. It names the
 * setting, never a key.
 */
export const previousKeyUnneededWarning =
  "SLUICE_MASTER_KEY_PREVIOUS is set, but every stored secret opens under SLUICE_MASTER_KEY " +
  "(sluice master-key reseal has moved them all), so none needs it any more: remove " +
  "SLUICE_MASTER_KEY_PREVIOUS from the environment of every instance and the CLI, as a retired key " +
  "left there keeps old backups and leaked copies of the database decryptable";

/**
 * What the gateway's start and each CLI command run once the database is open, before anything is
 * sealed (the projects file, an admin command): `checkMasterKey` on a few secrets the database
 * holds, or on every one during a rotation (SLUICE_MASTER_KEY_PREVIOUS set), so that the same pass
 * tells whether any still needs the previous key (a sample holds the newest secrets, those sealed
 * under the new key since the rotation began). The secrets are few: a row per provider key and
 * per project.
 */
export async function checkMasterKeyOpensDatabase(
  db: Kysely<Database>,
  secretBox: SecretBox,
  source: MasterKeySource,
): Promise<MasterKeyCheck> {
  const rotating = Boolean(source.masterKeyPrevious);
  const { damaged, underPrevious } = checkMasterKey(
    secretBox,
    await sealedSecretSamples(db, rotating ? "all" : 3),
    () => masterKeyOrigin(source),
  );
  return { damaged, previousKeyUnneeded: rotating && underPrevious === 0 };
}

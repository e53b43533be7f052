import type { Kysely } from "kysely";
import type { Database } from "../storage/schema.js";
import { type ResealCounts, resealStoredSecrets } from "../storage/sealed-secret-reseal.js";
import type { MasterKeySource } from "./master-key.js";
import { MasterKeyMismatchError, sealedSecretAads, sealedSecretName } from "./master-key-check.js";
import type { SecretBox } from "./secret-box.js";

/**
 * What `sluice master-key reseal` says at its end, after its counts, when SLUICE_MASTER_KEY_PREVIOUS
 * is set: the run has moved every secret it opens, so the old key opens nothing the store still
 * needs, and should go. Names the settings, never a key.
 */
export const resealedUnderCurrentKey =
  "every secret now opens under SLUICE_MASTER_KEY; remove SLUICE_MASTER_KEY_PREVIOUS from the " +
  "environment (of every instance and the CLI: a retired key left there keeps old backups and " +
  "leaked copies of the database decryptable)";

/**
 * `sluice master-key reseal`: every secret the database holds that only SLUICE_MASTER_KEY_PREVIOUS
 * opens is sealed again under SLUICE_MASTER_KEY, with the AAD of its row (its project, provider and
 * key id), in one transaction, and so is a server share sealed before that AAD named its provider
 * (decision 0053). Secrets already under the current key and AAD are left, so a second run writes nothing.
 * A secret neither key opens fails the run before anything is written, naming it (never a key), but
 * a revoked provider key's share is only counted: it is never opened again, and could not be
 * revoked any further to let the run finish.
 */
export function resealSecrets(
  db: Kysely<Database>,
  secretBox: SecretBox,
  source: MasterKeySource,
  now: () => Date = () => new Date(),
): Promise<ResealCounts> {
  const keys = source.masterKeyPrevious
    ? "opens under neither SLUICE_MASTER_KEY nor SLUICE_MASTER_KEY_PREVIOUS"
    : "does not open under SLUICE_MASTER_KEY (SLUICE_MASTER_KEY_PREVIOUS is unset)";
  return resealStoredSecrets(
    db,
    (secret, revoked) => {
      try {
        return secretBox.reseal(secret.sealed, ...sealedSecretAads(secret));
      } catch {
        if (revoked) return "unopened";
        // Not chained: the cipher's own error ("unable to authenticate data") says no more than this.
        throw new MasterKeyMismatchError(
          `${sealedSecretName(secret)} ${keys}: nothing was re-sealed (${
            secret.kind === "provider-key" ? "revoke that key" : "set that project's DeviceCheck key again"
          }, or set the key it was sealed under)`,
        );
      }
    },
    now,
  );
}

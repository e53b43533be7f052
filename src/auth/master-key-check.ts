import type { Kysely } from "kysely";
import { providerKeyAad } from "../admin/project-admin.js";
import { deviceCheckKeyAad } from "../admin/project-rules.js";
import type { Database } from "../storage/schema.js";
import { type SealedSecretSample, sealedSecretSample } from "../storage/sealed-secret-sample.js";
import { type MasterKeySource, masterKeyOrigin } from "./master-key.js";
import type { SecretBox } from "./secret-box.js";

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
 * Opens `sample` (one stored secret, see `sealedSecretSample`) with `secretBox`; throws a
 * `MasterKeyMismatchError` naming `keyOrigin` (see `masterKeyOrigin`) when it does not open. There
 * is one master key at a time (no rotation): every stored secret is sealed under it. No sample (a
 * database without secrets) passes.
 */
export function checkMasterKey(
  secretBox: SecretBox,
  sample: SealedSecretSample | undefined,
  keyOrigin: { name: string; restore: string },
): void {
  if (!sample) return;
  const [aad, what] =
    sample.kind === "provider-key"
      ? [
          providerKeyAad(sample.projectId, sample.keyId),
          `provider key ${sample.keyId} of project ${sample.projectId}`,
        ]
      : [deviceCheckKeyAad(sample.projectId), `the DeviceCheck key of project ${sample.projectId}`];
  try {
    secretBox.open(sample.sealed, aad).fill(0);
  } catch {
    // Not chained: the cipher's own error ("unable to authenticate data") says no more than this.
    throw new MasterKeyMismatchError(
      `${keyOrigin.name} does not open the secrets stored in the database (${what} was sealed under ` +
        `another master key): ${keyOrigin.restore}`,
    );
  }
}

/**
 * What the gateway's start and each CLI command run once the database is open, before anything is
 * sealed (the projects file, an admin command): `checkMasterKey` on one secret the database holds.
 */
export async function checkMasterKeyOpensDatabase(
  db: Kysely<Database>,
  secretBox: SecretBox,
  source: MasterKeySource,
): Promise<void> {
  checkMasterKey(secretBox, await sealedSecretSample(db), masterKeyOrigin(source));
}

import type { Kysely } from "kysely";
import type { Database } from "./schema.js";
import { type SealedSecretSample, sealedSecretSamples } from "./sealed-secret-sample.js";

/** What `resealStoredSecrets` did, by table. */
export interface ResealCounts {
  providerKeys: { resealed: number; alreadyCurrent: number; unopenedRevoked: number };
  deviceCheckKeys: { resealed: number; alreadyCurrent: number };
}

/**
 * What `resealStoredSecrets` asks of each stored secret: its new sealed form, undefined when it is
 * already under the current key, or "unopened" when no key opens it (only asked of a revoked
 * provider key's share, which is never opened again; any other secret throws instead).
 */
export type ResealOne = (secret: SealedSecretSample, revoked: boolean) => string | undefined | "unopened";

/** A secret that changed between the reseal's read and its write: the transaction is undone. */
class ResealRaceError extends Error {
  override name = "ResealRaceError";
}

/**
 * Every sealed secret the database holds, sealed again by `reseal`, in one transaction: each is
 * worked out before anything is written, so one that throws (opens under no key) writes nothing.
 * A write only lands on the value it read (and, for a project, its updated_at, which it moves
 * forward as every project write does), so an admin change made meanwhile is never undone: it
 * fails the run instead, and nothing is written; running it again finishes the work.
 */
export async function resealStoredSecrets(
  db: Kysely<Database>,
  reseal: ResealOne,
  now: () => Date,
): Promise<ResealCounts> {
  return db.transaction().execute(async (transaction) => {
    const counts: ResealCounts = {
      providerKeys: { resealed: 0, alreadyCurrent: 0, unopenedRevoked: 0 },
      deviceCheckKeys: { resealed: 0, alreadyCurrent: 0 },
    };
    const keyWrites: Array<{ id: string; from: string; to: string }> = [];
    const projectWrites: Array<{ id: string; from: string; to: string; updatedAt: string }> = [];
    for (const secret of await sealedSecretSamples(transaction, "all")) {
      if (secret.kind === "provider-key") {
        const next = reseal(secret, secret.revoked === true);
        if (next === "unopened") counts.providerKeys.unopenedRevoked++;
        else if (next === undefined) counts.providerKeys.alreadyCurrent++;
        else keyWrites.push({ id: secret.keyId, from: secret.sealed, to: next });
      } else {
        const next = reseal(secret, false);
        if (next === undefined || next === "unopened") counts.deviceCheckKeys.alreadyCurrent++;
        else
          projectWrites.push({
            id: secret.projectId,
            from: secret.sealed,
            to: next,
            updatedAt: secret.updatedAt,
          });
      }
    }
    for (const write of keyWrites) {
      const result = await transaction
        .updateTable("provider_keys")
        .set({ server_share: write.to })
        .where("id", "=", write.id)
        .where("server_share", "=", write.from)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) throw raced(`provider key ${write.id}`);
      counts.providerKeys.resealed++;
    }
    for (const write of projectWrites) {
      const updatedAt = new Date(Math.max(now().getTime(), Date.parse(write.updatedAt) + 1)).toISOString();
      const result = await transaction
        .updateTable("projects")
        .set({ device_check_private_key: write.to, updated_at: updatedAt })
        .where("id", "=", write.id)
        .where("updated_at", "=", write.updatedAt)
        .where("device_check_private_key", "=", write.from)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) === 0) throw raced(`project ${write.id}`);
      counts.deviceCheckKeys.resealed++;
    }
    return counts;
  });
}

function raced(what: string): ResealRaceError {
  return new ResealRaceError(`${what} changed during the reseal: nothing was re-sealed; run it again`);
}

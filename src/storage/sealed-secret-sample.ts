import type { Kysely } from "kysely";
import type { Database } from "./schema.js";

/** One secret the database holds sealed under the master key, with what its AAD is made of. */
export type SealedSecretSample =
  | { kind: "provider-key"; projectId: string; provider: string; keyId: string; sealed: string }
  | { kind: "device-check-key"; projectId: string; sealed: string };

/**
 * A secret as it is read from its row: a revoked provider key's share is marked so, and a
 * DeviceCheck key carries its project's `updated_at` (the reseal writes only on the value it read).
 */
export type StoredSealedSecret =
  | (Extract<SealedSecretSample, { kind: "provider-key" }> & { revoked?: true })
  | (Extract<SealedSecretSample, { kind: "device-check-key" }> & { updatedAt: string });

/**
 * A few secrets the database holds: the server shares of the newest `keys` provider keys that are
 * not revoked, and the newest project's DeviceCheck private key; empty when it holds none (a new
 * database). A revoked key's share is never opened again, so it says nothing of the key the gateway
 * needs. Several, so that one damaged row is not taken for the wrong master key.
 *
 * `keys` "all": every secret instead, newest first as above, revoked keys' shares too (marked), and
 * every project's DeviceCheck key. What `sluice master-key reseal` moves, and what the start check
 * reads during a rotation, to tell whether any secret still needs the previous key: the newest
 * ones, which a sample holds, are those sealed under the new key since the rotation began, so a
 * sample would call the previous key unneeded too soon.
 */
export async function sealedSecretSamples(
  db: Kysely<Database>,
  keys: number | "all" = 3,
): Promise<StoredSealedSecret[]> {
  const all = keys === "all";
  let providerKeys = db
    .selectFrom("provider_keys")
    .select(["id", "project_id", "provider", "server_share", "revoked_at"])
    .orderBy("created_at", "desc")
    .orderBy("id", "desc");
  if (!all) providerKeys = providerKeys.where("revoked_at", "is", null).limit(keys);
  const samples: StoredSealedSecret[] = (await providerKeys.execute()).map((key) => ({
    kind: "provider-key",
    projectId: key.project_id,
    provider: key.provider,
    keyId: key.id,
    sealed: key.server_share,
    ...(key.revoked_at !== null ? { revoked: true as const } : {}),
  }));
  let projects = db
    .selectFrom("projects")
    .select(["id", "device_check_private_key", "updated_at"])
    .where("device_check_private_key", "is not", null)
    .orderBy("updated_at", "desc")
    .orderBy("id", "desc");
  if (!all) projects = projects.limit(1);
  for (const project of await projects.execute())
    if (project.device_check_private_key)
      samples.push({
        kind: "device-check-key",
        projectId: project.id,
        sealed: project.device_check_private_key,
        updatedAt: project.updated_at,
      });
  return samples;
}

import type { Kysely } from "kysely";
import type { Database } from "./schema.js";

/** One secret the database holds sealed under the master key, with what its AAD is made of. */
export type SealedSecretSample =
  | { kind: "provider-key"; projectId: string; keyId: string; sealed: string }
  | { kind: "device-check-key"; projectId: string; sealed: string };

/**
 * A few secrets the database holds: the server shares of the newest `keys` provider keys that are
 * not revoked, and the newest project's DeviceCheck private key; empty when it holds none (a new
 * database). A revoked key's share is never opened again, so it says nothing of the key the gateway
 * needs. Several, so that one damaged row is not taken for the wrong master key.
 */
export async function sealedSecretSamples(db: Kysely<Database>, keys = 3): Promise<SealedSecretSample[]> {
  const samples: SealedSecretSample[] = (
    await db
      .selectFrom("provider_keys")
      .select(["id", "project_id", "server_share"])
      .where("revoked_at", "is", null)
      .orderBy("created_at", "desc")
      .orderBy("id", "desc")
      .limit(keys)
      .execute()
  ).map((key) => ({
    kind: "provider-key",
    projectId: key.project_id,
    keyId: key.id,
    sealed: key.server_share,
  }));
  const project = await db
    .selectFrom("projects")
    .select(["id", "device_check_private_key"])
    .where("device_check_private_key", "is not", null)
    .orderBy("updated_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
  if (project?.device_check_private_key)
    samples.push({
      kind: "device-check-key",
      projectId: project.id,
      sealed: project.device_check_private_key,
    });
  return samples;
}

import type { Kysely } from "kysely";
import type { Database } from "./schema.js";

/** One secret the database holds sealed under the master key, with what its AAD is made of. */
export type SealedSecretSample =
  | { kind: "provider-key"; projectId: string; keyId: string; sealed: string }
  | { kind: "device-check-key"; projectId: string; sealed: string };

/**
 * The server share of the newest provider key that is not revoked, else the newest project's
 * DeviceCheck private key; undefined when the database holds neither (a new one). A revoked key's
 * share is never opened again, so it says nothing of the key the gateway needs. One row each.
 */
export async function sealedSecretSample(db: Kysely<Database>): Promise<SealedSecretSample | undefined> {
  const key = await db
    .selectFrom("provider_keys")
    .select(["id", "project_id", "server_share"])
    .where("revoked_at", "is", null)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
  if (key)
    return { kind: "provider-key", projectId: key.project_id, keyId: key.id, sealed: key.server_share };
  const project = await db
    .selectFrom("projects")
    .select(["id", "device_check_private_key"])
    .where("device_check_private_key", "is not", null)
    .orderBy("updated_at", "desc")
    .orderBy("id", "desc")
    .limit(1)
    .executeTakeFirst();
  if (!project?.device_check_private_key) return undefined;
  return { kind: "device-check-key", projectId: project.id, sealed: project.device_check_private_key };
}

import { join } from "node:path";
import type { SecretBox } from "../auth/secret-box.js";
import type { Config } from "../config.js";
import { createLocalVault } from "./local-vault.js";
import { createS3Vault } from "./s3-vault.js";
import { createUrlSigner, type UrlSigner } from "./signed-url.js";
import type { VaultStore } from "./vault-store.js";

/**
 * The vault generated images are saved to: S3-compatible storage when all of its settings are
 * given, else the local directory under the data dir, whose signed URLs Sluice serves itself. Its
 * URLs start with SLUICE_PUBLIC_URL, else `listening()`: the address the server listens on, read
 * when a URL is signed (with PORT=0 the port is known only then). `now` is the gateway's clock: the local
 * vault's URLs expire by it, as the cache lifetime they are served with is counted by it; none
 * outlives SLUICE_VAULT_URL_TTL_SECONDS from its signing, whatever TTL it was signed with.
 */
export function chooseVault(
  config: Config,
  secretBox: SecretBox,
  listening: () => string,
  now: () => Date,
): { vault: VaultStore; localVault: ReturnType<typeof createLocalVault>; signer: UrlSigner } {
  const publicUrl = () => config.publicUrl ?? listening();
  const signer = createUrlSigner(
    secretBox.deriveKey("vault-url-signing"),
    () => now().getTime(),
    secretBox.derivePreviousKey("vault-url-signing"),
    config.vaultUrlTtlSeconds,
  );
  const localVault = createLocalVault({ directory: join(config.dataDir, "vault"), publicUrl, signer });
  const vault =
    config.vaultS3Endpoint &&
    config.vaultS3Bucket &&
    config.vaultS3AccessKeyId &&
    config.vaultS3SecretAccessKey
      ? createS3Vault({
          endpoint: config.vaultS3Endpoint,
          bucket: config.vaultS3Bucket,
          region: config.vaultS3Region,
          accessKeyId: config.vaultS3AccessKeyId,
          secretAccessKey: config.vaultS3SecretAccessKey,
        })
      : localVault;
  return { vault, localVault, signer };
}

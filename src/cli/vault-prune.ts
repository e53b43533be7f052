import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { givenOnce } from "../admin/project-input.js";
import type { Config } from "../config.js";
import {
  isCalendarDate,
  pruneLocalVault,
  type VaultPruneResult,
  vaultPruneProblem,
} from "../images/vault-retention.js";
import { checkInput } from "./check-input.js";
import type { Flags } from "./parse-command-line.js";
import { UsageError } from "./usage-error.js";

/** `sluice vault prune`'s flag: a UTC date, since the vault keeps its images in a directory a day. */
const vaultPruneInput = z
  .object({
    before: z
      .string({ error: givenOnce })
      .refine(isCalendarDate, "must be a date (2026-11-01, UTC): the vault keeps its images by the day"),
  })
  .strict();

/**
 * `sluice vault prune --before DATE`: deletes the local vault's images of the days before DATE
 * (vault-retention.ts). It reads the vault directory and the settings alone, never the database or
 * the master key, so it runs beside a running gateway on any engine. A date whose images a signed
 * URL may still reach (SLUICE_VAULT_URL_TTL_SECONDS, as this command's environment sets it) is a
 * usage error. The S3 vault is not pruned here: its bucket's lifecycle rule does it.
 */
export async function pruneVault(
  flags: Flags,
  settings: () => Config,
  warn: (message: string) => void,
): Promise<VaultPruneResult> {
  checkInput(vaultPruneInput, { before: flags.before }, "vault prune", (path) => `--${path}`);
  const { before } = vaultPruneInput.parse({ before: flags.before });
  const config = settings();
  const problem = vaultPruneProblem(before, new Date(), config.vaultUrlTtlSeconds, config.vaultTimeoutMs);
  if (problem) throw new UsageError(`--before: ${problem}`);
  if (config.vaultS3Endpoint)
    warn(
      "the S3 vault (SLUICE_VAULT_S3_ENDPOINT) is not pruned by Sluice: set a lifecycle rule on the bucket (docs/images.md); only the local vault directory, which holds the images stored before the S3 vault was set, is pruned",
    );
  const directory = join(config.dataDir, "vault");
  if (!existsSync(directory))
    warn(
      `there is no local vault directory at ${directory} (SLUICE_DATA_DIR/vault): no image was stored there yet, or SLUICE_DATA_DIR is not the gateway's`,
    );
  return pruneLocalVault(directory, before);
}

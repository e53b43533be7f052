import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export interface MasterKeySource {
  masterKey?: string | undefined;
  dataDir: string;
  environment: string;
}

/**
 * The master key from config, or (embedded default, not production) the one generated into the
 * data dir on first start. `onGenerated` lets the caller log loudly; the key itself is never logged.
 */
export function loadMasterKey(source: MasterKeySource, onGenerated: (file: string) => void): Buffer {
  if (source.masterKey) return decodeMasterKey(source.masterKey);
  if (source.environment === "production") throw new Error("SLUICE_MASTER_KEY is required in production");
  const file = join(source.dataDir, "master.key");
  try {
    return decodeMasterKey(readFileSync(file, "utf8").trim());
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
  }
  mkdirSync(source.dataDir, { recursive: true });
  const key = randomBytes(32);
  writeFileSync(file, `${key.toString("base64")}\n`, { mode: 0o600, flag: "wx" });
  onGenerated(file);
  return key;
}

function decodeMasterKey(value: string): Buffer {
  const key = Buffer.from(value, "base64");
  if (key.length !== 32) throw new Error("SLUICE_MASTER_KEY must be 32 bytes, base64-encoded");
  return key;
}

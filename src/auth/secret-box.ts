import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

/**
 * AES-256-GCM sealing of secrets at rest. Sealed form: `v1.<base64url(iv | tag | ciphertext)>`.
 * The AAD binds a sealed value to its owner (e.g. project and key id), so a value copied to
 * another row does not open.
 */
export interface SecretBox {
  seal(plaintext: Buffer, aad: string): string;
  open(sealed: string, aad: string): Buffer;
  /** A 32-byte key for `label` derived from the master key (HKDF-SHA256, RFC 5869). */
  deriveKey(label: string): Buffer;
}

const ivBytes = 12;
const tagBytes = 16;

export function createSecretBox(masterKey: Buffer): SecretBox {
  if (masterKey.length !== 32) throw new Error("The master key must be 32 bytes");
  // A private copy: the caller may wipe its buffer once the box is built.
  const key = Buffer.from(masterKey);
  return {
    deriveKey: (label) => Buffer.from(hkdfSync("sha256", key, Buffer.alloc(0), `sluice:${label}`, 32)),
    seal(plaintext, aad) {
      const iv = randomBytes(ivBytes);
      const cipher = createCipheriv("aes-256-gcm", key, iv);
      cipher.setAAD(Buffer.from(aad, "utf8"));
      const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
      return `v1.${Buffer.concat([iv, cipher.getAuthTag(), ciphertext]).toString("base64url")}`;
    },
    open(sealed, aad) {
      if (!sealed.startsWith("v1.")) throw new Error("Unknown sealed-secret format");
      const raw = Buffer.from(sealed.slice(3), "base64url");
      if (raw.length < ivBytes + tagBytes) throw new Error("Sealed secret is truncated");
      const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, ivBytes));
      decipher.setAAD(Buffer.from(aad, "utf8"));
      decipher.setAuthTag(raw.subarray(ivBytes, ivBytes + tagBytes));
      return Buffer.concat([decipher.update(raw.subarray(ivBytes + tagBytes)), decipher.final()]);
    },
  };
}

import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from "node:crypto";

/**
 * AES-256-GCM sealing of secrets at rest. Sealed form: `v1.<base64url(iv | tag | ciphertext)>`.
 * The AAD binds a sealed value to its place (e.g. project, provider and key id), so a value copied
 * to another row, or left in a row whose owner or provider was rewritten, does not open.
 *
 * During a master key rotation the box also holds the previous key (SLUICE_MASTER_KEY_PREVIOUS):
 * it seals under the current key only, and opens what either key sealed, so secrets stored before
 * the rotation keep working until `sluice master-key reseal` has moved them to the current key.
 */
export interface SecretBox {
  seal(plaintext: Buffer, aad: string): string;
  /**
   * `formerAad`: the AAD such a value was sealed with before its AAD bound more of its place
   * (decision 0053), tried after `aad` fails, so values stored before still open.
   */
  open(sealed: string, aad: string, formerAad?: string): Buffer;
  /**
   * `sealed` sealed again under the current key and `aad` when only the previous key or only
   * `formerAad` opens it; undefined when the current key opens it under `aad`. Throws when nothing does.
   */
  reseal(sealed: string, aad: string, formerAad?: string): string | undefined;
  /** Whether the current key opens `sealed` (under either AAD) or only the previous one does; throws when neither. */
  keyOpening(sealed: string, aad: string, formerAad?: string): "current" | "previous";
  /** A 32-byte key for `label` derived from the (current) master key (HKDF-SHA256, RFC 5869). */
  deriveKey(label: string): Buffer;
  /** The same from the previous key, during a rotation (what it signed still verifies); else undefined. */
  derivePreviousKey(label: string): Buffer | undefined;
}

const ivBytes = 12;
const tagBytes = 16;

export function createSecretBox(masterKey: Buffer, previousKey?: Buffer): SecretBox {
  if (masterKey.length !== 32) throw new Error("The master key must be 32 bytes");
  if (previousKey !== undefined && previousKey.length !== 32)
    throw new Error("The previous master key must be 32 bytes");
  // Private copies: the caller may wipe its buffers once the box is built.
  const key = Buffer.from(masterKey);
  const previous = previousKey === undefined ? undefined : Buffer.from(previousKey);
  const seal = (plaintext: Buffer, aad: string) => {
    const iv = randomBytes(ivBytes);
    const cipher = createCipheriv("aes-256-gcm", key, iv);
    cipher.setAAD(Buffer.from(aad, "utf8"));
    const ciphertext = Buffer.concat([cipher.update(plaintext), cipher.final()]);
    return `v1.${Buffer.concat([iv, cipher.getAuthTag(), ciphertext]).toString("base64url")}`;
  };
  /**
   * The plaintext, whether the current key opened it and whether `aad` (not `formerAad`) did;
   * throws the current key's error under `aad` when nothing does.
   */
  const openAny = (
    sealed: string,
    aad: string,
    formerAad: string | undefined,
  ): { plaintext: Buffer; current: boolean; bound: boolean } => {
    let first: unknown;
    for (const [candidate, current] of [
      [key, true],
      [previous, false],
    ] as const) {
      if (candidate === undefined) continue;
      for (const [tried, bound] of [
        [aad, true],
        [formerAad, false],
      ] as const) {
        if (tried === undefined) continue;
        try {
          return { plaintext: openWith(candidate, sealed, tried), current, bound };
        } catch (error) {
          first ??= error;
        }
      }
    }
    throw first;
  };
  return {
    deriveKey: (label) => derive(key, label),
    derivePreviousKey: (label) => (previous === undefined ? undefined : derive(previous, label)),
    seal,
    open: (sealed, aad, formerAad) => openAny(sealed, aad, formerAad).plaintext,
    reseal(sealed, aad, formerAad) {
      const { plaintext, current, bound } = openAny(sealed, aad, formerAad);
      try {
        return current && bound ? undefined : seal(plaintext, aad);
      } finally {
        plaintext.fill(0);
      }
    },
    keyOpening(sealed, aad, formerAad) {
      const { plaintext, current } = openAny(sealed, aad, formerAad);
      plaintext.fill(0);
      return current ? "current" : "previous";
    },
  };
}

function derive(key: Buffer, label: string): Buffer {
  return Buffer.from(hkdfSync("sha256", key, Buffer.alloc(0), `sluice:${label}`, 32));
}

function openWith(key: Buffer, sealed: string, aad: string): Buffer {
  if (!sealed.startsWith("v1.")) throw new Error("Unknown sealed-secret format");
  const raw = Buffer.from(sealed.slice(3), "base64url");
  if (raw.length < ivBytes + tagBytes) throw new Error("Sealed secret is truncated");
  const decipher = createDecipheriv("aes-256-gcm", key, raw.subarray(0, ivBytes));
  decipher.setAAD(Buffer.from(aad, "utf8"));
  decipher.setAuthTag(raw.subarray(ivBytes, ivBytes + tagBytes));
  return Buffer.concat([decipher.update(raw.subarray(ivBytes + tagBytes)), decipher.final()]);
}

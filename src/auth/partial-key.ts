import { hash, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * The provider-key split (DESIGN.md, Credentials). A provider key K is split into two XOR shares
 * of K's length: the client share C is random, the server share is S = K xor C. Either share alone
 * is uniformly random and says nothing about K. The client gets the partial key
 * `sk_sluice_<keyId>_<base64url(C)>`, which never contains `.`; the server keeps S sealed and a
 * SHA-256 digest of C, so a wrong partial key is refused before any decrypt or upstream call.
 */
export const partialKeyPrefix = "sk_sluice_";
const keyIdPattern = /^[a-z0-9]{12,32}$/;
const sharePattern = /^[A-Za-z0-9_-]+$/;

export interface SplitKey {
  partialKey: string;
  serverShare: Buffer;
  clientShareDigest: string;
}

export interface ParsedPartialKey {
  keyId: string;
  clientShare: Buffer;
}

export function newKeyId(): string {
  return randomBytes(10).toString("hex");
}

export function splitProviderKey(keyId: string, providerKey: string): SplitKey {
  const key = Buffer.from(providerKey, "utf8");
  const clientShare = randomBytes(key.length);
  const serverShare = xor(key, clientShare);
  key.fill(0);
  return {
    partialKey: `${partialKeyPrefix}${keyId}_${clientShare.toString("base64url")}`,
    serverShare,
    clientShareDigest: shareDigest(clientShare),
  };
}

/** Parses a partial key; null when it is not one (no throwing on client input). */
export function parsePartialKey(value: string): ParsedPartialKey | null {
  if (!value.startsWith(partialKeyPrefix) || value.length > 4096) return null;
  const rest = value.slice(partialKeyPrefix.length);
  const separator = rest.indexOf("_");
  if (separator < 0) return null;
  const keyId = rest.slice(0, separator);
  const share = rest.slice(separator + 1);
  if (!keyIdPattern.test(keyId) || share.length === 0 || !sharePattern.test(share)) return null;
  const clientShare = Buffer.from(share, "base64url");
  // Only the spelling Sluice issued: base64url ignores a last character that completes no byte and
  // the unused low bits of the one before it, so `…abd` read as `…abc` and `…a_b_c` as `…a_b_`.
  if (clientShare.toString("base64url") !== share) return null;
  return { keyId, clientShare };
}

export function shareDigest(clientShare: Buffer): string {
  return hash("sha256", clientShare, "hex");
}

/** Constant-time check of a client share against the stored digest. */
export function clientShareMatches(clientShare: Buffer, expectedDigest: string): boolean {
  const actual = hash("sha256", clientShare, "buffer");
  const expected = Buffer.from(expectedDigest, "hex");
  return expected.length === actual.length && timingSafeEqual(actual, expected);
}

/** Rebuilds the provider key in memory; shares of different lengths never combine. */
export function rebuildProviderKey(serverShare: Buffer, clientShare: Buffer): string | null {
  if (serverShare.length !== clientShare.length) return null;
  return xor(serverShare, clientShare).toString("utf8");
}

function xor(left: Buffer, right: Buffer): Buffer {
  const out = Buffer.allocUnsafe(left.length);
  for (let index = 0; index < left.length; index++) out[index] = (left[index] ?? 0) ^ (right[index] ?? 0);
  return out;
}

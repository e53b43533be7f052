import { describe, expect, it } from "vitest";
import {
  clientShareMatches,
  newKeyId,
  parsePartialKey,
  partialKeyPrefix,
  rebuildProviderKey,
  shareDigest,
  splitProviderKey,
} from "./partial-key.js";

const providerKey = "sk-proj-AbCdEf0123456789_abcdefghijklmnopqrstuvwxyz-ZYXWVU";

describe("partial keys", () => {
  it("rebuilds the provider key from the two shares and from nothing else", () => {
    const keyId = newKeyId();
    const split = splitProviderKey(keyId, providerKey);
    const parsed = parsePartialKey(split.partialKey);
    expect(parsed?.keyId).toBe(keyId);
    expect(rebuildProviderKey(split.serverShare, parsed!.clientShare)).toBe(providerKey);
    expect(clientShareMatches(parsed!.clientShare, split.clientShareDigest)).toBe(true);
  });

  it("formats as sk_sluice_<keyId>_<share> without a dot and without the key in it", () => {
    const split = splitProviderKey(newKeyId(), providerKey);
    expect(split.partialKey.startsWith(partialKeyPrefix)).toBe(true);
    expect(split.partialKey).not.toContain(".");
    expect(split.partialKey).not.toContain(providerKey);
    expect(split.serverShare.toString("utf8")).not.toContain(providerKey.slice(0, 8));
  });

  it("gives different shares every time the same key is split", () => {
    const one = splitProviderKey("aaaaaaaaaaaa", providerKey);
    const two = splitProviderKey("aaaaaaaaaaaa", providerKey);
    expect(one.partialKey).not.toBe(two.partialKey);
    expect(one.serverShare.equals(two.serverShare)).toBe(false);
  });

  it("rejects a client share that does not match the digest", () => {
    const split = splitProviderKey(newKeyId(), providerKey);
    const parsed = parsePartialKey(split.partialKey)!;
    const tampered = Buffer.from(parsed.clientShare);
    tampered[0] = (tampered[0] ?? 0) ^ 1;
    expect(clientShareMatches(tampered, split.clientShareDigest)).toBe(false);
    expect(rebuildProviderKey(split.serverShare, tampered.subarray(1))).toBeNull();
  });

  it.each([
    "",
    "sk_sluice_",
    "sk_sluice_short_abc",
    "sk_sluice_aaaaaaaaaaaa_",
    "sk_sluice_aaaaaaaaaaaa_abc.def",
    "sk_sluice_AAAAAAAAAAAA_abc",
    "sk-other_aaaaaaaaaaaa_abc",
    "xx_sluice_aaaaaaaaaaaa_abc",
    "sk_sluice_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa_abc",
    `sk_sluice_aaaaaaaaaaaa_${"a".repeat(5000)}`,
  ])("does not parse %j", (value) => {
    expect(parsePartialKey(value)).toBeNull();
  });

  it("parses a share that holds `_` (base64url uses it) at the first `_` after the key id", () => {
    const parsed = parsePartialKey("sk_sluice_aaaaaaaaaaaa_a_b_");
    expect(parsed?.keyId).toBe("aaaaaaaaaaaa");
    expect(parsed?.clientShare.equals(Buffer.from("a_b_", "base64url"))).toBe(true);
  });

  it("parses only the share's own spelling, not another that decodes to the same bytes", () => {
    const split = splitProviderKey(newKeyId(), providerKey);
    expect(parsePartialKey(split.partialKey)).not.toBeNull();
    // A share of 3n+1 bytes ends in a character with four unused bits; 3n+2 bytes, two.
    for (const length of [1, 2, 4, 5, 55]) {
      const share = Buffer.alloc(length, 0x41).toString("base64url");
      const last = share.at(-1)!;
      const sibling = `${share.slice(0, -1)}${last === "Q" ? "R" : String.fromCharCode(last.charCodeAt(0) + 1)}`;
      expect(Buffer.from(sibling, "base64url").equals(Buffer.from(share, "base64url"))).toBe(true);
      expect(parsePartialKey(`sk_sluice_aaaaaaaaaaaa_${share}`)).not.toBeNull();
      expect(parsePartialKey(`sk_sluice_aaaaaaaaaaaa_${sibling}`)).toBeNull();
    }
    // A character after the last whole group completes no byte.
    const whole = Buffer.alloc(3, 0x41).toString("base64url");
    expect(Buffer.from(`${whole}A`, "base64url").equals(Buffer.from(whole, "base64url"))).toBe(true);
    expect(parsePartialKey(`sk_sluice_aaaaaaaaaaaa_${whole}A`)).toBeNull();
  });

  it("rejects a client share against a stored digest that is not one, without throwing", () => {
    const parsed = parsePartialKey(splitProviderKey(newKeyId(), providerKey).partialKey)!;
    expect(clientShareMatches(parsed.clientShare, "")).toBe(false);
    expect(clientShareMatches(parsed.clientShare, "not-hex")).toBe(false);
  });
});

describe("client share digests", () => {
  it("keep the digests already stored: SHA-256 of the share's bytes, in hex", () => {
    const stored = "c3bc45ac352fe43ff8f0a1cc26d6cc29f71f536dc417906f8513ea44ed4bb161";
    const share = Buffer.from("c2hhcmU=", "base64url");
    expect(shareDigest(share)).toBe(stored);
    expect(clientShareMatches(share, stored)).toBe(true);
    expect(clientShareMatches(Buffer.from("other"), stored)).toBe(false);
  });
});

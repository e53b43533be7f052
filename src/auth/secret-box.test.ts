import { randomBytes } from "node:crypto";
import { describe, expect, it } from "vitest";
import { createSecretBox } from "./secret-box.js";

describe("secret box", () => {
  const box = createSecretBox(randomBytes(32));

  it("opens what it sealed with the same AAD", () => {
    const sealed = box.seal(Buffer.from("server share"), "p1:k1");
    expect(sealed.startsWith("v1.")).toBe(true);
    expect(box.open(sealed, "p1:k1").toString()).toBe("server share");
  });

  it("refuses a sealed value moved to another owner, another master key or tampered", () => {
    const sealed = box.seal(Buffer.from("server share"), "p1:k1");
    expect(() => box.open(sealed, "p2:k1")).toThrow();
    expect(() => createSecretBox(randomBytes(32)).open(sealed, "p1:k1")).toThrow();
    const raw = Buffer.from(sealed.slice(3), "base64url");
    raw[raw.length - 1] = (raw[raw.length - 1] ?? 0) ^ 1;
    expect(() => box.open(`v1.${raw.toString("base64url")}`, "p1:k1")).toThrow();
  });

  it("keeps working with the real key after the caller wipes its buffer", () => {
    const masterKey = randomBytes(32);
    const copy = Buffer.from(masterKey);
    const wiped = createSecretBox(masterKey);
    masterKey.fill(0);
    const sealed = wiped.seal(Buffer.from("share"), "aad");
    expect(createSecretBox(copy).open(sealed, "aad").toString()).toBe("share");
    expect(() => createSecretBox(Buffer.alloc(32)).open(sealed, "aad")).toThrow();
  });

  it("derives distinct, stable keys per label", () => {
    const masterKey = randomBytes(32);
    const one = createSecretBox(masterKey);
    expect(one.deriveKey("vault").equals(createSecretBox(masterKey).deriveKey("vault"))).toBe(true);
    expect(one.deriveKey("vault").equals(one.deriveKey("other"))).toBe(false);
    expect(one.deriveKey("vault")).toHaveLength(32);
  });

  it("requires a 32-byte master key", () => {
    expect(() => createSecretBox(randomBytes(16))).toThrow(/32 bytes/);
  });

  it("refuses a master key longer than 32 bytes when built, not at its first use", () => {
    expect(() => createSecretBox(randomBytes(64))).toThrow(/32 bytes/);
  });

  it("refuses a sealed value too short to hold a whole 16-byte tag (GCM would check a shorter one)", () => {
    const sealed = box.seal(Buffer.alloc(0), "aad");
    const raw = Buffer.from(sealed.slice(3), "base64url");
    for (const length of [0, 16, 20, 27]) {
      const cut = `v1.${raw.subarray(0, length).toString("base64url")}`;
      expect(() => box.open(cut, "aad")).toThrow(/truncated/);
    }
  });

  it("derives the same key in every version: HKDF-SHA256 with the info `sluice:<label>`", () => {
    // Signed vault URLs already handed out must still verify after an upgrade.
    const derived = createSecretBox(Buffer.alloc(32, 7)).deriveKey("vault-url-signing");
    expect(derived.toString("hex")).toBe("d809960ed15efd964f0d892ac288c8992fdcc586b759e44a8d0c91df9c1ff13e");
  });
});

describe("secret box during a master key rotation (a previous key beside the current one)", () => {
  const oldKey = randomBytes(32);
  const newKey = randomBytes(32);
  const before = createSecretBox(oldKey);
  const rotating = createSecretBox(newKey, oldKey);

  it("opens a secret sealed under the previous key, and one sealed under the current key", () => {
    const old = before.seal(Buffer.from("old share"), "provider-key:p1:k1");
    expect(rotating.open(old, "provider-key:p1:k1").toString()).toBe("old share");
    const fresh = rotating.seal(Buffer.from("new share"), "provider-key:p1:k2");
    expect(rotating.open(fresh, "provider-key:p1:k2").toString()).toBe("new share");
  });

  it("seals under the current key: an instance holding only the new key opens it, one holding only the old does not", () => {
    const fresh = rotating.seal(Buffer.from("new share"), "aad");
    expect(createSecretBox(newKey).open(fresh, "aad").toString()).toBe("new share");
    expect(() => before.open(fresh, "aad")).toThrow();
  });

  it("still refuses a secret under a third key, or moved to another owner", () => {
    const other = createSecretBox(randomBytes(32)).seal(Buffer.from("x"), "aad");
    expect(() => rotating.open(other, "aad")).toThrow();
    const old = before.seal(Buffer.from("x"), "provider-key:p1:k1");
    expect(() => rotating.open(old, "provider-key:p2:k1")).toThrow();
  });

  it("reseals a secret under the previous key to the current key with the same AAD, and leaves one already under it", () => {
    const old = before.seal(Buffer.from("share"), "devicecheck-key:p1");
    const resealed = rotating.reseal(old, "devicecheck-key:p1");
    expect(resealed).toBeDefined();
    expect(
      createSecretBox(newKey)
        .open(resealed ?? "", "devicecheck-key:p1")
        .toString(),
    ).toBe("share");
    expect(() => createSecretBox(newKey).open(resealed ?? "", "devicecheck-key:p2")).toThrow();
    expect(rotating.reseal(resealed ?? "", "devicecheck-key:p1")).toBeUndefined();
  });

  it("opens under a former AAD after the current one, reseals it to the current one, and tells which key opened it", () => {
    const [aad, formerAad] = ["provider-key:p1:provider-a:k1", "provider-key:p1:k1"];
    const current = createSecretBox(newKey);
    const former = current.seal(Buffer.from("share"), formerAad);
    expect(() => current.open(former, aad)).toThrow();
    expect(current.open(former, aad, formerAad).toString()).toBe("share");
    expect(current.keyOpening(former, aad, formerAad)).toBe("current");
    const bound = current.reseal(former, aad, formerAad);
    expect(current.open(bound ?? "", aad).toString()).toBe("share");
    expect(() => current.open(bound ?? "", formerAad)).toThrow();
    expect(current.reseal(bound ?? "", aad, formerAad)).toBeUndefined();
    // Under the previous key and the former AAD: both move at once.
    const older = before.seal(Buffer.from("share"), formerAad);
    expect(rotating.keyOpening(older, aad, formerAad)).toBe("previous");
    expect(current.open(rotating.reseal(older, aad, formerAad) ?? "", aad).toString()).toBe("share");
  });

  it("refuses to reseal a secret that opens under neither key", () => {
    const other = createSecretBox(randomBytes(32)).seal(Buffer.from("x"), "aad");
    expect(() => rotating.reseal(other, "aad")).toThrow();
    expect(() => createSecretBox(newKey).reseal(before.seal(Buffer.from("x"), "aad"), "aad")).toThrow();
  });

  it("derives keys from the current key only", () => {
    expect(rotating.deriveKey("vault").equals(createSecretBox(newKey).deriveKey("vault"))).toBe(true);
  });
});

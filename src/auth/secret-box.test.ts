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
});

import { verify } from "node:crypto";
import { describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../../test/fakes/fake-apple.js";
import {
  createDeviceCheckJwtCache,
  DeviceCheckKeyError,
  deviceCheckJwtMaxAgeMs,
  mintDeviceCheckJwt,
} from "./device-check-jwt.js";

const keys = generateAppleKeyPair();
const credentials = { teamId: "TEAM123456", keyId: "KEY1234567", privateKeyPem: keys.privateKeyPem };
const at = Date.UTC(2025, 0, 1, 12, 0, 0, 750);

function decode(jwt: string) {
  const [header, claims, signature] = jwt.split(".") as [string, string, string];
  return {
    header: JSON.parse(Buffer.from(header, "base64url").toString("utf8")) as unknown,
    claims: JSON.parse(Buffer.from(claims, "base64url").toString("utf8")) as unknown,
    signingInput: `${header}.${claims}`,
    signature: Buffer.from(signature, "base64url"),
  };
}

describe("mintDeviceCheckJwt", () => {
  it("signs {alg, kid} and {iss, iat} with ES256 so the public key verifies it", () => {
    const jwt = decode(mintDeviceCheckJwt(credentials, at));
    expect(jwt.header).toEqual({ alg: "ES256", kid: "KEY1234567" });
    expect(jwt.claims).toEqual({ iss: "TEAM123456", iat: Math.floor(at / 1000) });
    expect(jwt.signature).toHaveLength(64);
    const verified = verify(
      "sha256",
      Buffer.from(jwt.signingInput),
      { key: keys.publicKeyPem, dsaEncoding: "ieee-p1363" },
      jwt.signature,
    );
    expect(verified).toBe(true);
  });

  it("does not verify with another key", () => {
    const jwt = decode(mintDeviceCheckJwt(credentials, at));
    const other = generateAppleKeyPair();
    const verified = verify(
      "sha256",
      Buffer.from(jwt.signingInput),
      { key: other.publicKeyPem, dsaEncoding: "ieee-p1363" },
      jwt.signature,
    );
    expect(verified).toBe(false);
  });

  it.each([
    ["not a PEM", "hello"],
    ["a truncated PEM", keys.privateKeyPem.slice(0, 80)],
    ["a public key", keys.publicKeyPem],
  ])("throws a DeviceCheckKeyError for %s, without the key in the message", (_name, pem) => {
    let thrown: unknown;
    try {
      mintDeviceCheckJwt({ ...credentials, privateKeyPem: pem }, at);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(DeviceCheckKeyError);
    expect((thrown as DeviceCheckKeyError).problem).toBe("invalid-private-key");
    for (const line of pem.split("\n").filter((part) => part.length > 16)) {
      expect((thrown as Error).message).not.toContain(line);
    }
    expect((thrown as Error).cause).toBeUndefined();
  });

  it("refuses a key on another curve", async () => {
    const { generateKeyPairSync } = await import("node:crypto");
    const { privateKey } = generateKeyPairSync("ec", { namedCurve: "secp384r1" });
    const pem = privateKey.export({ type: "pkcs8", format: "pem" }).toString();
    expect(() => mintDeviceCheckJwt({ ...credentials, privateKeyPem: pem }, at)).toThrow(/P-256/);
  });

  it("refuses an empty team id or key id", () => {
    expect(() => mintDeviceCheckJwt({ ...credentials, teamId: "" }, at)).toThrow(DeviceCheckKeyError);
    expect(() => mintDeviceCheckJwt({ ...credentials, keyId: " " }, at)).toThrow(DeviceCheckKeyError);
  });
});

describe("DeviceCheckJwtCache", () => {
  function setup() {
    let now = at;
    const cache = createDeviceCheckJwtCache({ clock: () => now });
    return { cache, advance: (ms: number) => (now += ms) };
  }

  it("reuses one token until it is 40 minutes old, then mints a new one", () => {
    const { cache, advance } = setup();
    const first = cache.get(credentials);
    advance(deviceCheckJwtMaxAgeMs - 1);
    expect(cache.get(credentials)).toBe(first);
    advance(1);
    const second = cache.get(credentials);
    expect(second).not.toBe(first);
    expect(decode(second).claims).toEqual({
      iss: "TEAM123456",
      iat: Math.floor((at + deviceCheckJwtMaxAgeMs) / 1000),
    });
  });

  it("keeps one token per team id and key id", () => {
    const { cache } = setup();
    const one = cache.get(credentials);
    const other = cache.get({ ...credentials, keyId: "KEY7654321" });
    expect(decode(other).header).toEqual({ alg: "ES256", kid: "KEY7654321" });
    expect(cache.get(credentials)).toBe(one);
  });

  it("re-mints at once when the key under a key id is replaced or the entry is invalidated", () => {
    const { cache } = setup();
    const first = cache.get(credentials);
    const replaced = generateAppleKeyPair();
    const second = cache.get({ ...credentials, privateKeyPem: replaced.privateKeyPem });
    expect(second).not.toBe(first);
    cache.invalidate(credentials.teamId, credentials.keyId);
    expect(cache.get({ ...credentials, privateKeyPem: replaced.privateKeyPem })).not.toBe(second);
  });

  it("re-mints when the clock went backwards, since Apple refuses an iat in the future", () => {
    const { cache, advance } = setup();
    const first = cache.get(credentials);
    advance(-5000);
    expect(cache.get(credentials)).not.toBe(first);
  });

  it("throws DeviceCheckKeyError for a bad key and caches nothing", () => {
    const { cache } = setup();
    expect(() => cache.get({ ...credentials, privateKeyPem: "nope" })).toThrow(DeviceCheckKeyError);
  });
});

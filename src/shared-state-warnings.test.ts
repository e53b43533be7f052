import { describe, expect, it } from "vitest";
import { sharedStateWarnings } from "./shared-state-warnings.js";

const databaseUrl = "postgres://sluice:secret-password@db.internal:5432/sluice";

const none = { redisUrl: undefined, redisKeyPrefix: undefined, vaultS3Endpoint: undefined };
const s3 = "https://s3.example.com";

describe("the warning of a start on PostgreSQL without Redis", () => {
  it("names what is per instance without Redis, and says to set REDIS_URL", () => {
    const warnings = sharedStateWarnings({ ...none, databaseUrl, vaultS3Endpoint: s3 });
    expect(warnings).toHaveLength(1);
    const [warning] = warnings;
    expect(warning?.fields).toEqual({ databaseUrl: true, redisUrl: false });
    expect(warning?.message).toMatch(/^DATABASE_URL is set without REDIS_URL/);
    for (const part of [
      "single-use token",
      "request budget",
      "failed-authentication throttle",
      "rate limits",
      "set REDIS_URL",
    ])
      expect(warning?.message).toContain(part);
    expect(JSON.stringify(warning)).not.toContain("secret-password");
  });

  it("says nothing with Redis, or on the embedded SQLite (one instance)", () => {
    const redisUrl = "redis://127.0.0.1:6379";
    expect(
      sharedStateWarnings({
        ...none,
        databaseUrl,
        redisUrl,
        redisKeyPrefix: "staging:",
        vaultS3Endpoint: s3,
      }),
    ).toEqual([]);
    expect(sharedStateWarnings({ ...none, databaseUrl: undefined })).toEqual([]);
    expect(sharedStateWarnings({ ...none, databaseUrl: undefined, redisUrl })).toEqual([]);
  });

  it("says a Redis key prefix without Redis does nothing, on either database", () => {
    for (const database of [undefined, databaseUrl]) {
      const warnings = sharedStateWarnings({
        ...none,
        databaseUrl: database,
        redisKeyPrefix: "staging:",
        vaultS3Endpoint: s3,
      });
      expect(warnings[0]?.fields).toEqual({ redisKeyPrefix: "staging:", redisUrl: false });
      expect(warnings[0]?.message).toMatch(/^SLUICE_REDIS_KEY_PREFIX is set without REDIS_URL/);
      expect(warnings).toHaveLength(database ? 2 : 1);
    }
  });
});

describe("the warning of a start on PostgreSQL with the local image vault", () => {
  const localVaultWarning = (warnings: { message: string }[]) =>
    warnings.find((warning) => warning.message.startsWith("DATABASE_URL is set with the local image vault"));

  it("says a signed vault URL is served by this instance alone, and to set an S3 vault, with Redis or without", () => {
    for (const redisUrl of [undefined, "redis://127.0.0.1:6379"]) {
      const warnings = sharedStateWarnings({ ...none, databaseUrl, redisUrl });
      expect(warnings).toHaveLength(redisUrl ? 1 : 2);
      const warning = warnings.find((each) => each.fields.vault === "local");
      expect(warning).toBe(localVaultWarning(warnings));
      expect(warning?.fields).toEqual({ databaseUrl: true, vault: "local" });
      for (const part of [
        "SLUICE_DATA_DIR",
        "signed vault URL",
        "404",
        "saveImagesToVault",
        "SLUICE_VAULT_S3_",
      ])
        expect(warning?.message).toContain(part);
      expect(JSON.stringify(warning)).not.toContain("secret-password");
    }
  });

  it("says nothing with an S3 vault, or on the embedded SQLite (one instance)", () => {
    expect(
      localVaultWarning(sharedStateWarnings({ ...none, databaseUrl, vaultS3Endpoint: s3 })),
    ).toBeUndefined();
    expect(
      sharedStateWarnings({ ...none, databaseUrl: undefined, redisUrl: "redis://127.0.0.1:6379" }),
    ).toEqual([]);
    expect(sharedStateWarnings({ ...none, databaseUrl: undefined })).toEqual([]);
  });
});

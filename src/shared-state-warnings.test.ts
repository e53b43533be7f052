import { describe, expect, it } from "vitest";
import { sharedStateWarnings } from "./shared-state-warnings.js";

const databaseUrl = "postgres://sluice:secret-password@db.internal:5432/sluice";

describe("the warning of a start on PostgreSQL without Redis", () => {
  it("names what is per instance without Redis, and says to set REDIS_URL", () => {
    const warnings = sharedStateWarnings({ databaseUrl, redisUrl: undefined, redisKeyPrefix: undefined });
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
    expect(sharedStateWarnings({ databaseUrl, redisUrl, redisKeyPrefix: "staging:" })).toEqual([]);
    expect(
      sharedStateWarnings({ databaseUrl: undefined, redisUrl: undefined, redisKeyPrefix: undefined }),
    ).toEqual([]);
    expect(sharedStateWarnings({ databaseUrl: undefined, redisUrl, redisKeyPrefix: undefined })).toEqual([]);
  });

  it("says a Redis key prefix without Redis does nothing, on either database", () => {
    for (const database of [undefined, databaseUrl]) {
      const warnings = sharedStateWarnings({
        databaseUrl: database,
        redisUrl: undefined,
        redisKeyPrefix: "staging:",
      });
      expect(warnings[0]?.fields).toEqual({ redisKeyPrefix: "staging:", redisUrl: false });
      expect(warnings[0]?.message).toMatch(/^SLUICE_REDIS_KEY_PREFIX is set without REDIS_URL/);
      expect(warnings).toHaveLength(database ? 2 : 1);
    }
  });
});

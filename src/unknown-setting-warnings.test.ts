import { describe, expect, it } from "vitest";
import { unknownSettings } from "./config.js";
import { unknownSettingWarnings } from "./unknown-setting-warnings.js";

describe("names that look like settings but are none", () => {
  it("are the SLUICE_ names no setting has, each with the setting it is nearest to", () => {
    expect(
      unknownSettings({
        SLUICE_ADMN_TOKEN: "change-me-to-a-long-random-string",
        SLUICE_MAX_CONECTIONS: "5",
        SLUICE_DATABASE_URL: "postgres://u@db.test/sluice",
        SLUICE_COLOUR: "blue",
        SLUICE_ADMIN_TOKEN: "a-real-setting-0123456789",
        PORT: "8787",
        NOT_OURS: "x",
      }),
    ).toEqual([
      { name: "SLUICE_ADMN_TOKEN", nearest: "SLUICE_ADMIN_TOKEN" },
      { name: "SLUICE_COLOUR" },
      // A setting without the prefix, written with it.
      { name: "SLUICE_DATABASE_URL", nearest: "DATABASE_URL" },
      { name: "SLUICE_MAX_CONECTIONS", nearest: "SLUICE_MAX_CONNECTIONS" },
    ]);
  });

  // The environment is the operator's, and the search for the nearest setting runs before the
  // start listens: 10,000 names took 5.2 s, one name of 131 KB (the most a variable holds) 3 s.
  it("are found in well under a second among 10,000 names, or names of 100,000 characters", () => {
    const many: Record<string, string> = {};
    for (let index = 0; index < 10_000; index++) many[`SLUICE_X${index}`] = "1";
    const long = Object.fromEntries(
      ["A", "B", "C"].map((letter) => [`SLUICE_${letter.repeat(100_000)}`, "1"]),
    );
    const started = performance.now();
    expect(unknownSettings(many)).toHaveLength(10_000);
    expect(unknownSettings(long)).toHaveLength(3);
    expect(performance.now() - started).toBeLessThan(1000);
    // The nearest setting is still found, at 3 edits at most.
    expect(
      unknownSettings({
        SLUICE_ADMN_TOKN: "x",
        SLUICE_ADM_TKN: "x",
        SLUICE_AD_TK: "x",
        SLUICE_MAX_CONNECTIONS_: "x",
        SLUICE_DATABAS_URL: "x",
        SLUICE_PRT: "x",
        SLUICE_DATABASE_UR: "x",
        SLUICE_REDISURL: "x",
      }),
    ).toEqual([
      { name: "SLUICE_ADMN_TOKN", nearest: "SLUICE_ADMIN_TOKEN" },
      { name: "SLUICE_ADM_TKN" },
      { name: "SLUICE_AD_TK" },
      { name: "SLUICE_DATABASE_UR", nearest: "DATABASE_URL" },
      { name: "SLUICE_DATABAS_URL", nearest: "DATABASE_URL" },
      { name: "SLUICE_MAX_CONNECTIONS_", nearest: "SLUICE_MAX_CONNECTIONS" },
      { name: "SLUICE_PRT", nearest: "PORT" },
      { name: "SLUICE_REDISURL", nearest: "REDIS_URL" },
    ]);
  });

  it("are none when every SLUICE_ name is a setting, or set empty", () => {
    expect(unknownSettings({ SLUICE_ENV: "test", SLUICE_METRICS: "false", SLUICE_NOPE: "" })).toEqual([]);
  });

  it("are each named in a start warning, with the nearest setting and never the value", () => {
    const warnings = unknownSettingWarnings(
      unknownSettings({ SLUICE_ADMN_TOKEN: "secret-admin-token-0123456789", SLUICE_COLOUR: "blue" }),
    );
    expect(warnings).toEqual([
      {
        fields: { setting: "SLUICE_ADMN_TOKEN", nearest: "SLUICE_ADMIN_TOKEN" },
        message:
          "SLUICE_ADMN_TOKEN is set, but Sluice has no such setting, so it is ignored: did you mean SLUICE_ADMIN_TOKEN? (the settings: README, Configuration)",
      },
      {
        fields: { setting: "SLUICE_COLOUR" },
        message:
          "SLUICE_COLOUR is set, but Sluice has no such setting, so it is ignored (the settings: README, Configuration)",
      },
    ]);
    expect(JSON.stringify(warnings)).not.toContain("secret-admin-token");
  });
});

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

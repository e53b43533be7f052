import { describe, expect, it } from "vitest";
import { settings, unknownSettings } from "./config.js";
import { unknownSettingWarnings } from "./unknown-setting-warnings.js";

/** How long `run` took, in milliseconds. */
function msTaken(run: () => unknown): number {
  const started = performance.now();
  run();
  return performance.now() - started;
}

/** The Levenshtein distance, by its whole table: the comparison the search for a setting once made. */
function wholeDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, index) => index);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++)
      current[j] = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    previous = current;
  }
  return previous[b.length] as number;
}

/** Each name compared with each setting, with and without its prefix, by whole tables. */
function wholeComparisons(names: readonly string[]): number {
  const candidates = Object.values(settings).map((setting) => setting.env as string);
  let nearest = 0;
  for (const name of names)
    for (const candidate of candidates)
      nearest += Math.min(wholeDistance(name, candidate), wholeDistance(name.slice(7), candidate));
  return nearest;
}

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
  // start listens: 10,000 names took 5.2 s, one name of 131 KB (the most a variable holds) 3 s, when
  // each name was compared with each setting in a whole Levenshtein table. Timed against that
  // comparison itself, in the same process (the fastest of three runs each), not against a number of
  // milliseconds a loaded machine can pass (1.39 s once in CI): per name the search costs ~1/40 of
  // it for short names, next to nothing for long ones. The speed itself is the benchmark's to watch.
  it("are found among 10,000 names, or names of 100,000 characters, at a small part of the cost of a whole comparison with each setting", () => {
    const many: Record<string, string> = {};
    for (let index = 0; index < 10_000; index++) many[`SLUICE_X${index}`] = "1";
    const long = Object.fromEntries(
      ["A", "B", "C"].map((letter) => [`SLUICE_${letter.repeat(100_000)}`, "1"]),
    );
    // A 25th of the names, compared whole: on a loaded 2-core machine 0.17 s, against 0.13 s for the
    // search among all 10,000 and 0.1 ms among the long ones; the whole comparison took 5.4 s for
    // the 10,000, 6.9 s for the long ones. The limit, 6 times it, is 7 times the search's time and
    // a fifth of the whole comparison's.
    const yardstick = Object.keys(many).slice(0, 400);
    const times = { yardstick: Infinity, many: Infinity, long: Infinity };
    for (let run = 0; run < 3; run++) {
      times.yardstick = Math.min(
        times.yardstick,
        msTaken(() => wholeComparisons(yardstick)),
      );
      times.many = Math.min(
        times.many,
        msTaken(() => expect(unknownSettings(many)).toHaveLength(10_000)),
      );
      times.long = Math.min(
        times.long,
        msTaken(() => expect(unknownSettings(long)).toHaveLength(3)),
      );
    }
    const limit = times.yardstick * 6;
    expect(
      times.many,
      `10,000 names: ${times.many.toFixed(0)} ms; 400 whole: ${times.yardstick.toFixed(0)}`,
    ).toBeLessThan(limit);
    expect(
      times.long,
      `long names: ${times.long.toFixed(0)} ms; 400 whole: ${times.yardstick.toFixed(0)}`,
    ).toBeLessThan(limit);
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

  // The environment is the operator's: 10,000 such names logged 10,000 lines, and a name of 100,000
  // characters a line of that size.
  it("are named one line each up to 20, those near a setting first, the others counted in one line", () => {
    const env: Record<string, string> = { SLUICE_MAX_CONECTIONS: "5", SLUICE_ADMN_TOKEN: "x" };
    // Sorted before both misspelt names (named first, had they been named in order), and near no setting.
    for (let index = 0; index < 10_000; index++) env[`SLUICE_AAAA_${index}`] = "1";
    const warnings = unknownSettingWarnings(unknownSettings(env));
    expect(warnings).toHaveLength(21);
    expect(warnings.slice(0, 2).map((warning) => warning.fields)).toEqual([
      { setting: "SLUICE_ADMN_TOKEN", nearest: "SLUICE_ADMIN_TOKEN" },
      { setting: "SLUICE_MAX_CONECTIONS", nearest: "SLUICE_MAX_CONNECTIONS" },
    ]);
    expect(warnings.slice(2, 20).map((warning) => warning.fields.setting)).toEqual(
      Object.keys(env)
        .filter((name) => name.startsWith("SLUICE_AAAA_"))
        .sort()
        .slice(0, 18),
    );
    expect(warnings[20]).toEqual({
      fields: { settingsNotNamed: 9982 },
      message:
        "9982 more SLUICE_ names are set that are no setting, so they are ignored: not named one by one, the first 20 are (those nearest a setting first; the settings: README, Configuration)",
    });
    expect(JSON.stringify(warnings).length).toBeLessThan(5000);
  });

  it("are named one line each when there are 20 or fewer, with no count", () => {
    const env: Record<string, string> = {};
    for (let index = 0; index < 20; index++) env[`SLUICE_A${index}`] = "1";
    const warnings = unknownSettingWarnings(unknownSettings(env));
    expect(warnings).toHaveLength(20);
    expect(warnings.every((warning) => typeof warning.fields.setting === "string")).toBe(true);
  });

  it("are named by their start and length when longer than any setting could be", () => {
    const long = `SLUICE_${"A".repeat(100_000)}`;
    const [warning] = unknownSettingWarnings(unknownSettings({ [long]: "1" }));
    const shown = `SLUICE_${"A".repeat(57)}… (100007 characters)`;
    expect(warning).toEqual({
      fields: { setting: shown },
      message: `${shown} is set, but Sluice has no such setting, so it is ignored (the settings: README, Configuration)`,
    });
  });
});

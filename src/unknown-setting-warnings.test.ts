import { describe, expect, it } from "vitest";
import { settings, unknownSettings } from "./config.js";
import { unknownSettingWarnings } from "./unknown-setting-warnings.js";

/** Thrown when a search for the nearest setting computes more of its tables than its budget. */
class TableBudgetExceeded extends Error {}

/**
 * The calls `run` made to Math.min: the search for the nearest setting makes two for each cell of a
 * Levenshtein table it fills, and one for each comparison of a name with a setting, so this counts
 * its work without a clock. Past `budget` calls the next throws, so a search that fills whole tables
 * fails at once rather than running on for seconds.
 */
function minCalls(run: () => unknown, budget: number): number {
  let calls = 0;
  const { min } = Math;
  // Replaced for the run, not spied on: a spy keeps each call's arguments, millions of them here.
  Math.min = (...values: number[]) => {
    if (++calls > budget) throw new TableBudgetExceeded(`over ${budget} calls to Math.min`);
    return min(...values);
  };
  try {
    run();
  } finally {
    Math.min = min;
  }
  return calls;
}

/** The cells of the whole tables comparing each name with each setting, with and without its prefix. */
function wholeCells(names: readonly string[]): number {
  const candidates = Object.values(settings).map((setting) => setting.env as string);
  let cells = 0;
  for (const name of names)
    for (const candidate of candidates) cells += (name.length + name.length - 7) * candidate.length;
  return cells;
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

  // The environment is the operator's, and the search for the nearest setting runs before the start
  // listens: 10,000 names took 5.2 s, one name of 131 KB (the most a variable holds) 3 s, when each
  // name was compared with each setting in a whole Levenshtein table. The work is counted, not
  // timed: the search passes over the start and end a name shares with a setting, compares no names
  // whose lengths differ by more than 3, and stops a table at its first row past 3 edits, so it fills
  // a small part of the whole tables (about 1/80 for these short names) and none for the long ones.
  // The speed itself is the benchmark's to watch.
  it("are found among 10,000 names, or names of 100,000 characters, filling a small part of the whole tables", () => {
    const many: Record<string, string> = {};
    for (let index = 0; index < 10_000; index++) many[`SLUICE_X${index}`] = "1";
    const long = Object.fromEntries(
      ["A", "B", "C"].map((letter) => [`SLUICE_${letter.repeat(100_000)}`, "1"]),
    );
    // Two calls for each cell filled: at most a twentieth of the cells filled.
    const manyBudget = wholeCells(Object.keys(many)) / 10;
    let found: unknown[] = [];
    const manyCalls = minCalls(() => {
      found = unknownSettings(many);
    }, manyBudget);
    expect(found).toHaveLength(10_000);
    expect(manyCalls).toBeGreaterThan(10_000);
    expect(manyCalls).toBeLessThanOrEqual(manyBudget);
    // One call for each comparison of a name with a setting, and no table filled.
    const comparisons = 3 * Object.keys(settings).length;
    const longCalls = minCalls(() => {
      found = unknownSettings(long);
    }, 2 * comparisons);
    expect(found).toHaveLength(3);
    expect(longCalls).toBe(comparisons);
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

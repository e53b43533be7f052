import { describe, expect, it } from "vitest";
import { isSafeVaultPath, vaultPath } from "../images/vault-store.js";
import {
  addProviderKeyInput,
  createProjectInput,
  monthlySpendCapRule,
  projectListInput,
  updateProjectInput,
  usageQueryInput,
} from "./project-input.js";

describe("project input", () => {
  const candidates = [
    "team42",
    "_team",
    "-team",
    "team_-",
    "a",
    "x".repeat(64),
    "x".repeat(65),
    "",
    ".",
    "..",
    ".hidden",
    "team.one",
    "a\\b",
    "t%2e",
    "té",
    "team 1",
  ];

  // One segment each: the vault checks a path's first segment with the same rule as the admin input.
  it.each(candidates)("accepts team id %j exactly when it makes a safe vault path", (teamId) => {
    const accepted = updateProjectInput.safeParse({ teamId }).success;
    const path = vaultPath(teamId, "prj_1", new Date("2026-01-02T00:00:00Z"), "0b0c", "image/png");
    expect(accepted).toBe(isSafeVaultPath(path));
    expect(createProjectInput.safeParse({ name: "n", provider: "provider-a", teamId }).success).toBe(
      accepted,
    );
  });

  it("accepts a leading _ or - and refuses ., .. and hidden names", () => {
    const accepts = (teamId: string) => updateProjectInput.safeParse({ teamId }).success;
    expect(["_team", "-team", "team42"].map(accepts)).toEqual([true, true, true]);
    expect([".", "..", ".hidden", "team.one", "a/b"].map(accepts)).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
  });

  it("takes a monthly spend cap above 0 only (no cap is null, not 0)", () => {
    const cap = (monthlySpendCapUsd: unknown) => updateProjectInput.safeParse({ monthlySpendCapUsd }).success;
    expect([0, -1, 0.01, 1e9, 1e9 + 1, null].map(cap)).toEqual([false, false, true, true, false, true]);
  });

  // Costs are recorded to the billionth of a dollar, and the cap is compared with the month's spend
  // in billionths (admission.ts): a cap finer than that is one no recorded spend can be told from.
  it("takes a monthly spend cap to the billionth of a dollar at the finest", () => {
    const cap = (monthlySpendCapUsd: unknown) => updateProjectInput.safeParse({ monthlySpendCapUsd }).success;
    expect([1e-9, 0.000000001, 12.123456789, 123456789.12345679, 2.5e-8].map(cap)).toEqual([
      true,
      true,
      true,
      true,
      true,
    ]);
    expect([1e-16, 4e-10, 1.5e-9, 12.1234567891, 0.3 + 1e-12].map(cap)).toEqual([
      false,
      false,
      false,
      false,
      false,
    ]);
    // A JavaScript client's floating-point sum stands for the amount it is within rounding of.
    const stored = (monthlySpendCapUsd: number) =>
      updateProjectInput.parse({ monthlySpendCapUsd }).monthlySpendCapUsd;
    expect([0.1 + 0.2, 3 * 1e-9, 12.5, 123456789.12345679].map(stored)).toEqual([
      0.3, 3e-9, 12.5, 123456789.12345679,
    ]);
    expect(updateProjectInput.safeParse({ monthlySpendCapUsd: 1e-16 }).error?.issues[0]?.message).toBe(
      `must be ${monthlySpendCapRule}`,
    );
  });

  it("refuses a fractional rate limit, NUL in text, an unknown deviceCheck field and a 65-character id", () => {
    const update = (input: unknown) => updateProjectInput.safeParse(input).success;
    expect(update({ rateLimits: { perMinute: 10 } })).toBe(true);
    expect(update({ rateLimits: { perMinute: 10.5 } })).toBe(false);
    expect(update({ rateLimits: { devicePerMinute: 0.5 } })).toBe(false);
    expect(update({ name: "a\u0000b" })).toBe(false);
    expect(update({ deviceCheck: { enabled: true } })).toBe(true);
    expect(update({ deviceCheck: { enabled: true, team: "TEAM123456" } })).toBe(false);
    const create = (id: string) =>
      createProjectInput.safeParse({ id, name: "n", provider: "provider-a" }).success;
    expect(create(`a${"b".repeat(63)}`)).toBe(true);
    expect(create(`a${"b".repeat(64)}`)).toBe(false);
  });

  it("names a misleading character's place in the name or label as sent, whitespace trimmed from its ends counted", () => {
    const problems = (input: unknown) =>
      updateProjectInput.safeParse(input).error?.issues.map((issue) => issue.message);
    const rule = "must not hold control, bidirectional or zero-width characters";
    expect(problems({ name: "  a\u202Eb" })).toEqual([`${rule} (U+202E at character 4)`]);
    expect(problems({ name: "\t\u6771\u200D\u4EAC\n" })).toEqual([`${rule} (U+200D at character 3)`]);
    expect(problems({ name: " \uFEFFName\t" })).toBeUndefined();
    expect(problems({ name: " pay\u00ADroll" })).toEqual([`${rule} (U+00AD at character 5)`]);
    expect(problems({ name: "\u2764\uFE0F payroll" })).toBeUndefined();
    const label = (value: string) =>
      addProviderKeyInput.safeParse({ provider: "provider-a", apiKey: "sk-0123456789abcdef", label: value })
        .error?.issues[0]?.message;
    expect(label("   backup\u202Etset")).toBe(`${rule} (U+202E at character 10)`);
    expect(label(" padded ")).toBeUndefined();
  });

  it("refuses an id of a provider key's form, which answers and the log never show whole", () => {
    const create = (id: string) =>
      createProjectInput.safeParse({ id, name: "n", provider: "provider-a" }).success;
    expect(create("AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o")).toBe(false);
    expect(create(`sk-${"a1B2c3D4e5".repeat(4)}`)).toBe(false);
    expect(create("sk-demo-project")).toBe(true);
    expect(create("prj_AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o")).toBe(true);
  });

  it("reads a page's limit written as digits without a leading zero, as each list answers it", () => {
    for (const input of [usageQueryInput, projectListInput]) {
      const limit = (text: string) => input.safeParse({ limit: text }).data?.limit;
      expect(["1", "10", "200"].map(limit)).toEqual([1, 10, 200]);
      // One spelling a number: `0200` (200, or octal 128 to some readers), `00`, `+5` are refused,
      // as `1e3`, `10.0` and ` 10` are.
      expect(["0200", "010", "00", "01", "+5", "1e2", "10.0", " 10"].map(limit)).toEqual(
        Array(8).fill(undefined),
      );
    }
  });

  it("reads a usage report's + offset that an unencoded query string turned into a space back as +", () => {
    // `?from=2026-11-01T10:00:00+02:00` sent as typed arrives with a space where the + was.
    expect(usageQueryInput.parse({ from: "2026-11-01T10:00:00 02:00", to: "2026-11-02" })).toEqual({
      from: "2026-11-01T10:00:00+02:00",
      to: "2026-11-02",
    });
    expect(usageQueryInput.safeParse({ from: "2026-11-01 10:00:00" }).success).toBe(false);
  });
});

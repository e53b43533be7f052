import { describe, expect, it } from "vitest";
import { isSafeVaultPath, vaultPath } from "../images/vault-store.js";
import { createProjectInput, updateProjectInput, usageQueryInput } from "./project-input.js";

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

  it("refuses an id of a provider key's form, which answers and the log never show whole", () => {
    const create = (id: string) =>
      createProjectInput.safeParse({ id, name: "n", provider: "provider-a" }).success;
    expect(create("AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o")).toBe(false);
    expect(create(`sk-${"a1B2c3D4e5".repeat(4)}`)).toBe(false);
    expect(create("sk-demo-project")).toBe(true);
    expect(create("prj_AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o")).toBe(true);
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

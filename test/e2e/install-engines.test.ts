import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { root } from "../support/markdown-links.js";

/**
 * `npm install` on the oldest Node.js the README names warns EBADENGINE for every locked package
 * whose `engines.node` leaves that version out. Those warnings must be the ones the README names
 * as harmless: development dependencies only (a runtime one would not run there), each named.
 */

type Version = [number, number, number];

/** `20`, `20.19`, `20.19.0`, `20.x`, `10.*`: the parts given, a wildcard or a missing part as null. */
function partsOf(text: string): Array<number | null> {
  return text
    .replace(/^v/, "")
    .split(".")
    .map((part) => (/^\d+$/.test(part) ? Number(part) : null));
}

function compare(a: Version, b: Version): number {
  for (const i of [0, 1, 2] as const) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}

/** Whether `version` satisfies one comparator of a node-semver range (the forms npm's lock holds). */
function satisfiesComparator(version: Version, comparator: string): boolean {
  const [, operator = "", rest = ""] = /^(>=|<=|>|<|=|\^|~)?(.*)$/.exec(comparator) ?? [];
  if (rest === "*" || rest === "") return true;
  const parts = partsOf(rest);
  const given = parts.indexOf(null);
  const defined = (given === -1 ? parts : parts.slice(0, given)) as number[];
  const floor: Version = [defined[0] ?? 0, defined[1] ?? 0, defined[2] ?? 0];
  const bump = (index: number): Version =>
    index === 0
      ? [floor[0] + 1, 0, 0]
      : index === 1
        ? [floor[0], floor[1] + 1, 0]
        : [floor[0], floor[1], floor[2] + 1];
  const within = (ceiling: Version) => compare(version, floor) >= 0 && compare(version, ceiling) < 0;
  switch (operator) {
    case ">=":
      return compare(version, floor) >= 0;
    case ">":
      return defined.length < 3
        ? compare(version, bump(defined.length - 1)) >= 0
        : compare(version, floor) > 0;
    case "<":
      return compare(version, floor) < 0;
    case "<=":
      return defined.length < 3
        ? compare(version, bump(defined.length - 1)) < 0
        : compare(version, floor) <= 0;
    case "^":
      return within(
        bump(floor[0] > 0 || defined.length < 2 ? 0 : floor[1] > 0 || defined.length < 3 ? 1 : 2),
      );
    case "~":
      return within(bump(defined.length < 2 ? 0 : 1));
    default:
      return defined.length < 3 ? within(bump(defined.length - 1)) : compare(version, floor) === 0;
  }
}

function satisfies(version: Version, range: string): boolean {
  return range.split("||").some((set) =>
    set
      .trim()
      .replace(/(>=|<=|>|<|=|\^|~)\s+/g, "$1")
      .split(/\s+/)
      .every((comparator) => satisfiesComparator(version, comparator)),
  );
}

describe("the install on the oldest Node.js the README names", () => {
  it("reads the lock's engine ranges as npm does", () => {
    const v20: Version = [20, 19, 0];
    expect(satisfies(v20, ">=22.0.0")).toBe(false);
    expect(satisfies(v20, ">=20.19")).toBe(true);
    expect(satisfies(v20, ">=20.20")).toBe(false);
    expect(satisfies(v20, "^20.19.0 || >=22.12.0")).toBe(true);
    expect(satisfies(v20, "^20.0.0 || ^22.0.0 || >=24.0.0")).toBe(true);
    expect(satisfies(v20, "^16 || ^18 || >=20")).toBe(true);
    expect(satisfies(v20, "^16 || ^18")).toBe(false);
    expect(satisfies(v20, "20.x || 22.x")).toBe(true);
    expect(satisfies(v20, "10.* || >= 12.*")).toBe(true);
    expect(satisfies(v20, ">= 10.x")).toBe(true);
    expect(satisfies(v20, "*")).toBe(true);
    expect(satisfies(v20, "^20.20.0")).toBe(false);
    expect(satisfies(v20, "~20.19.1")).toBe(false);
    expect(satisfies(v20, "<20.19.0")).toBe(false);
  });

  it("warns EBADENGINE only for development dependencies, each named in the README", () => {
    const packageJson = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8"));
    const readme = readFileSync(join(root, "README.md"), "utf8");
    const minimum = /^>=\s*(\d+(?:\.\d+){0,2})$/.exec(packageJson.engines.node)?.[1] ?? "";
    expect(readme).toContain(`Node.js ${minimum} or later`);
    const oldest = [...partsOf(minimum).map((part) => part ?? 0), 0, 0].slice(0, 3) as Version;
    const refusing = Object.entries(
      lock.packages as Record<string, { dev?: boolean; engines?: { node?: string } }>,
    ).filter(([, entry]) => entry.engines?.node && !satisfies(oldest, entry.engines.node));
    expect(refusing.length).toBeGreaterThan(0);
    const sentence = readme.slice(readme.indexOf("`npm install` warns `EBADENGINE`"));
    for (const [path, entry] of refusing) {
      const name = path.replace(/^.*node_modules\//, "");
      expect({ name, dev: entry.dev === true }).toEqual({ name, dev: true });
      expect(sentence.slice(0, sentence.indexOf("\n\n"))).toContain(`\`${name}\``);
    }
  });
});

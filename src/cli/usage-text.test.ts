import { describe, expect, it } from "vitest";
import { usage } from "./parse-command-line.js";

/**
 * `sluice --help`: a placeholder the text defines in its legend (`USD: an amount …`) stands for that
 * kind of value wherever a flag takes it, so a reader never takes one flag's value for another's.
 */
describe("the usage text", () => {
  /** The flags that take each placeholder, `--flag PLACEHOLDER` as the text writes them. */
  function flagsTaking(placeholder: string): string[] {
    const flags = new Set<string>();
    for (const [, flag, value] of usage.matchAll(/--([a-z-]+) ([A-Z][A-Z_.0-9]*)\b/g))
      if (value === placeholder) flags.add(`--${flag}`);
    return [...flags].sort();
  }

  /** The placeholders the legend defines: lines `  X: …`. */
  const defined = [...usage.matchAll(/^ {2}([A-Z][A-Z_]*): /gm)].map(([, placeholder]) => placeholder);

  it("uses each placeholder its legend defines only for the flags that take that kind of value", () => {
    expect(defined.sort()).toEqual(["RPM", "USD"]);
    expect(flagsTaking("RPM")).toEqual(["--device-rate-limit", "--rate-limit"]);
    expect(flagsTaking("USD")).toEqual(["--monthly-spend-cap"]);
  });

  it("writes a project's name as NAME, not as a number's placeholder", () => {
    expect(flagsTaking("NAME")).toEqual(["--name"]);
    expect(usage).toMatch(/^ {2}projects create --name NAME --provider P /m);
    expect(usage).toMatch(/^ {2}projects update ID \[--name NAME\] /m);
  });
});

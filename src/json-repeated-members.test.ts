import { describe, expect, it, vi } from "vitest";
import { repeatedMembers } from "./json-repeated-members.js";

/**
 * Each step of each path built is shown once (`shownSlot`, which asks `mayBeKey` of each name in
 * it): counted here, the work of building the paths. Past `budget` steps the next throws, so a
 * scan that builds a path again for each repetition fails at once rather than running on.
 */
const steps = vi.hoisted(() => ({ shown: 0, budget: Number.POSITIVE_INFINITY }));
vi.mock("./admin/project-id.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("./admin/project-id.js")>();
  return {
    ...original,
    mayBeKey(slot: string) {
      if (++steps.shown > steps.budget) throw new Error(`showed over ${steps.budget} steps of paths`);
      return original.mayBeKey(slot);
    },
  };
});

const of = (text: string) => repeatedMembers(Buffer.from(text));

describe("repeatedMembers", () => {
  it.each([
    ['{"a":1,"b":2}', []],
    ['{"a":1,"a":2}', ["a"]],
    ['{"a":1,"a":2,"a":3}', ["a"]],
    ['\ufeff {"a":{"b":1},"a":{"b":1,"b":2}}', ["a", "a.b"]],
    ['{"a":[{"x":1},{"x":1,"y":2,"x":3}]}', ["a.1.x"]],
    ['[[1,2],{"k":1,"k":1}]', ["1.k"]],
    ['{"n\\u0061me":1,"name":2}', ["name"]],
    ['{"a":"\\":\\"a\\":","a":1}', ["a"]],
    ['{"a":"a","b":{"a":"a"},"c":["a","a"]}', []],
    ['{"__proto__":1,"__proto__":2}', ["__proto__"]],
    ['{"a" : 1 , "a"\n:\t2}', ["a"]],
  ])("%s", (text, paths) => {
    JSON.parse(text.replace(/^\ufeff/, ""));
    expect(of(text)).toEqual(paths);
  });

  // A member named 40,001 times 5,001 levels down: its path is built once, its 5,001 steps each
  // shown once. The work is counted, not timed: building the path again for each repetition (and
  // dropping it as met already) shows 40,000 times as many steps, and passes the budget at the
  // second repetition.
  it("names the first ten, each path at most 200 characters, building each once", () => {
    const members = Array.from({ length: 12 }, (_, i) => `"m${i}":1,"m${i}":2,"m${i}":3`).join(",");
    expect(of(`{${members}}`)).toEqual(Array.from({ length: 10 }, (_, i) => `m${i}`));
    const deep = `${'{"abcdefghij":'.repeat(5000)}{${'"x":1,'.repeat(40_000)}"x":1}${"}".repeat(5000)}`;
    const pathSteps = 5001;
    Object.assign(steps, { shown: 0, budget: pathSteps });
    let paths: string[] = [];
    try {
      paths = of(deep);
    } finally {
      steps.budget = Number.POSITIVE_INFINITY;
    }
    expect(steps.shown).toBe(pathSteps);
    expect(paths).toHaveLength(1);
    expect(paths[0]).toHaveLength(200);
    expect(paths[0]).toMatch(/^….*\.abcdefghij\.x$/);
  });
});

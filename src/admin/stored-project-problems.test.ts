import { describe, expect, it } from "vitest";
import type { Project } from "../storage/project-repository.js";
import { compileUnkept } from "../structured/schema-validator.js";
import { blankProject } from "./project-rules.js";
import { compilingEachSchemaOnce, storedProjectProblems } from "./stored-project-problems.js";

const project = (
  id: string,
  outputSchema: unknown,
  provider: Project["provider"] = "provider-a",
): Project => ({
  ...blankProject(id, "2026-01-01T00:00:00.000Z"),
  provider,
  outputSchema: outputSchema as Record<string, unknown>,
});
const sameName = (name: string) => name;
const withPattern = (pattern: string) => ({
  type: "object",
  properties: { code: { type: "string", pattern } },
});
/** Each schema's JSON as JSON.stringify writes it is the same, and only the compiler refuses one. */
const numberBound = (maximum: unknown) => ({
  type: "object",
  properties: { n: { type: "number", maximum } },
});

/** The compiler `projects check` passes, counting the schemas it compiles. */
function countingCompiles(limit?: number) {
  const compiled: string[] = [];
  const compile = compilingEachSchemaOnce((schema) => {
    compiled.push(JSON.stringify(schema));
    compileUnkept(schema);
  }, limit);
  return { compile, compiled };
}

describe("storedProjectProblems with each distinct schema compiled once (projects check)", () => {
  // Schemas repeated across projects and providers, refused and taken, and schemas whose JSON
  // differs only in what the compiler alone refuses (a pattern; a bound that is a number or null).
  const projects = [
    project("p0", withPattern("^a+$")),
    project("p1", withPattern("^(a)\\1$")),
    project("p2", withPattern("^a+$"), "provider-c"),
    project("p3", withPattern("^(a)\\1$"), "provider-b"),
    project("p4", { properties: withPattern("^a+$").properties, type: "object" }),
    project("p5", withPattern("^(a)\\1$")),
    project("p6", numberBound(Number.POSITIVE_INFINITY)),
    project("p7", numberBound(null)),
    project("p8", numberBound(Number.POSITIVE_INFINITY)),
    project("p9", numberBound(null)),
    project("p10", { type: "object", properties: { n: { nullable: true } } }),
    project("p11", withPattern("^a+$")),
  ];

  it("answers every project as a check of that project alone does", () => {
    const alone = projects.map((each) => storedProjectProblems(each, sameName));
    // What the check answers is not empty for each kind of schema: the comparison compares something.
    expect(alone.map((problems) => problems.length)).toEqual([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 1, 0]);
    const { compile } = countingCompiles();
    expect(projects.map((each) => storedProjectProblems(each, sameName, compile))).toEqual(alone);
    // Again in the reverse order: the first of a schema's projects sets nothing for the next.
    const reversed = countingCompiles();
    expect(
      [...projects].reverse().map((each) => storedProjectProblems(each, sameName, reversed.compile)),
    ).toEqual([...alone].reverse());
  });

  it("compiles a schema once however many projects hold it; one with a number JSON cannot write, each time", () => {
    const { compile, compiled } = countingCompiles();
    for (const each of projects) storedProjectProblems(each, sameName, compile);
    // p0, p1, p4 (its keys in another order), p7, p10; the infinite bound of p6 and p8 each time.
    expect(compiled.map((schema) => JSON.parse(schema) as unknown)).toEqual([
      withPattern("^a+$"),
      withPattern("^(a)\\1$"),
      { properties: withPattern("^a+$").properties, type: "object" },
      numberBound(null),
      numberBound(null),
      numberBound(null),
      { type: "object", properties: { n: { nullable: true } } },
    ]);
  });

  it("keeps the outcomes of the last `limit` schemas compiled: an older one is compiled again", () => {
    const { compile, compiled } = countingCompiles(2);
    for (const pattern of ["^a$", "^b$", "^a$", "^c$", "^a$", "^b$"])
      expect(storedProjectProblems(project("p", withPattern(pattern)), sameName, compile)).toEqual([]);
    expect(
      compiled.map(
        (schema) => (JSON.parse(schema) as ReturnType<typeof withPattern>).properties.code.pattern,
      ),
    ).toEqual(["^a$", "^b$", "^c$", "^b$"]);
  });
});

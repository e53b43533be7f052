import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import { createSchemaRefusalLog } from "./schema-refusal-log.js";

describe("schema refusal log", () => {
  it("logs one line per project, provider and kind per window, and at its end how many it left out", () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("warn", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const closes: (() => void)[] = [];
    const log = createSchemaRefusalLog(logger, { now: () => 0, schedule: (run) => void closes.push(run) });
    const facts = { projectId: "p1", provider: "provider-c", reason: "tooComplex", model: "m" } as const;
    for (const id of ["r1", "r2", "r3"]) log(facts, id, "/v1/text");
    log({ ...facts, projectId: "p2" }, "r4", "/v1/pdf");
    for (const run of closes) run();
    expect(
      lines.map(({ msg, projectId, requestId, suppressed }) => [msg, projectId, requestId, suppressed]),
    ).toEqual([
      ["project output schema refused by the provider", "p1", "r1", undefined],
      ["project output schema refused by the provider", "p2", "r4", undefined],
      ["project output schema refusals suppressed", "p1", undefined, 2],
    ]);
    expect(lines[0]).toMatchObject({
      level: "warn",
      provider: "provider-c",
      reason: "tooComplex",
      status: 422,
    });
    expect(lines[2]).toMatchObject({ provider: "provider-c", reason: "tooComplex", windowMs: 60_000 });
  });
});

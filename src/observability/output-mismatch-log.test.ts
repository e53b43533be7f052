import { describe, expect, it } from "vitest";
import { createLogger } from "./logger.js";
import { createOutputMismatchLog } from "./output-mismatch-log.js";

describe("output mismatch log", () => {
  it("logs one line per project, provider and reason per window, and at its end how many it left out", () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("warn", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const closes: (() => void)[] = [];
    let now = 0;
    const log = createOutputMismatchLog(logger, { now: () => now, schedule: (run) => void closes.push(run) });
    const facts = {
      projectId: "p1",
      provider: "provider-a",
      model: "gpt-5.4-mini",
      reason: "schema",
      keyword: "required",
      mismatches: 3,
    } as const;
    for (const id of ["r1", "r2", "r3"]) log(facts, id, "/v1/text");
    log({ ...facts, projectId: "p2" }, "r4", "/v1/pdf");
    log({ projectId: "p1", provider: "provider-a", model: "m", reason: "cutOff" }, "r5", "/v1/vision");
    for (const run of closes.splice(0)) run();
    // A new window once the last one ended.
    now = 60_000;
    log({ ...facts, mismatches: 1000, moreMismatches: true }, "r6", "/v1/text");
    expect(
      lines.map(({ msg, projectId, requestId, reason, suppressed }) => [
        msg,
        projectId,
        requestId,
        reason,
        suppressed,
      ]),
    ).toEqual([
      [
        "model output did not match the project's output schema after the repair",
        "p1",
        "r1",
        "schema",
        undefined,
      ],
      [
        "model output did not match the project's output schema after the repair",
        "p2",
        "r4",
        "schema",
        undefined,
      ],
      [
        "model output did not match the project's output schema after the repair",
        "p1",
        "r5",
        "cutOff",
        undefined,
      ],
      ["model output schema mismatches suppressed", "p1", undefined, "schema", 2],
      [
        "model output did not match the project's output schema after the repair",
        "p1",
        "r6",
        "schema",
        undefined,
      ],
    ]);
    expect(lines[0]).toEqual({
      level: "warn",
      time: expect.any(String),
      service: "sluice",
      msg: "model output did not match the project's output schema after the repair",
      requestId: "r1",
      projectId: "p1",
      provider: "provider-a",
      model: "gpt-5.4-mini",
      route: "/v1/text",
      status: 502,
      reason: "schema",
      keyword: "required",
      mismatches: 3,
    });
    expect(lines[2]).not.toHaveProperty("keyword");
    expect(lines[3]).toMatchObject({ level: "warn", provider: "provider-a", windowMs: 60_000 });
    expect(lines[4]).toMatchObject({ mismatches: 1000, moreMismatches: true });
  });

  it("cuts a model name the provider answered with at 200 characters, without control characters", () => {
    const lines: string[] = [];
    const logger = createLogger("warn", { write: (line: string) => void lines.push(line) });
    const log = createOutputMismatchLog(logger, { now: () => 0, schedule: () => {} });
    log(
      { projectId: "p1", provider: "provider-a", model: `m\n${"x".repeat(100_000)}`, reason: "notJson" },
      "r1",
      "/v1/text",
    );
    expect(lines).toHaveLength(1);
    expect(lines[0]?.length).toBeLessThan(600);
    expect(JSON.parse(lines[0] ?? "{}").model).toBe(`m?${"x".repeat(198)}`);
  });
});

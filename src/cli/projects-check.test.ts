import { randomBytes } from "node:crypto";
import { EventEmitter } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { capture, cli } from "../../test/support/cli-run.js";
import { projectRow } from "../../test/support/project-row.js";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { openDatabase } from "../storage/database.js";
import type { ProjectsTable } from "../storage/schema.js";
import { runCli } from "./main.js";

/**
 * `sluice projects check` on each engine, over projects stored as an earlier release stored them:
 * rows written with SQL, holding values the rules of this build refuse.
 */
const engines = [
  { engine: "SQLite", available: true },
  { engine: "PostgreSQL", available: postgresAvailable },
] as const;

/** A provider key pasted into a schema as a property name: shown by its start and length only. */
const keyLike = `sk-ant-api03-${"A".repeat(40)}`;
const wideUnion = {
  type: "object",
  properties: { pick: { anyOf: Array.from({ length: 600 }, (_, index) => ({ const: `v${index}` })) } },
};

/** 22 definitions, each a union of two $refs to the next: 46 alternatives, 2^24 schemas tried. */
const doublingRefs = {
  type: "object",
  properties: { x: { $ref: "#/$defs/d0" } },
  required: ["x"],
  $defs: Object.fromEntries([
    ...Array.from({ length: 22 }, (_, index) => [
      `d${index}`,
      { anyOf: [{ $ref: `#/$defs/d${index + 1}` }, { $ref: `#/$defs/d${index + 1}` }] },
    ]),
    ["d22", { type: "string" }],
  ]),
};

/** Refused only by the schema compiler: a pattern that cannot run in linear time. */
const nonLinear = JSON.stringify({
  type: "object",
  properties: { code: { type: "string", pattern: "^(a)\\1$" } },
});

/** A project as an earlier release stored it: not in Test Mode, with a schema a call takes. */
const row = (id: string, at: string, values: Partial<ProjectsTable> = {}): ProjectsTable =>
  projectRow(id, at, {
    output_schema: JSON.stringify({ type: "object", properties: { summary: { type: "string" } } }),
    ...values,
  });

describe.each(engines)("sluice projects check on $engine", ({ engine, available }) => {
  const saved = { ...process.env };
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-check-"));
  let drop: () => Promise<void> = async () => {};
  let databaseUrl: string | undefined;

  beforeAll(async () => {
    if (!available) return;
    process.env.SLUICE_DATA_DIR = dataDir;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
    delete process.env.DATABASE_URL;
    if (engine === "PostgreSQL") {
      const schema = await createPostgresSchema();
      drop = schema.drop;
      databaseUrl = schema.url;
      process.env.DATABASE_URL = schema.url;
    }
    // 250 projects, more than two pages of the walk (100 each), those an earlier release stored
    // with a value refused now among them, on the first page and past it.
    const database = await openDatabase({ dataDir, databaseUrl });
    try {
      const base = Date.parse("2026-01-01T00:00:00.000Z");
      const at = (index: number) => new Date(base + index * 1000).toISOString();
      const refused: Record<number, Partial<ProjectsTable>> = {
        7: { output_schema: JSON.stringify(wideUnion) },
        100: { output_schema: nonLinear },
        // Refused since the schemas an answer's check may try through $ref are counted.
        120: { output_schema: JSON.stringify(doublingRefs) },
        150: {
          provider: "provider-b",
          output_schema: JSON.stringify({
            type: "object",
            properties: { a: { type: "string" } },
            required: ["a", keyLike],
          }),
          monthly_spend_cap_usd: 1e-16,
        },
        // Written by hand, not by any release: text that is not JSON.
        200: { output_schema: "{not json" },
        // A proxy allow-list that is no JSON object: read as a list that allows nothing.
        201: { proxy_allow_list: JSON.stringify("POST chat/completions") },
        // The same schema again, on the third page: each project that holds it is reported (the check
        // compiles a schema once, and answers its other projects as it answered the first).
        230: { output_schema: nonLinear },
        249: {
          model: "gpt-4.1",
          provider: "provider-c",
          proxy_allow_list: JSON.stringify({ "provider-c": ["post models/*"] }),
          rate_limit_per_minute: 0,
        },
      };
      const rows = Array.from({ length: 250 }, (_, index) =>
        row(`prj-${String(index).padStart(3, "0")}`, at(index), refused[index]),
      );
      await database.db.insertInto("projects").values(rows).execute();
    } finally {
      await database.close();
    }
  });
  afterAll(async () => {
    process.env = saved;
    await drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.skipIf(!available)(
    "prints each project with a value this build refuses, one JSON line each, and exits 1",
    async () => {
      const result = await cli("projects", "check");
      expect(result.code).toBe(1);
      const lines = result.out
        .trimEnd()
        .split("\n")
        .map((line) => JSON.parse(line) as { id: string; problems: string[] });
      expect(lines).toEqual([
        {
          id: "prj-007",
          problems: [
            "--output-schema on /v1/text, /v1/vision and /v1/pdf (model gpt-5.4-mini): the output schema's anyOf and oneOf lists hold 600 alternatives in all: at most 500",
          ],
        },
        {
          id: "prj-100",
          problems: [
            expect.stringMatching(
              /^--output-schema on \/v1\/text, \/v1\/vision and \/v1\/pdf \(model gpt-5\.4-mini\): the output schema does not compile: pattern "\^\(a\)\\\\1\$" cannot be matched in linear time/,
            ),
          ],
        },
        {
          id: "prj-120",
          problems: [
            "--output-schema on /v1/text, /v1/vision and /v1/pdf (model gpt-5.4-mini): the output schema's $ref references make checking an answer try 16777215 schemas: at most 100000",
          ],
        },
        {
          id: "prj-150",
          problems: [
            expect.stringMatching(/^--monthly-spend-cap: must be an amount in USD above 0/),
            expect.stringMatching(
              /^--output-schema on \/v1\/text, \/v1\/vision and \/v1\/pdf \(model [^)]+\): #\/required\/1: "sk-a…" \(53 characters\) is not among the properties/,
            ),
          ],
        },
        {
          id: "prj-200",
          problems: [
            "--output-schema: Invalid input: expected object, received string",
            "--output-schema on /v1/text, /v1/vision and /v1/pdf (model gpt-5.4-mini): the output schema must be a JSON object",
          ],
        },
        {
          id: "prj-201",
          problems: [
            "--proxy-allow-list: the stored list is not a JSON object of rules by provider, so it allows no proxied call",
          ],
        },
        {
          id: "prj-230",
          problems: [
            expect.stringMatching(
              /^--output-schema on \/v1\/text, \/v1\/vision and \/v1\/pdf \(model gpt-5\.4-mini\): the output schema does not compile: pattern "\^\(a\)\\\\1\$" cannot be matched in linear time/,
            ),
          ],
        },
        {
          id: "prj-249",
          problems: [
            "--rate-limit: Too small: expected number to be >=1",
            '--model: "gpt-4.1" is a provider-a model; this project\'s provider is provider-c',
            expect.stringMatching(
              /^--proxy-allow-list provider-c\.0: "post models\/\*" has a method in lower case/,
            ),
          ],
        },
      ]);
      expect(result.out).not.toContain(keyLike);
      expect(result.err).toMatch(
        /^projects check: 250 projects checked in \d+\.\d s: 8 have a problem \(a line each on stdout\)/,
      );
    },
  );

  it.skipIf(!available)(
    "stops reading once standard output is closed (a reader that stopped, `| head`), as process.stdout shows it",
    async () => {
      // process.stdout on a pipe whose reader left: the write fails (EPIPE), `writable` turns false
      // and "close" is emitted, but `destroyed` stays false (measured on Node 20).
      const closedAfterFirst = () => {
        const out = Object.assign(new EventEmitter(), {
          writes: [] as string[],
          attempts: 0,
          writable: true,
          destroyed: false,
          write(text: string) {
            out.attempts++;
            if (out.writable) out.writes.push(text);
            out.writable = false;
            setImmediate(() => out.emit("close"));
            return false;
          },
        });
        return out;
      };
      const out = closedAfterFirst();
      const err = capture();
      const code = await runCli(["projects", "check"], { out, err: err.stream, stdin: 0 });
      expect(code).toBe(1);
      expect(out.attempts).toBe(1);
      expect(JSON.parse(out.writes[0] as string)).toMatchObject({ id: "prj-007" });
      expect(err.text()).toBe(
        "projects check: stopped after 8 projects (1 with a problem): the output was closed\n",
      );
      // The project list the same: its second page (of 200 at most) is not read.
      const listed = closedAfterFirst();
      const read = await runCli(["projects", "list"], { out: listed, err: capture().stream, stdin: 0 });
      expect(read).toBe(0);
      expect(listed.attempts).toBe(1);
    },
  );

  it.skipIf(!available)("exits 0 with nothing on stdout once every project is changed to pass", async () => {
    const schema = JSON.stringify({ type: "object", properties: { pick: { type: "string" } } });
    for (const id of ["prj-007", "prj-100", "prj-120", "prj-200", "prj-230"])
      expect((await cli("projects", "update", id, "--output-schema", schema)).code).toBe(0);
    const fixed = await cli(
      "projects",
      "update",
      "prj-150",
      "--output-schema",
      schema,
      "--monthly-spend-cap",
      "10",
    );
    expect(fixed.code).toBe(0);
    const allowed = await cli("projects", "update", "prj-201", "--clear", "proxy-allow-list");
    expect(allowed.code).toBe(0);
    const last = await cli(
      "projects",
      "update",
      "prj-249",
      "--clear",
      "model",
      "--clear",
      "proxy-allow-list",
      "--rate-limit",
      "60",
    );
    expect(last.code).toBe(0);
    const result = await cli("projects", "check");
    expect(result).toMatchObject({ code: 0, out: "" });
    expect(result.err).toMatch(/^projects check: 250 projects checked in \d+\.\d s: none has a problem\n$/);
  });

  it.skipIf(!available)("takes no flags or arguments (a usage error, exit 2)", async () => {
    expect(await cli("projects", "check", "--limit", "5")).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^error: projects check does not take --limit; it takes no flags\n/),
    });
    expect(await cli("projects", "check", "prj-007")).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: unexpected argument "prj-007": projects check takes no arguments\n/,
      ),
    });
  });
});

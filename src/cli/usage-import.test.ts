import { spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { capture, cli } from "../../test/support/cli-run.js";
import { createPostgresSchema, postgresAvailable } from "../../test/support/services.js";
import { usageRow } from "../../test/support/usage-row.js";
import { createLogger } from "../observability/logger.js";
import { createMetrics } from "../observability/metrics.js";
import { openDatabase } from "../storage/database.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import { usageRecorderReports } from "../usage/usage-recorder-reports.js";
import { runCli } from "./main.js";

const rows = (count: number, prefix: string) =>
  Array.from({ length: count }, (_, index) =>
    usageRow(`${prefix}_${index}`, { model: `model-${index}`, cost_usd: index / 1000, latency_ms: 10.25 }),
  );

/**
 * A gateway's log, as its logger writes it: ordinary lines, a line that is not JSON, and the lines
 * of dropped rows' contents the usage recorder's reports write (a full queue's, a row the database
 * refused, the shutdown's), so the format read is the one written.
 */
function gatewayLog(prefix: string, refused?: UsageRecord): { text: string; dropped: UsageRecord[] } {
  const { logger, lines } = logged();
  const reports = usageRecorderReports(createMetrics(), logger);
  logger.info({ port: 8787 }, "listening");
  lines.push("Killed\n", "\n");
  const full = rows(30, `${prefix}_full`);
  reports.onDropped?.(full.length, "queue-full", full);
  if (refused) reports.onRefused?.(refused, Object.assign(new Error("a value refused"), { code: "23502" }));
  logger.warn({ count: 1 }, "something else");
  const shutdown = rows(3, `${prefix}_shutdown`);
  reports.onDropped?.(shutdown.length, "shutdown", shutdown);
  return { text: lines.join(""), dropped: [...full, ...shutdown] };
}

/** A logger as the gateway's (createLogger), writing its lines into `lines`. */
function logged() {
  const lines: string[] = [];
  return { logger: createLogger("info", { write: (line: string) => void lines.push(line) }), lines };
}

/** The usage rows the configured database holds, whole, by request id. */
async function storedRows(): Promise<UsageRecord[]> {
  const database = await openDatabase({
    dataDir: process.env.SLUICE_DATA_DIR ?? "",
    ...(process.env.DATABASE_URL ? { databaseUrl: process.env.DATABASE_URL } : {}),
  });
  try {
    return await database.db.selectFrom("usage_records").selectAll().orderBy("request_id").execute();
  } finally {
    await database.close();
  }
}

const byId = (list: UsageRecord[]) => [...list].sort((a, b) => (a.request_id < b.request_id ? -1 : 1));

/** The checks both engines pass: a log imported whole, then again adding nothing. */
function importsTheLog(dir: () => string) {
  it("inserts every row of every contents line, skipping the other lines, and nothing the second time", async () => {
    const { text, dropped } = gatewayLog("whole");
    const file = join(dir(), "gateway.log");
    writeFileSync(file, text);
    const first = await cli("usage", "import", file);
    expect(first.json()).toEqual({ read: 33, inserted: 33, alreadyPresent: 0, refused: [] });
    expect(first).toMatchObject({
      code: 0,
      err: "usage import: 33 rows read: 33 inserted, 0 already present, 0 refused\n",
    });
    expect(byId(await storedRows())).toEqual(byId(dropped));
    const again = await cli("usage", "import", file);
    expect(again.json()).toEqual({ read: 33, inserted: 0, alreadyPresent: 33, refused: [] });
    expect(again.code).toBe(0);
  });

  it("reports a row the database refuses, with its line, and imports the rest: exit 1", async () => {
    const refused = usageRow("bad_null_project", { project_id: null as unknown as string });
    const { text } = gatewayLog("partly", refused);
    const file = join(dir(), "partly.log");
    writeFileSync(file, text);
    const result = await cli("usage", "import", file);
    expect(result.code).toBe(1);
    const summary = result.json() as { refused: { line: number; requestId: string; reason: string }[] };
    expect(summary).toMatchObject({ read: 34, inserted: 33, alreadyPresent: 0 });
    const line =
      text
        .split("\n")
        .findIndex((each) => each.includes("their contents") && each.includes("bad_null_project")) + 1;
    expect(summary.refused).toEqual([
      {
        line,
        requestId: "bad_null_project",
        reason: expect.stringMatching(/^refused by the database: .*null/i),
      },
    ]);
    expect(result.err).toBe(
      "usage import: 34 rows read: 33 inserted, 0 already present, 1 refused (listed on stdout, with their lines and reasons)\n",
    );
    expect((await storedRows()).map((row) => row.request_id)).toContain("partly_full_29");
  });
}

describe("sluice usage import", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-import-"));
  const saved = { ...process.env };

  beforeAll(async () => {
    process.env.SLUICE_DATA_DIR = dataDir;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
    delete process.env.DATABASE_URL;
    expect((await cli("projects", "create", "--name", "P", "--provider", "provider-a")).code).toBe(0);
  });
  afterAll(() => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
  });

  importsTheLog(() => dataDir);

  it("reads standard input with no file or with -", async () => {
    const { text, dropped } = gatewayLog("stdin");
    const file = join(dataDir, "stdin.log");
    writeFileSync(file, text);
    for (const argv of [
      ["usage", "import"],
      ["usage", "import", "-"],
    ]) {
      const fd = openSync(file, "r");
      const out = capture();
      const err = capture();
      try {
        expect(await runCli(argv, { out: out.stream, err: err.stream, stdin: fd })).toBe(0);
      } finally {
        closeSync(fd);
      }
      expect(JSON.parse(out.text())).toMatchObject({ read: 33 });
    }
    const stored = new Set((await storedRows()).map((row) => row.request_id));
    expect(dropped.every((row) => stored.has(row.request_id))).toBe(true);
  });

  // docs/operations.md, "Usage rows": without the CLI at hand, jq and the database's shell insert
  // the rows again. The snippet runs as the page writes it, on a log as the gateway writes it.
  const hasCommand = (name: string) => spawnSync(name, ["--version"]).status === 0;
  // Skipped without them, but not in CI, whose `.ci/run` installs both.
  it.skipIf(process.env.CI !== "true" && (!hasCommand("jq") || !hasCommand("sqlite3")))(
    "the operations page's fallback without the CLI (jq, then sqlite3) stores the dropped rows as they were",
    async () => {
      const page = readFileSync(new URL("../../docs/operations.md", import.meta.url), "utf8");
      const after = page.slice(page.indexOf("Without the CLI at hand"));
      const snippet = /```sh\n([\s\S]*?)```/.exec(after)?.[1] ?? "";
      expect(snippet).toContain("sqlite3");
      const dropped = [
        usageRow("jq_0", {
          model: "it's a \\ model",
          error_code: null,
          cost_usd: 0.000000001,
          latency_ms: 10.25,
        }),
        usageRow("jq_1", {
          status: 502,
          outcome: "error",
          error_code: "PROVIDER_ERROR",
          cost_usd: null,
          streamed: 1,
        }),
        usageRow("jq_2", { provider_answered: 2, requests: 3, key_id: null, ttfb_ms: null }),
      ];
      const { logger, lines } = logged();
      usageRecorderReports(createMetrics(), logger).onDropped?.(dropped.length, "shutdown", dropped);
      const work = mkdtempSync(join(tmpdir(), "sluice-jq-"));
      try {
        writeFileSync(join(work, "gateway.log"), lines.join(""));
        const run = spawnSync("bash", ["-e", "-c", snippet], { cwd: work, encoding: "utf8" });
        expect(run.stderr).toBe("");
        expect(run.status).toBe(0);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
      const stored = (await storedRows()).filter((row) => row.request_id.startsWith("jq_"));
      expect(byId(stored)).toEqual(byId(dropped));
    },
  );

  it("imports a long log in batches, counting apart the rows stored already among them", async () => {
    const { logger, lines } = logged();
    const many = rows(1030, "many");
    usageRecorderReports(createMetrics(), logger).onDropped?.(many.length, "shutdown", many);
    const file = join(dataDir, "many.log");
    writeFileSync(file, lines.join(""));
    // Some rows of the first batch and of the last stored already.
    const database = await openDatabase({ dataDir });
    try {
      await database.db
        .insertInto("usage_records")
        .values([many[3], many[499], many[1029]] as UsageRecord[])
        .execute();
    } finally {
      await database.close();
    }
    const result = await cli("usage", "import", file);
    expect(result.json()).toEqual({ read: 1030, inserted: 1027, alreadyPresent: 3, refused: [] });
    const stored = new Set((await storedRows()).map((row) => row.request_id));
    expect(many.filter((row) => !stored.has(row.request_id))).toEqual([]);
  });

  it("maps each line's rows by its own columns: a line of an older release, without the newer columns, imports with their defaults", async () => {
    const { text } = gatewayLog("older");
    const older = text
      .split("\n")
      .map((line) => {
        if (!line.includes('"usage rows dropped: their contents"')) return line;
        const parsed = JSON.parse(line) as { columns: string[]; rows: unknown[][] };
        const kept = parsed.columns.flatMap((column, index) =>
          column === "requests" || column === "provider_answered" ? [] : [index],
        );
        return JSON.stringify({
          ...parsed,
          columns: kept.map((index) => parsed.columns[index]),
          rows: parsed.rows.map((row) => kept.map((index) => row[index])),
        });
      })
      .join("\n");
    const file = join(dataDir, "older.log");
    writeFileSync(file, older);
    const result = await cli("usage", "import", file);
    expect(result.json()).toEqual({ read: 33, inserted: 33, alreadyPresent: 0, refused: [] });
    const row = (await storedRows()).find((each) => each.request_id === "older_full_3");
    expect(row).toEqual({
      ...usageRow("older_full_3", { model: "model-3", cost_usd: 0.003, latency_ms: 10.25 }),
    });
  });

  // journalctl (`Dec 02 10:00:00 host sluice[812]: {…}`), `docker logs -t` and `kubectl logs
  // --timestamps` (`2026-12-02T10:00:00.123456789Z {…}`) write each line behind a prefix, Docker's
  // json-file driver in a `log` member: every contents line was skipped, and the import said 0 rows
  // read, 0 refused, exit 0.
  it("reads the contents lines a log collector wrote behind a prefix of its own, or wrapped", async () => {
    const { text, dropped } = gatewayLog("prefixed");
    const forms = [
      (line: string) => `Dec 02 10:00:00 gw-1 sluice[812]: ${line}`,
      (line: string) => `2026-12-02T10:00:00.123456789Z ${line}`,
      (line: string) => JSON.stringify({ log: `${line}\n`, stream: "stdout", time: "2026-12-02T10:00:00Z" }),
    ];
    // Each contents line in another form (the three lines: 25 rows, 5, 3), the other lines too.
    let contents = 0;
    const prefixed = text
      .split("\n")
      .map((line) => {
        if (line === "") return line;
        const form = line.includes("their contents") ? contents++ : 0;
        return (forms[form % 3] as (line: string) => string)(line);
      })
      .join("\n");
    const file = join(dataDir, "prefixed.log");
    writeFileSync(file, prefixed);
    const result = await cli("usage", "import", file);
    expect(contents).toBe(3);
    expect(result.json()).toEqual({ read: 33, inserted: 33, alreadyPresent: 0, refused: [] });
    const stored = new Set((await storedRows()).map((row) => row.request_id));
    expect(dropped.every((row) => stored.has(row.request_id))).toBe(true);
  });

  // A prefix of a collector's own format may hold a brace before the line's JSON (a template's
  // `{pod}` or a syslog field): the JSON was read from the first brace only, and the line refused.
  it("reads a contents line behind a prefix that holds a brace of its own", async () => {
    const { text, dropped } = gatewayLog("braced");
    const braced = text
      .split("\n")
      .map((line) => (line === "" ? line : `2026-12-02T10:00:00Z {pod=sluice-0} [a{b] ${line}`))
      .join("\n");
    const file = join(dataDir, "braced.log");
    writeFileSync(file, braced);
    const result = await cli("usage", "import", file);
    expect(result.json()).toEqual({ read: 33, inserted: 33, alreadyPresent: 0, refused: [] });
    const stored = new Set((await storedRows()).map((row) => row.request_id));
    expect(dropped.every((row) => stored.has(row.request_id))).toBe(true);
  });

  // A contents line cut short is no JSON: said, not skipped as if the log held no rows.
  it("refuses a line that names the contents message but is no JSON, saying so", async () => {
    const { text } = gatewayLog("cut");
    const lines = text.split("\n");
    const at = lines.findIndex((line) => line.includes('"usage rows dropped: their contents"'));
    const line = lines[at] ?? "";
    // Its middle lost: the message at its end stays.
    lines[at] = `${line.slice(0, 200)}${line.slice(line.length - 60)}`;
    const file = join(dataDir, "cut.log");
    writeFileSync(file, lines.join("\n"));
    const result = await cli("usage", "import", file);
    expect(result.code).toBe(1);
    const summary = result.json() as { refused: { line: number; reason: string }[] };
    expect(summary).toMatchObject({ read: 8, inserted: 8 });
    expect(summary.refused).toEqual([
      { line: at + 1, reason: expect.stringMatching(/^the line names the contents message but is no JSON/) },
    ]);
  });

  it("refuses, with a clear reason, a line with an unknown column and a row of the wrong shape, importing the rest", async () => {
    const { text } = gatewayLog("shape");
    const lines = text.split("\n");
    const contents = lines.flatMap((line, index) =>
      line.includes('"usage rows dropped: their contents"') ? [index] : [],
    );
    const [first, second, third] = contents as [number, number, number];
    // The first line (25 rows) as a newer release would write it, a column more.
    const newer = JSON.parse(lines[first] ?? "") as { columns: string[]; rows: unknown[][] };
    lines[first] = JSON.stringify({
      ...newer,
      columns: [...newer.columns, "colour"],
      rows: newer.rows.map((row) => [...row, "blue"]),
    });
    // One row of the second line short of a value, one with a string for a number.
    const short = JSON.parse(lines[second] ?? "") as { columns: string[]; rows: unknown[][] };
    short.rows[0] = short.rows[0]?.slice(1) ?? [];
    (short.rows[1] as unknown[])[short.columns.indexOf("status")] = "200";
    // One with a negative cost, one with a latency JSON reads as Infinity: no row the gateway writes.
    (short.rows[2] as unknown[])[short.columns.indexOf("cost_usd")] = -0.5;
    (short.rows[3] as unknown[])[short.columns.indexOf("latency_ms")] = 123456789.5;
    lines[second] = JSON.stringify(short).replace("123456789.5", "1e400");
    const file = join(dataDir, "shape.log");
    writeFileSync(file, lines.join("\n"));
    const result = await cli("usage", "import", file);
    expect(result.code).toBe(1);
    const summary = result.json() as { refused: { line: number; requestId?: string; reason: string }[] };
    expect(summary).toMatchObject({ read: 33, inserted: 4, alreadyPresent: 0 });
    expect(summary.refused).toHaveLength(29);
    expect(summary.refused[0]).toEqual({
      line: first + 1,
      requestId: "shape_full_0",
      reason:
        "unknown column \"colour\": this build's usage table has none (a log of a newer release: import it with that release's CLI)",
    });
    expect(summary.refused.slice(25)).toEqual([
      { line: second + 1, reason: "21 values for 22 columns" },
      { line: second + 1, requestId: "shape_full_26", reason: "status: a number expected, a string given" },
      {
        line: second + 1,
        requestId: "shape_full_27",
        reason: "cost_usd: a finite number of 0 or more expected, -0.5 given",
      },
      {
        line: second + 1,
        requestId: "shape_full_28",
        reason: "latency_ms: a finite number of 0 or more expected, Infinity given",
      },
    ]);
    expect(third).toBeGreaterThan(second);
  });

  it.each([
    [
      ["usage", "import", "/nonexistent/gateway.log"],
      /^error: usage import: cannot read \/nonexistent\/gateway.log \(no such file\)$/,
    ],
    [
      ["usage", "import", "a.log", "b.log"],
      /^error: unexpected argument "b.log": usage import takes \[FILE\]$/,
    ],
  ])("refuses %j as a usage error", async (argv, message) => {
    const result = await cli(...argv);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toMatch(message);
  });
});

describe.skipIf(!postgresAvailable)("sluice usage import on PostgreSQL", () => {
  const saved = { ...process.env };
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-import-pg-"));
  let drop: () => Promise<void> = async () => {};

  beforeAll(async () => {
    const schema = await createPostgresSchema();
    drop = schema.drop;
    process.env.DATABASE_URL = schema.url;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
    process.env.SLUICE_DATA_DIR = dataDir;
    expect((await cli("projects", "create", "--name", "P", "--provider", "provider-a")).code).toBe(0);
  });
  afterAll(async () => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
    await drop();
  });

  importsTheLog(() => dataDir);
});

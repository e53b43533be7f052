import { randomBytes } from "node:crypto";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { capture, cli } from "../../test/support/cli-run.js";
import { projectRow } from "../../test/support/project-row.js";
import { usageRow } from "../../test/support/usage-row.js";
import { openAdminContext } from "../admin/admin-context.js";
import { monthlySpendCapRule } from "../admin/project-input.js";
import { encodeProjectListCursor, projectListLimit } from "../admin/project-list-cursor.js";
import { encodeUsageReportCursor } from "../admin/usage-report-cursor.js";
import { loadConfig } from "../config.js";
import { openDatabase } from "../storage/database.js";
import { createUsageRepository } from "../storage/usage-repository.js";
import { runCli } from "./main.js";

describe("sluice CLI", () => {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-cli-"));
  const saved = { ...process.env };
  const masterKey = randomBytes(32).toString("base64");

  beforeAll(() => {
    process.env.SLUICE_DATA_DIR = dataDir;
    process.env.SLUICE_MASTER_KEY = masterKey;
    delete process.env.DATABASE_URL;
  });
  afterAll(() => {
    process.env = saved;
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.each([
    {
      stdin: "nothing (an unset variable piped in)",
      open: () => {
        const empty = join(dataDir, "empty-stdin");
        writeFileSync(empty, "");
        return openSync(empty, "r");
      },
      said: /^error: standard input is empty: --api-key-stdin reads the provider key from it\n/,
    },
    {
      stdin: "what cannot be read (a directory given as it)",
      open: () => openSync(dataDir, "r"),
      said: /^error: --api-key-stdin: cannot read standard input \(a directory\)\n\nUsage: /,
    },
  ])("says why when --api-key-stdin gets $stdin, as a usage error", async ({ open, said }) => {
    const fd = open();
    try {
      const err = capture();
      const code = await runCli(["keys", "add", "p", "--provider", "provider-a", "--api-key-stdin"], {
        out: capture().stream,
        err: err.stream,
        stdin: fd,
      });
      expect(code).toBe(2);
      expect(err.text()).toMatch(said);
    } finally {
      closeSync(fd);
    }
  });

  it("names a missing --provider before it reads the key piped in, which it leaves unread", async () => {
    const piped = join(dataDir, "piped-key");
    writeFileSync(piped, "sk-live-0123456789abcdef");
    for (const contents of ["sk-live-0123456789abcdef", ""]) {
      writeFileSync(piped, contents);
      const fd = openSync(piped, "r");
      try {
        const err = capture();
        const code = await runCli(["keys", "add", "p", "--api-key-stdin", "--label", " "], {
          out: capture().stream,
          err: err.stream,
          stdin: fd,
        });
        expect(code).toBe(2);
        expect(err.text()).toMatch(/^error: Invalid provider key: --provider: is required; --label: /);
        // Nothing was read from standard input: the key is still there for the command run again.
        expect(readSync(fd, Buffer.alloc(64), 0, 64, null)).toBe(contents.length);
      } finally {
        closeSync(fd);
      }
    }
  });

  it("refuses any command but projects create where there is no database, creating nothing there", async () => {
    const elsewhere = mkdtempSync(join(tmpdir(), "sluice-cli-elsewhere-"));
    process.env.SLUICE_DATA_DIR = elsewhere;
    try {
      const listed = await cli("projects", "update", "p1", "--monthly-spend-cap", "12.50");
      expect(listed.code).toBe(1);
      expect(listed.err).toContain(`no Sluice database in ${elsewhere} (SLUICE_DATA_DIR)`);
      expect(readdirSync(elsewhere)).toEqual([]);
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it("names the database file when what the data dir holds under its name is not an SQLite database", async () => {
    const other = mkdtempSync(join(tmpdir(), "sluice-cli-notadb-"));
    writeFileSync(join(other, "sluice.sqlite"), randomBytes(8192));
    process.env.SLUICE_DATA_DIR = other;
    try {
      expect(await cli("projects", "list")).toMatchObject({
        code: 1,
        err:
          `error: SLUICE_DATA_DIR (${other}) cannot be used: cannot open the database ${other}/sluice.sqlite ` +
          "(the file is not an SQLite database) (file is not a database)\n",
      });
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      rmSync(other, { recursive: true, force: true });
    }
  });

  it("names SLUICE_DATA_DIR and why when its path runs through a file", async () => {
    const notADirectory = join(dataDir, "a-file");
    writeFileSync(notADirectory, "");
    const under = join(notADirectory, "data");
    process.env.SLUICE_DATA_DIR = under;
    delete process.env.SLUICE_MASTER_KEY;
    const reason = "(a part of its path is a file, not a directory) (ENOTDIR: not a directory";
    try {
      expect(await cli("projects", "list")).toMatchObject({
        code: 1,
        err:
          `error: SLUICE_DATA_DIR (${under}) cannot be used: cannot look for the database ${under}/sluice.sqlite ` +
          `${reason}, stat '${under}/sluice.sqlite')\n`,
      });
      expect(await cli("projects", "create", "--name", "x", "--provider", "provider-a")).toMatchObject({
        code: 1,
        err:
          `error: SLUICE_DATA_DIR (${under}) cannot be used: cannot read the master key file ${under}/master.key ` +
          `${reason}, open '${under}/master.key')\n`,
      });
      process.env.SLUICE_MASTER_KEY = masterKey;
      expect(await cli("projects", "create", "--name", "x", "--provider", "provider-a")).toMatchObject({
        code: 1,
        err:
          `error: SLUICE_DATA_DIR (${under}) cannot be used: cannot open the database ${under}/sluice.sqlite ` +
          `${reason}, mkdir '${under}')\n`,
      });
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      process.env.SLUICE_MASTER_KEY = masterKey;
    }
  });

  it("creates, shows, updates, lists and deletes a project", async () => {
    const created = await cli(
      "projects",
      "create",
      "--id",
      "cli-demo",
      "--name",
      "Demo",
      "--provider",
      "provider-b",
      "--test-mode",
      "true",
    );
    expect(created.code).toBe(0);
    const body = created.json() as { project: { id: string; testMode: boolean }; testKey: string };
    expect(body.project).toMatchObject({ id: "cli-demo", testMode: true });
    expect(body.testKey).toMatch(/^tk_/);
    const schemaFile = join(dataDir, "schema.json");
    // Saved with a UTF-8 byte order mark, as Windows editors do: read as the JSON it holds.
    writeFileSync(
      schemaFile,
      `\uFEFF${JSON.stringify({ type: "object", properties: { title: { type: "string" } }, required: ["title"] })}`,
    );
    const updated = await cli(
      "projects",
      "update",
      "cli-demo",
      "--output-schema",
      schemaFile,
      "--rate-limit",
      "30",
    );
    expect(updated.code).toBe(0);
    expect(updated.json()).toMatchObject({
      outputSchema: { required: ["title"] },
      rateLimits: { perMinute: 30 },
    });
    expect((await cli("projects", "show", "cli-demo")).json()).toMatchObject({
      id: "cli-demo",
      provider: "provider-b",
    });
    expect(
      ((await cli("projects", "list")).json() as Array<{ id: string }>).map((project) => project.id),
    ).toContain("cli-demo");
    expect((await cli("projects", "delete", "cli-demo")).code).toBe(0);
    const gone = await cli("projects", "show", "cli-demo");
    expect(gone.code).toBe(1);
    expect(gone.err).toBe('error: Project "cli-demo" does not exist\n');
  });

  it("lists every project as a bare array, or with --limit or --cursor one page as the admin API answers it", async () => {
    for (const id of ["cli-page-1", "cli-page-2", "cli-page-3"])
      expect(
        (await cli("projects", "create", "--id", id, "--name", id, "--provider", "provider-a")).code,
      ).toBe(0);
    const every = (await cli("projects", "list")).json() as { id: string }[];
    const ids = every.map((project) => project.id);
    expect(ids).toEqual(expect.arrayContaining(["cli-page-1", "cli-page-2", "cli-page-3"]));
    const first = (await cli("projects", "list", "--limit", "2")).json() as {
      data: { id: string }[];
      next: string;
    };
    expect(first.data.map((project) => project.id)).toEqual(ids.slice(0, 2));
    const rest = (await cli("projects", "list", "--limit", "200", "--cursor", first.next)).json() as {
      data: { id: string }[];
    };
    expect(rest).not.toHaveProperty("next");
    expect(rest.data.map((project) => project.id)).toEqual(ids.slice(2));
    for (const id of ["cli-page-1", "cli-page-2", "cli-page-3"]) await cli("projects", "delete", id);
  });

  it("writes the whole project list a page at a time, waiting while the output is full, as one JSON array", async () => {
    const context = await openAdminContext(loadConfig(), () => {});
    const ids = Array.from({ length: 2 * projectListLimit.max + 5 }, (_, i) => `cli-many-${i}`);
    try {
      for (const id of ids) await context.admin.createProject({ id, name: id, provider: "provider-a" });
    } finally {
      await context.close();
    }
    try {
      // The pages as the admin API answers them, read with --limit and --cursor.
      const expected: unknown[] = [];
      let next: string | undefined;
      do {
        const page = (
          await cli(
            "projects",
            "list",
            "--limit",
            String(projectListLimit.max),
            ...(next ? ["--cursor", next] : []),
          )
        ).json() as { data: unknown[]; next?: string };
        expected.push(...page.data);
        next = page.next;
      } while (next !== undefined);
      expect(expected.length).toBeGreaterThan(2 * projectListLimit.max);

      // An output that takes one small write at a time and asks to wait after each (a slow pipe).
      const writes: Array<{ text: string; waiting: number }> = [];
      const out = new Writable({
        highWaterMark: 1,
        write(_chunk, _encoding, done) {
          setTimeout(done, 5);
        },
      });
      const write = out.write.bind(out);
      out.write = ((chunk: string, ...rest: never[]) => {
        writes.push({ text: String(chunk), waiting: out.writableLength });
        return write(chunk, ...rest);
      }) as typeof out.write;
      const code = await runCli(["projects", "list"], { out, err: capture().stream, stdin: 0 });
      expect(code).toBe(0);
      const text = writes.map((write) => write.text).join("");
      // Word for word what one JSON.stringify of every project writes.
      expect(text).toBe(`${JSON.stringify(expected, null, 2)}\n`);
      // A write a page (three pages, and the closing bracket), each once the one before was taken.
      expect(writes.length).toBeGreaterThanOrEqual(3);
      expect(writes.map((write) => write.waiting)).toEqual(writes.map(() => 0));

      // An output closed after its first page (a reader that stopped, `| head`): nothing more is
      // read or written, and the command ends.
      let taken = 0;
      const closing = new Writable({
        highWaterMark: 1,
        write(_chunk, _encoding, done) {
          taken++;
          done();
          closing.destroy();
        },
      });
      const stopped = await runCli(["projects", "list"], { out: closing, err: capture().stream, stdin: 0 });
      expect(stopped).toBe(0);
      expect(taken).toBe(1);
    } finally {
      const context = await openAdminContext(loadConfig(), () => {});
      for (const id of ids) await context.admin.deleteProject(id);
      await context.close();
    }
  });

  it.each([
    [["--limit", "0"], "--limit: must be a whole number from 1 to 200"],
    [["--limit", "201"], "--limit: must be a whole number from 1 to 200"],
    [["--limit", "0200"], "--limit: must be a whole number from 1 to 200, without a leading zero"],
    [["--cursor", "x"], "--cursor: is not a cursor the project list answered (its `next`)"],
  ])(
    "names the flag of a bad project list page %j, as a usage error before opening the database",
    async (flags, problem) => {
      const result = await cliWithoutDatabase("projects", "list", ...flags);
      expect(result.code).toBe(2);
      expect(
        result.err.startsWith(`error: Invalid project list query: ${problem}\n\nUsage: sluice`),
        result.err,
      ).toBe(true);
    },
  );

  it("clears optional project values with --clear, one flag name each", async () => {
    const created = await cli(
      "projects",
      "create",
      "--id",
      "cli-clear",
      "--name",
      "Clear",
      "--provider",
      "provider-a",
      "--team-id",
      "team-1",
      "--model",
      "gpt-4.1-mini",
      "--output-schema",
      '{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}',
      "--rate-limit",
      "30",
      "--monthly-spend-cap",
      "5",
    );
    expect(created.code).toBe(0);
    const cleared = await cli(
      "projects",
      "update",
      "cli-clear",
      "--clear",
      "output-schema",
      "--clear",
      "team-id",
      "--clear",
      "model",
      "--clear",
      "rate-limit",
      "--clear",
      "monthly-spend-cap",
    );
    expect(cleared.err).toBe("");
    expect(cleared.code).toBe(0);
    expect(cleared.json()).toMatchObject({
      teamId: null,
      model: null,
      outputSchema: null,
      rateLimits: { perMinute: null },
      monthlySpendCapUsd: null,
    });
  });

  it.each([
    [["--clear", "name"], /--clear takes one of: model, team-id, /],
    [["--clear", "team-id", "--team-id", "t"], /--team-id and --clear team-id contradict each other/],
  ])("refuses projects update %j as a usage error", async (flags, message) => {
    const result = await cli("projects", "update", "cli-clear", ...flags);
    expect(result.code).toBe(2);
    expect(result.err).toMatch(message);
  });

  it("adds a key once with its partial key, lists it without secrets and revokes it", async () => {
    await cli("projects", "create", "--id", "cli-keys", "--name", "Keys", "--provider", "provider-a");
    const added = await cli(
      "keys",
      "add",
      "cli-keys",
      "--provider",
      "provider-a",
      "--api-key",
      "sk-live-secret-value-123",
    );
    expect(added.code).toBe(0);
    const key = added.json() as { keyId: string; partialKey: string };
    expect(key.partialKey).toMatch(/^sk_sluice_/);
    expect(added.out).not.toContain("sk-live-secret-value-123");
    const listed = await cli("keys", "list", "cli-keys");
    expect(listed.out).not.toContain(key.partialKey);
    expect(listed.out).not.toContain("sk-live-secret-value-123");
    expect(listed.json()).toEqual([
      expect.objectContaining({ keyId: key.keyId, provider: "provider-a", revokedAt: null }),
    ]);
    expect((await cli("keys", "revoke", "cli-keys", key.keyId)).code).toBe(0);
    const again = await cli("keys", "revoke", "cli-keys", key.keyId);
    expect(again.code).toBe(1);
    const rotated = await cli("test-keys", "rotate", "cli-keys");
    expect(rotated.json()).toMatchObject({ testKey: expect.stringMatching(/^tk_/) });
    expect((await cli("usage", "cli-keys", "--group-by", "model")).json()).toMatchObject({
      groupBy: "model",
      rows: [],
    });
  });

  it("refuses a model the catalogue lists under another provider, as the admin API does", async () => {
    const args = ["projects", "create", "--id", "cli-mismatch", "--name", "M", "--provider", "provider-b"];
    const result = await cliWithoutDatabase(...args, "--model", "gpt-4.1");
    expect(result.code).toBe(2);
    expect(result.err).toMatch(
      /^error: model "gpt-4.1" is a provider-a model; this project's provider is provider-b\n\nUsage: sluice/,
    );
    expect((await cli(...args, "--model", "claude-haiku-4-5")).code).toBe(0);
    const updated = await cli("projects", "update", "cli-mismatch", "--provider", "provider-c");
    expect(updated.code).toBe(1);
    expect(updated.err).toContain('model "claude-haiku-4-5" is a provider-b model');
  });

  it.each([
    [["projects", "create", "--name", "x", "--provider", "bogus"], /^error: Invalid project: --provider: /],
    [
      ["projects", "create", "--name", "x", "--provider", "provider-a", "--device-check-team-id", "abc"],
      /^error: Invalid project: --device-check-team-id: /,
    ],
    [
      ["keys", "add", "cli-flags", "--provider", "provider-a", "--api-key", "a b"],
      /^error: Invalid provider key: --api-key: /,
    ],
    [
      ["projects", "create", "--name", "Prod\u001b]0;owned\u0007", "--provider", "provider-a"],
      /^error: Invalid project: --name: must not hold control, bidirectional or zero-width characters \(U\+001B at character 5\)\n/,
    ],
    [
      ["projects", "update", "cli-flags", "--name", "admin\u202Etset"],
      /^error: Invalid project update: --name: must not hold control, bidirectional or zero-width characters \(U\+202E at character 6\)\n/,
    ],
    [
      [
        "keys",
        "add",
        "cli-flags",
        "--provider",
        "provider-a",
        "--api-key",
        "sk-0123456789abcdef",
        "--label",
        "backup\u202Etset",
      ],
      /^error: Invalid provider key: --label: must not hold control, bidirectional or zero-width characters \(U\+202E at character 7\)\n/,
    ],
  ])(
    "names the flag of a bad field %j, as a usage error before opening the database",
    async (args, problem) => {
      const result = await cliWithoutDatabase(...args);
      expect(result.code).toBe(2);
      expect(result.err).toMatch(problem);
    },
  );

  it("sets a proxy allow-list from JSON or a file, replaces it and clears it", async () => {
    const chatOnly = { "provider-a": ["POST chat/completions"] };
    const created = await cli(
      "projects",
      "create",
      "--id",
      "cli-allow",
      "--name",
      "Allow",
      "--provider",
      "provider-a",
      "--proxy-allow-list",
      JSON.stringify(chatOnly),
    );
    expect(created.code).toBe(0);
    expect(created.json()).toMatchObject({ project: { proxyAllowList: chatOnly } });
    const listFile = join(dataDir, "allow-list.json");
    const messages = { "provider-b": ["POST messages"] };
    writeFileSync(listFile, JSON.stringify(messages));
    const replaced = await cli("projects", "update", "cli-allow", "--proxy-allow-list", listFile);
    expect(replaced.json()).toMatchObject({ proxyAllowList: messages });
    const cleared = await cli("projects", "update", "cli-allow", "--clear", "proxy-allow-list");
    expect(cleared.json()).toMatchObject({ proxyAllowList: null });
  });

  it("refuses a proxy allow-list rule that does not parse as a usage error, naming the flag and the rule", async () => {
    const bad = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--proxy-allow-list",
      '{"provider-a":["POST chat/completions","post embeddings"]}',
    );
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(
      /^error: Invalid project: --proxy-allow-list provider-a\.1: "post embeddings" has a method in lower case: write POST\n\nUsage: sluice/,
    );
    const notJson = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--proxy-allow-list",
      "{nope",
    );
    // JSON typed on the command line is placed too, as a file's is: the operator sees what to mend.
    expect(notJson).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: --proxy-allow-list is not valid JSON: Expected property name or '\}' in JSON at line 1, column 2 \(it takes a JSON object, or a file holding one\)\n/,
      ),
    });
    const trailingComma = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--output-schema",
      '{"type":"object",}',
    );
    expect(trailingComma).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: --output-schema is not valid JSON: Expected double-quoted property name in JSON at line 1, column 18 \(it takes a JSON object, or a file holding one\)\n/,
      ),
    });
    // A file that is not JSON is named, with where its syntax breaks, not as if no file were given.
    const brokenFile = join(dataDir, "broken-allow-list.json");
    writeFileSync(
      brokenFile,
      '{\n  "provider-a": ["POST chat/completions"]\n  "provider-b": ["POST messages"]\n}\n',
    );
    const broken = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--proxy-allow-list",
      brokenFile,
    );
    expect(broken.code).toBe(2);
    expect(broken.err.split("\n")[0]).toBe(
      `error: --proxy-allow-list: ${JSON.stringify(brokenFile)} is not valid JSON: Expected ',' or '}' after property value in JSON at line 3, column 3`,
    );
    // A JSON list (the provider's key left out) is read as JSON and refused as one, not as a file name.
    const list = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--proxy-allow-list",
      '["POST chat/completions"]',
    );
    expect(list).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: Invalid project update: --proxy-allow-list: Invalid input: expected object, received array\n/,
      ),
    });
    const schemaList = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--output-schema",
      " []",
    );
    expect(schemaList).toMatchObject({
      code: 2,
      err: expect.stringMatching(/^error: Invalid project update: --output-schema: .*received array\n/),
    });
  });

  it("refuses a JSON flag value whose objects name a member twice, naming the flag and each member", async () => {
    // JSON.parse keeps the last of the two without a word: every call refused instead of chat allowed.
    const list = await cliWithoutDatabase(
      "projects",
      "update",
      "cli-anything",
      "--proxy-allow-list",
      '{"provider-a":["POST chat/completions"],"provider-b":[],"provider-a":[]}',
    );
    expect(list.code).toBe(2);
    expect(list.err).toMatch(
      /^error: --proxy-allow-list provider-a: is given more than once\n\nUsage: sluice/,
    );
    const schemaFile = join(dataDir, "repeated-schema.json");
    writeFileSync(
      schemaFile,
      '{"type":"object","type":"object","properties":{"a":{"type":"string","type":"number"}}}',
    );
    const schema = await cliWithoutDatabase(
      "projects",
      "create",
      "--name",
      "Repeated",
      "--provider",
      "provider-a",
      "--output-schema",
      schemaFile,
    );
    expect(schema.code).toBe(2);
    expect(schema.err.split("\n")[0]).toBe(
      "error: --output-schema type: is given more than once; --output-schema properties.a.type: is given more than once",
    );
  });

  it("lists at most 50 problems of an output schema, and how many more it has, as the admin API does", async () => {
    const schemaFile = join(dataDir, "many-problems.json");
    const required = Array.from({ length: 40_000 }, (_, index) => `p${index}`);
    writeFileSync(
      schemaFile,
      JSON.stringify({ type: "object", properties: {}, required, additionalProperties: false }),
    );
    const result = await cliWithoutDatabase(
      "projects",
      "create",
      "--name",
      "Many",
      "--provider",
      "provider-a",
      "--output-schema",
      schemaFile,
    );
    expect(result.code).toBe(2);
    const said = result.err.split("\n")[0] as string;
    expect(said.length).toBeLessThan(16 * 1024);
    expect(said).toMatch(
      /^error: The output schema is invalid: the output schema must be at most 65536 bytes of JSON \(UTF-8\); #\/required\/0: "p0" .*; #\/required\/48: "p48" [^;]*; and 39951 more problems$/,
    );
  });

  it("names the flags, not the fields, in the rules the admin use case checks", async () => {
    const keyFile = join(dataDir, "not-a-key.p8");
    writeFileSync(keyFile, "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n");
    const args = ["projects", "create", "--name", "Rules", "--provider", "provider-a"];
    const badKey = await cliWithoutDatabase(...args, "--device-check-private-key-file", keyFile);
    expect(badKey.code).toBe(2);
    expect(badKey.err).toMatch(
      /^error: Invalid project: --device-check-private-key-file: must be the PEM contents of an Apple \.p8 \(EC P-256\) key\n\nUsage: sluice/,
    );
    const schemaFile = join(dataDir, "bad-schema.json");
    writeFileSync(schemaFile, JSON.stringify({ type: "object", properties: { a: { type: "nonsense" } } }));
    const badSchema = await cliWithoutDatabase(...args, "--output-schema", schemaFile);
    expect(badSchema.code).toBe(2);
    expect(badSchema.err).toMatch(/^error: The output schema is invalid: .*\n\nUsage: sluice/);
    const badModel = await cliWithoutDatabase("projects", "update", "cli-anything", "--model", "../evil");
    expect(badModel.code).toBe(2);
    expect(badModel.err).toMatch(/^error: Invalid project: --model: /);
    expect(await cliWithoutDatabase(...args, "--device-check", "true")).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: Device Check needs --device-check-team-id, --device-check-key-id and --device-check-private-key-file \(the \.p8 file's contents\) when enabled\n\nUsage: sluice/,
      ),
    });
    expect(await cliWithoutDatabase(...args, "--save-images-to-vault", "true")).toMatchObject({
      code: 2,
      err: expect.stringMatching(
        /^error: --save-images-to-vault needs a --team-id \(it is the first segment of the vault path\)\n\nUsage: sluice/,
      ),
    });
    const badId = await cliWithoutDatabase("projects", "show", "bad id!");
    expect(badId.code).toBe(2);
    expect(badId.err).toMatch(/^error: the project id "bad id!" is malformed: must match /);
  });

  // Summed as doubles, each of the report's slices of 5,000 rows past 2^53 billionths (some $9
  // million) lost its billionth: 9007199.254740993 was printed (the nearest double to 2^53).
  it("prints a usage report's cost summed exactly past 2^53 billionths of a dollar", async () => {
    const database = await openDatabase({ dataDir });
    try {
      await database.db
        .insertInto("projects")
        .values(projectRow("cli-millions", "2026-10-01T00:00:00.000Z"))
        .execute();
      const start = Date.parse("2026-11-01T00:00:00.000Z");
      // The whole first, then one billionth in each slice of 5,000 rows (the rest cost 0).
      await createUsageRepository(database.db, database.sqlite).insertBatch(
        Array.from({ length: 12 * 5000 }, (_, index) =>
          usageRow(`cli-millions-${index}`, {
            project_id: "cli-millions",
            created_at: new Date(start + index).toISOString(),
            cost_usd: index === 0 ? 2 ** 53 / 1e9 : index % 5000 === 1 ? 1e-9 : 0,
          }),
        ),
      );
    } finally {
      await database.close();
    }
    const report = await cli("usage", "cli-millions", "--from", "2026-11-01", "--to", "2026-11-02");
    expect(report.code).toBe(0);
    expect(report.out).toContain('"costUsd": 9007199.254741004,');
  }, 60_000);

  it("refuses a --from after now without --to as a usage error, as it does one after the --to given", async () => {
    // `--to` left out is now: a `--from` in the future is as wrong as one after a `--to` written out.
    const result = await cliWithoutDatabase("usage", "cli-usage", "--from", "2999-01-01");
    expect(result.code).toBe(2);
    expect(result.out).toBe("");
    expect(result.err).toMatch(
      /^error: `--from` must be before `--to`, which is now \(\d{4}-\d\d-\d\dT[\d:.]+Z\) when not given\n\nUsage: sluice/,
    );
  });

  it("refuses a --cursor that contradicts the other flags, or is another list's, as a usage error before opening the database", async () => {
    const cursor = encodeUsageReportCursor({
      projectId: "cli-usage",
      groupBy: "day",
      from: "2026-01-01T00:00:00.000Z",
      to: "2026-02-01T00:00:00.000Z",
      after: "2026-01-10",
    });
    const listCursor = encodeProjectListCursor({ createdAt: "2026-01-01T00:00:00.000Z", id: "p" });
    const refusals: Array<[string[], string]> = [
      [
        ["usage", "cli-usage", "--cursor", cursor, "--group-by", "model"],
        "Invalid usage query: --group-by: differs from the --cursor (day); leave it out to read on in the cursor's report",
      ],
      [
        ["usage", "cli-usage", "--cursor", cursor, "--from", "2026-01-02"],
        "Invalid usage query: --from: differs from the --cursor (2026-01-01T00:00:00.000Z); leave it out to read on in the cursor's report",
      ],
      [
        ["usage", "another-project", "--cursor", cursor],
        "Invalid usage query: --cursor: is a cursor of another project's usage report",
      ],
      [
        ["usage", "cli-usage", "--cursor", listCursor],
        "Invalid usage query: --cursor: is a cursor of the project list, not of a usage report",
      ],
      [
        ["projects", "list", "--cursor", cursor],
        "Invalid project list query: --cursor: is a cursor of a usage report, not of the project list",
      ],
    ];
    for (const [argv, message] of refusals) {
      const result = await cliWithoutDatabase(...argv);
      expect(result.code, argv.join(" ")).toBe(2);
      expect(result.out).toBe("");
      expect(result.err.startsWith(`error: ${message}\n\nUsage: sluice`), result.err).toBe(true);
    }
    // The cursor's own report, read on: the flags that agree with it are no contradiction.
    await cli("projects", "create", "--id", "cli-usage", "--name", "Usage", "--provider", "provider-a");
    const agreeing = await cli("usage", "cli-usage", "--cursor", cursor, "--group-by", "day");
    expect(agreeing.code, agreeing.err).toBe(0);
    expect(agreeing.json()).toMatchObject({ groupBy: "day", from: "2026-01-01T00:00:00.000Z" });
  });

  it.each([
    [["--from", "yesterday"], "--from: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"],
    [["--to="], "--to: must be an ISO instant (2026-11-01T10:00:00Z) or date (2026-11-01)"],
    [["--group-by", "week"], '--group-by: Invalid option: expected one of "day"|"model"|"endpoint"'],
    [["--limit", "0"], "--limit: must be a whole number from 1 to 5000"],
    [["--cursor", "x"], "--cursor: is not a cursor a usage report answered (its `next`)"],
  ])(
    "names the flag of a bad usage query %j, as a usage error before opening the database",
    async (flags, problem) => {
      const result = await cliWithoutDatabase("usage", "cli-usage", ...flags);
      expect(result.code).toBe(2);
      expect(
        result.err.startsWith(`error: Invalid usage query: ${problem}\n\nUsage: sluice`),
        result.err,
      ).toBe(true);
      await cli("projects", "create", "--id", "cli-usage", "--name", "Usage", "--provider", "provider-a");
      const reversed = await cliWithoutDatabase(
        "usage",
        "cli-usage",
        "--from",
        "2026-02-01",
        "--to",
        "2026-01-01",
      );
      expect(reversed.code).toBe(2);
      expect(reversed.err).toMatch(/^error: `--from` must be before `--to`\n\nUsage: sluice/);
    },
  );

  it.each([
    [["projects", "create", "--name", "x"], 2, /^error: Invalid project: --provider: is required\n/],
    [
      ["projects", "create", "--name", "x", "--provider", "provider-z"],
      2,
      /^error: Invalid project: --provider: /,
    ],
    [
      ["projects", "create", "--name", "x", "--provider", "provider-a", "--test-mode", "yes"],
      2,
      /--test-mode takes true or false/,
    ],
    [
      [
        "projects",
        "create",
        "--name",
        "x",
        "--provider",
        "provider-a",
        "--output-schema",
        '{"type":"array"}',
      ],
      2,
      /output schema is invalid/,
    ],
    [["projects", "show"], 2, /the project id is required/],
    [["keys", "add", "nope", "--provider", "provider-a", "--api-key", "sk-123456789"], 1, /does not exist/],
    [["frobnicate"], 2, /unknown command: frobnicate/],
    [
      ["projects", "list", "--bogus"],
      2,
      /^error: projects list does not take --bogus; it takes --limit, --cursor\n/,
    ],
    [["usage", "nope", "--group-by", "week"], 2, /^error: Invalid usage query: --group-by: Invalid option/],
  ])("refuses bad input %j with a clear message and no stack trace", async (argv, code, message) => {
    const result = await cli(...argv);
    expect(result.code).toBe(code);
    expect(result.err).toMatch(message);
    expect(result.err).not.toMatch(/\n\s+at /);
  });

  /**
   * Runs the CLI on an empty data dir and no master key, and checks it stays empty: no database
   * opened, no master key generated.
   */
  async function cliWithoutDatabase(...argv: string[]) {
    const fresh = join(dataDir, `never-opened-${randomBytes(4).toString("hex")}`);
    mkdirSync(fresh);
    process.env.SLUICE_DATA_DIR = fresh;
    delete process.env.SLUICE_MASTER_KEY;
    try {
      const result = await cli(...argv);
      expect(readdirSync(fresh), "the database was opened").toEqual([]);
      return result;
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      process.env.SLUICE_MASTER_KEY = masterKey;
    }
  }

  it.each([
    ["--output-schema", "/nonexistent/schema.json", "no such file"],
    ["--device-check-private-key-file", "/nonexistent/AuthKey.p8", "no such file"],
    ["--output-schema", "/", "a directory"],
  ])("names %s when the file it names cannot be read, as a usage error", async (flag, path, reason) => {
    const result = await cliWithoutDatabase(
      "projects",
      "create",
      "--name",
      "x",
      "--provider",
      "provider-a",
      flag,
      path,
    );
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toBe(`error: ${flag}: cannot read ${JSON.stringify(path)} (${reason})`);
  });

  // The key's contents given where its file's name goes (`--device-check-private-key-file="$(cat
  // AuthKey.p8)"`, or a variable holding the PEM): the message goes to the terminal and CI logs.
  const pem =
    "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgSeCrEtKeYmAtErIaL\n-----END PRIVATE KEY-----";
  it.each([
    ["the PEM itself", pem],
    ["a PEM written on one line with \\n escapes", pem.replaceAll("\n", "\\n")],
  ])("does not quote %s given as the private key file, only its start", async (_what, value) => {
    const result = await cliWithoutDatabase(
      "projects",
      "create",
      "--name",
      "x",
      "--provider",
      "provider-a",
      `--device-check-private-key-file=${value}`,
    );
    expect(result.code).toBe(2);
    expect(result.err).not.toContain("SeCrEtKeYmAtErIaL");
    expect(result.err).not.toContain("MIGHAgEA");
    expect(result.err.split("\n")[0]).toBe(
      `error: --device-check-private-key-file: cannot read "----…" (${value.length} characters), ` +
        "which looks like a file's contents, not its name (no such file)",
    );
  });

  it("quotes a malformed project id longer than any id by its start only: it may be a key typed in its place", async () => {
    const key = "sk-proj-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const result = await cliWithoutDatabase("keys", "add", key, "--provider", "provider-a");
    expect(result.code).toBe(2);
    expect(result.err).not.toContain(key.slice(4));
    expect(result.err.split("\n")[0]).toMatch(
      new RegExp(`^error: the project id "sk-p…" \\(${key.length} characters\\) is malformed: must match `),
    );
  });

  // A provider key pasted into the wrong flag, or run into a flag's name (`--api-key$KEY`, the
  // space forgotten), is quoted by its start only, as a stray argument is.
  it.each([
    [
      ["projects", "update", "p", "--rate-limit"],
      "--rate-limit takes a whole number from 1 to 10000000, not ",
    ],
    [
      ["projects", "update", "p", "--device-rate-limit"],
      "--device-rate-limit takes a whole number from 1 to 10000000, not ",
    ],
    [
      ["projects", "update", "p", "--monthly-spend-cap"],
      `--monthly-spend-cap takes ${monthlySpendCapRule}, in plain decimal digits (such as 25 or 12.50), not `,
    ],
    [["projects", "update", "p", "--output-schema"], "--output-schema: cannot read "],
    [["projects", "update", "p", "--proxy-allow-list"], "--proxy-allow-list: cannot read "],
    [
      ["projects", "update", "p", "--device-check-private-key-file"],
      "--device-check-private-key-file: cannot read ",
    ],
  ])("quotes a key given to %j by its start only", async (argv, said) => {
    const key = "sk-proj-SeCrEt0123456789abcdefghijklmnopqrstuv";
    const result = await cliWithoutDatabase(...argv, key);
    expect(result.code).toBe(2);
    expect(result.err).not.toContain("SeCrEt");
    expect(result.err.split("\n")[0]).toContain(`error: ${said}"sk-p…" (${key.length} characters)`);
  });

  // Pasted with its quotes, after a space or as `Bearer …`: a key of provider C's form (39 characters)
  // is shorter than any value quoted by its length alone.
  it.each([
    ["--rate-limit", `"AIzaSyD-SeCrEt0123456789abcdefghijklmn"`, '"\\"AIz…"'],
    ["--monthly-spend-cap", " AIzaSyD-SeCrEt0123456789abcdefghijklmn", '" AIz…"'],
    ["--output-schema", "Bearer AIzaSyD-SeCrEt0123456789abcdefghijklmn", '"Bear…"'],
  ])("quotes a value holding a key (%j %j) by its start only", async (flag, value, start) => {
    const result = await cliWithoutDatabase("projects", "update", "p", flag, value);
    expect(result.code).toBe(2);
    expect(result.err).not.toContain("SeCrEt");
    expect(result.err.split("\n")[0]).toContain(`${start} (${value.length} characters)`);
  });

  it.each([
    ["--api-key", '"--ap…"'],
    ["--", '"--sk…"'],
  ])("quotes an unknown flag %j run into a key by its start only", async (prefix, start) => {
    const key = "sk-proj-SeCrEt0123456789abcdefghijklmnopqrstuv";
    const flag = `${prefix}${key}`;
    const result = await cliWithoutDatabase("keys", "add", "p", "--provider", "provider-a", flag);
    expect(result.code).toBe(2);
    expect(result.err).not.toContain("SeCrEt");
    expect(result.err.split("\n")[0]).toBe(
      `error: keys add does not take ${start} (${flag.length} characters); it takes --provider, --api-key, --api-key-stdin, --label`,
    );
  });

  it("names an unknown project id of a provider key's form by its start only", async () => {
    // Provider C's keys have 39 characters: a well-formed project id, looked up and not found.
    const key = "AIzaSyC0ffee-0123456789_abcdefghijklmno";
    const result = await cli("projects", "show", key);
    expect(result.code).toBe(1);
    expect(result.err).toBe('error: Project "AIza…" (39 characters) does not exist\n');
  });

  it.each([
    [["projects", "list", "--name", "x"], "projects list does not take --name; it takes --limit, --cursor\n"],
    [
      ["projects", "show", "p", "--provider", "provider-a"],
      "projects show does not take --provider; it takes no flags",
    ],
    [
      ["keys", "add", "p", "--provider", "provider-a", "--api-key", "sk-123456789", "--rate-limit", "5"],
      "keys add does not take --rate-limit; it takes --provider, --api-key, --api-key-stdin, --label\n",
    ],
    [["keys", "list", "p", "--label", "x"], "keys list does not take --label; it takes no flags"],
    [
      ["test-keys", "rotate", "p", "--from", "2026-01-01"],
      "test-keys rotate does not take --from; it takes no flags",
    ],
    [
      ["usage", "p", "--test-mode", "true"],
      "usage does not take --test-mode; it takes --from, --to, --group-by, --limit, --cursor\n",
    ],
    [["usage", "p", "-x"], "usage does not take -x; it takes --from, --to, --group-by, --limit, --cursor\n"],
    [["serve", "--port", "9000"], "serve does not take --port; it takes no flags"],
    [["--bogus"], "--bogus given without a command: sluice <command> [flags]\n"],
    [["--version"], "--version given without a command: sluice <command> [flags]\n"],
    [["-x"], "-x given without a command: sluice <command> [flags]\n"],
    [["projects"], "projects needs a subcommand: one of create, list, show, update, delete, check\n"],
    [["keys"], "keys needs a subcommand: one of add, list, revoke\n"],
    [["test-keys", "--label", "x"], "test-keys needs a subcommand: one of rotate, list, revoke\n"],
    [
      ["projects", "create", "--name", "x", "--provider", "provider-a", "--clear", "model"],
      "projects create does not take --clear; it takes --id, --name, --provider, --model, --team-id, " +
        "--test-mode, --output-schema, --save-images-to-vault, --rate-limit, --device-rate-limit, " +
        "--monthly-spend-cap, --disabled, --device-check, --device-check-team-id, --device-check-key-id, " +
        "--device-check-private-key-file, --device-check-environment, --device-token-mode, --proxy-allow-list\n",
    ],
    [
      ["projects", "update", "p", "--id", "other"],
      "projects update does not take --id; it takes --name, --provider, --model, --team-id, --test-mode, " +
        "--output-schema, --save-images-to-vault, --rate-limit, --device-rate-limit, --monthly-spend-cap, " +
        "--disabled, --device-check, --device-check-team-id, --device-check-key-id, " +
        "--device-check-private-key-file, --device-check-environment, --device-token-mode, --proxy-allow-list, " +
        "--clear\n",
    ],
    [["projects", "show", "p", "q"], 'unexpected argument "q": projects show takes ID\n'],
    [["projects", "list", "p"], 'unexpected argument "p": projects list takes no arguments\n'],
    [
      ["keys", "revoke", "p", "k", "extra"],
      'unexpected argument "extra": keys revoke takes PROJECT KEY_ID\n',
    ],
    // A long stray argument may be a key typed in the wrong place: only its start is quoted.
    [
      ["keys", "add", "p", "--provider", "provider-a", "--api-key-stdin", "sk-live-0123456789abcdef"],
      'unexpected argument "sk-l…" (24 characters): keys add takes PROJECT\n',
    ],
    // An unknown command's words are named bare when plain, quoted when empty or holding a control
    // character (an unset variable, a pasted escape), and by their start only when they may be a key.
    [[""], 'unknown command: ""\n'],
    [["", "projects"], 'unknown command: "" projects\n'],
    [
      ["projects", ""],
      'unknown command: projects ""; projects takes create, list, show, update, delete, check\n',
    ],
    [["frob\u001b[31m"], 'unknown command: "frob\\u001b[31m"\n'],
    [
      ["keys", "sk-proj-0123456789abcdefghijklmnopqrstuvwxyz"],
      'unknown command: keys "sk-p…" (44 characters); keys takes add, list, revoke\n',
    ],
    [["AIzaSyC0ffee-0123456789_abcdefghijklmno", "list"], 'unknown command: "AIza…" (39 characters) list\n'],
    [
      ["projects", "list", "--x\u001b[2J"],
      'projects list does not take "--x\\u001b[2J"; it takes --limit, --cursor\n',
    ],
    [["--\u001b[2J"], '"--\\u001b[2J" given without a command: sluice <command> [flags]\n'],
    [["usage", "p", "--from", "2026-01-01", "--from", "2026-02-01"], "--from is given more than once\n"],
    [
      ["projects", "create", "--name", "a", "--name", "b", "--provider", "provider-a"],
      "--name is given more than once\n",
    ],
    // `--clear` is repeatable, one value each: the same value twice is a slip for another one.
    [
      ["projects", "update", "p", "--clear", "model", "--clear", "team-id", "--clear", "model"],
      "--clear model is given more than once\n",
    ],
    [
      ["keys", "add", "p", "--provider", "provider-a", "--api-key", "sk-123456789", "--api-key-stdin"],
      "--api-key and --api-key-stdin contradict each other\n",
    ],
    [["projects", "create"], "Invalid project: --name: is required; --provider: is required\n"],
    [
      ["projects", "create", "--name", "x", "--provider", "provider-z"],
      "Invalid project: --provider: Invalid option",
    ],
    [
      ["projects", "update", "p", "--provider", "provider-z"],
      "Invalid project update: --provider: Invalid option",
    ],
    [
      ["projects", "update", "p", "--device-check-environment", "staging"],
      "Invalid project update: --device-check-environment: Invalid option",
    ],
    [
      ["projects", "update", "p", "--device-token-mode", "sometimes"],
      "Invalid project update: --device-token-mode: Invalid option",
    ],
    [["keys", "add", "p", "--api-key", "sk-123456789"], "Invalid provider key: --provider: is required\n"],
    [
      ["keys", "add", "prj_x"],
      "Invalid provider key: --provider: is required; --api-key or --api-key-stdin: is required\n",
    ],
    [
      ["keys", "add", "prj_x", "--provider", "provider-a"],
      "Invalid provider key: --api-key or --api-key-stdin: is required\n",
    ],
    [
      ["keys", "add", "p", "--provider", "provider-a", "--api-key", ""],
      "Invalid provider key: --api-key: is empty\n",
    ],
    [["usage", "p", "--group-by", "week"], "Invalid usage query: --group-by: Invalid option"],
    [["usage", "p", "--from", "yesterday"], "Invalid usage query: --from: must be an ISO instant"],
  ])("refuses %j as a usage error naming the flag, before opening the database", async (argv, message) => {
    const result = await cliWithoutDatabase(...argv);
    expect(result.code).toBe(2);
    expect(result.out).toBe("");
    expect(result.err.startsWith(`error: ${message}`), result.err).toBe(true);
  });

  it.each([
    [["projects", "create", "--name", "--provider", "provider-a"], "--name"],
    [["keys", "add", "p", "--provider", "provider-a", "--api-key", "-sk-0123456789abcdef"], "--api-key"],
  ])("says in one line that %j gives a flag a dash-led argument, not its value", async (argv, flag) => {
    const result = await cliWithoutDatabase(...argv);
    expect(result.code).toBe(2);
    expect(result.err).not.toContain("0123456789abcdef");
    expect(result.err.split("\n").slice(0, 3)).toEqual([
      `error: ${flag} is followed by an argument that starts with a dash, not by its value: ` +
        `give its value, or write a value that starts with a dash as ${flag}=VALUE`,
      "",
      "Usage: sluice <command>",
    ]);
  });

  describe.each([["rate-limit"], ["device-rate-limit"]])("--%s", (flag) => {
    it.each([
      ["0x10"],
      ["1e3"],
      [""],
      [" 5 "],
      ["5.0"],
      ["+5"],
      ["0"],
      ["10000001"],
      ["Infinity"],
      ["1_000"],
      ["٣"],
    ])("refuses %j before opening the database", async (value) => {
      const result = await cliWithoutDatabase("projects", "update", "p", `--${flag}=${value}`);
      expect(result.code).toBe(2);
      const message = `error: --${flag} takes a whole number from 1 to 10000000, not ${JSON.stringify(value)}\n`;
      expect(result.err.startsWith(message), result.err).toBe(true);
    });
  });

  it.each([
    ["0x10"],
    ["1e3"],
    [""],
    [" 5 "],
    ["0"],
    ["0.00"],
    ["1000000001"],
    ["-1"],
    [".5"],
    ["5."],
    ["NaN"],
    // Finer than the billionth of a dollar costs are recorded in, as the admin API refuses it.
    ["0.0000000000000001"],
    ["0.0000000004"],
    ["12.1234567891"],
    // Typed digits are taken as written: the rounding forgiven a JSON client's float sum is not.
    ["0.1000000000000001"],
    // Above the most by a billionth, though it reads as the most itself (1e9) as a number.
    ["1000000000.000000001"],
  ])("refuses --monthly-spend-cap %j before opening the database", async (value) => {
    const result = await cliWithoutDatabase("projects", "update", "p", `--monthly-spend-cap=${value}`);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toBe(
      `error: --monthly-spend-cap takes ${monthlySpendCapRule}, in plain decimal digits (such as 25 or 12.50), not ${JSON.stringify(value)}`,
    );
  });

  it.each([
    // More digits than a cap (a floating-point number) keeps: it would be another amount than typed.
    ["123456789.123456789", "123456789.123456791"],
    ["999999999.999999999", "1000000000"],
  ])("refuses --monthly-spend-cap %j, naming the amount it would be kept as", async (value, kept) => {
    const result = await cliWithoutDatabase("projects", "update", "p", `--monthly-spend-cap=${value}`);
    expect(result.code).toBe(2);
    expect(result.err.split("\n")[0]).toBe(
      `error: --monthly-spend-cap takes ${monthlySpendCapRule}, in plain decimal digits (such as 25 or 12.50), not ${JSON.stringify(value)}, which would be kept as ${kept}`,
    );
  });

  it("takes plain decimal numbers at the ends of their ranges", async () => {
    const created = await cli(
      "projects",
      "create",
      "--id",
      "cli-numbers",
      "--name",
      "Numbers",
      "--provider",
      "provider-a",
      "--rate-limit",
      "10000000",
      "--device-rate-limit",
      "1",
      "--monthly-spend-cap",
      "12.50",
    );
    expect(created.err).toBe("");
    expect(created.json()).toMatchObject({
      project: { rateLimits: { perMinute: 10_000_000, devicePerMinute: 1 }, monthlySpendCapUsd: 12.5 },
    });
    const finest = await cli("projects", "update", "cli-numbers", "--monthly-spend-cap", "0.000000001");
    expect(finest.err).toBe("");
    expect(finest.json()).toMatchObject({ monthlySpendCapUsd: 1e-9 });
    // The most, and amounts with trailing zeros or as many digits as a cap keeps, as written.
    for (const [typed, kept] of [
      ["1000000000.000", 1e9],
      ["0.10", 0.1],
      ["8000000.123456789", 8000000.123456789],
      // Zeros that change no amount, however many: 16 digits a side were taken, 17 refused.
      ["5.00000000000000000000", 5],
      ["00000000000000000005.5", 5.5],
    ] as const) {
      const result = await cli("projects", "update", "cli-numbers", "--monthly-spend-cap", typed);
      expect(result.err).toBe("");
      expect(result.json()).toMatchObject({ monthlySpendCapUsd: kept });
    }
  });

  it("prints the usage to stderr, not stdout, when no command is given (exit code 2)", async () => {
    const result = await cli();
    expect(result.code).toBe(2);
    expect(result.out).toBe("");
    expect(result.err).toMatch(/^Usage: sluice <command>/);
    expect((await cli("--help")).out).toMatch(/^Usage: sluice <command>/);
  });

  it("refuses an unknown command before it opens the database or generates a master key", async () => {
    const fresh = join(dataDir, "never-created");
    process.env.SLUICE_DATA_DIR = fresh;
    delete process.env.SLUICE_MASTER_KEY;
    try {
      const result = await cli("projects", "frobnicate");
      expect(result.code).toBe(2);
      expect(result.err).toMatch(
        /^error: unknown command: projects frobnicate; projects takes create, list, show, update, delete, check\n/,
      );
      expect(existsSync(fresh)).toBe(false);
      process.env.DATABASE_URL = "postgres://postgres@127.0.0.1:1/test";
      process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
      expect(await cli("keys", "rotate", "x")).toMatchObject({
        code: 2,
        err: expect.stringMatching(/unknown command/),
      });
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      process.env.SLUICE_MASTER_KEY = saved.SLUICE_MASTER_KEY ?? masterKey;
      delete process.env.DATABASE_URL;
    }
  });

  it("refuses projects create --test-mode true in production as a usage error, before opening the database", async () => {
    const fresh = mkdtempSync(join(tmpdir(), "sluice-cli-production-"));
    process.env.SLUICE_DATA_DIR = fresh;
    process.env.SLUICE_ENV = "production";
    try {
      const args = ["projects", "create", "--id", "prod-test", "--name", "P", "--provider", "provider-a"];
      const refused = await cli(...args, "--test-mode", "true");
      expect(refused.code).toBe(2);
      expect(refused.out).toBe("");
      expect(refused.err.split("\n")[0]).toBe(
        "error: --test-mode cannot be turned on in production (SLUICE_ENV=production): Test Mode is for development and testing only",
      );
      expect(readdirSync(fresh), "the database was opened").toEqual([]);
      // Off, the same project is made; turning it on later depends on the project stored: exit 1.
      expect((await cli(...args, "--test-mode", "false")).code).toBe(0);
      const update = await cli("projects", "update", "prod-test", "--test-mode", "true");
      expect(update.code).toBe(1);
      expect(update.err).toBe(
        "error: --test-mode cannot be turned on in production (SLUICE_ENV=production): Test Mode is for development and testing only\n",
      );
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      if (saved.SLUICE_ENV === undefined) delete process.env.SLUICE_ENV;
      else process.env.SLUICE_ENV = saved.SLUICE_ENV;
      rmSync(fresh, { recursive: true, force: true });
    }
  });

  it("refuses projects update with nothing to change as a usage error naming the flags it takes", async () => {
    const result = await cliWithoutDatabase("projects", "update", "p");
    expect(result.code).toBe(2);
    expect(result.out).toBe("");
    expect(result.err.split("\n")[0]).toBe(
      "error: projects update needs a change: give one or more of --name, --provider, --model, --team-id, " +
        "--test-mode, --output-schema, --save-images-to-vault, --rate-limit, --device-rate-limit, " +
        "--monthly-spend-cap, --disabled, --device-check, --device-check-team-id, --device-check-key-id, " +
        "--device-check-private-key-file, --device-check-environment, --device-token-mode, --proxy-allow-list, " +
        "--clear",
    );
  });

  it("reports a failed serve start as npm start does: one line per problem, exit code 1", async () => {
    // An invalid configuration stops serve() before it opens anything or listens.
    process.env.PORT = "abc";
    process.env.SLUICE_ADMIN_TOKEN = "short";
    try {
      const result = await cli("serve");
      expect(result.code).toBe(1);
      expect(result.err).toBe(
        "sluice failed to start: Invalid configuration:\n" +
          "  PORT: must be a whole number written as digits, such as 10\n" +
          "  SLUICE_ADMIN_TOKEN: must be at least 16 characters\n",
      );
    } finally {
      delete process.env.PORT;
      delete process.env.SLUICE_ADMIN_TOKEN;
    }
  });

  it("reports invalid settings to an admin command as serve does, after error:, exit code 1 and no usage text", async () => {
    process.env.PORT = "abc";
    process.env.SLUICE_ADMIN_TOKEN = "short";
    try {
      expect(await cli("projects", "list")).toMatchObject({
        code: 1,
        out: "",
        err:
          "error: Invalid configuration:\n" +
          "  PORT: must be a whole number written as digits, such as 10\n" +
          "  SLUICE_ADMIN_TOKEN: must be at least 16 characters\n",
      });
    } finally {
      delete process.env.PORT;
      delete process.env.SLUICE_ADMIN_TOKEN;
    }
  });

  it("refuses every command when SLUICE_MASTER_KEY does not open the provider keys the database holds", async () => {
    const own = mkdtempSync(join(tmpdir(), "sluice-cli-sealed-"));
    process.env.SLUICE_DATA_DIR = own;
    try {
      await cli("projects", "create", "--id", "sealed", "--name", "Sealed", "--provider", "provider-a");
      const added = await cli(
        "keys",
        "add",
        "sealed",
        "--provider",
        "provider-a",
        "--api-key",
        "sk-live-123456",
      );
      const { keyId } = added.json() as { keyId: string };
      process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
      const listed = await cli("projects", "list");
      expect(listed.code).toBe(1);
      expect(listed.out).toBe("");
      expect(listed.err).toBe(
        `error: SLUICE_MASTER_KEY does not open the secrets stored in the database (provider key ${keyId} ` +
          "of project sealed was sealed under another master key): set SLUICE_MASTER_KEY to the key the " +
          "database's secrets were stored under\n",
      );
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      process.env.SLUICE_MASTER_KEY = masterKey;
      rmSync(own, { recursive: true, force: true });
    }
  });

  it("rotates the master key: master-key reseal moves the secrets to SLUICE_MASTER_KEY, then SLUICE_MASTER_KEY_PREVIOUS can go", async () => {
    const own = mkdtempSync(join(tmpdir(), "sluice-cli-rotate-"));
    process.env.SLUICE_DATA_DIR = own;
    const newKey = randomBytes(32).toString("base64");
    try {
      await cli("projects", "create", "--id", "rotated", "--name", "Rotated", "--provider", "provider-a");
      for (const provider of ["provider-a", "provider-b"])
        expect(
          (await cli("keys", "add", "rotated", "--provider", provider, "--api-key", "sk-live-123456")).code,
        ).toBe(0);
      process.env.SLUICE_MASTER_KEY = newKey;
      // Without the old key beside it, the new one opens nothing stored: refused, as before.
      expect((await cli("projects", "list")).code).toBe(1);
      process.env.SLUICE_MASTER_KEY_PREVIOUS = masterKey;
      // The stored secrets still need the old key: nothing said about removing it.
      const rotating = await cli("projects", "list");
      expect({ code: rotating.code, err: rotating.err }).toEqual({ code: 0, err: "" });
      const resealed = await cli("master-key", "reseal");
      // The counts on standard output, still JSON; then, at the end, that the old key can go.
      expect({ code: resealed.code, err: resealed.err }).toEqual({
        code: 0,
        err:
          "warning: every secret now opens under SLUICE_MASTER_KEY; remove SLUICE_MASTER_KEY_PREVIOUS " +
          "from the environment (of every instance and the CLI: a retired key left there keeps old " +
          "backups and leaked copies of the database decryptable)\n",
      });
      expect(resealed.json()).toEqual({
        providerKeys: { resealed: 2, alreadyCurrent: 0, unopenedRevoked: 0 },
        deviceCheckKeys: { resealed: 0, alreadyCurrent: 0 },
      });
      for (const key of [newKey, masterKey]) {
        const raw = Buffer.from(key, "base64");
        for (const form of [key, raw.toString("base64url"), raw.toString("hex")])
          expect(resealed.out + resealed.err).not.toContain(form);
      }
      // Any other command run with the old key still set says so too, as the gateway's start does.
      const lingering = await cli("projects", "list");
      expect({ code: lingering.code, err: lingering.err }).toEqual({
        code: 0,
        err: expect.stringMatching(
          /^warning: SLUICE_MASTER_KEY_PREVIOUS is set, but every stored secret opens under SLUICE_MASTER_KEY .*remove SLUICE_MASTER_KEY_PREVIOUS from the environment/,
        ),
      });
      // A second reseal with the old key still set moves nothing: the start's warning says it once.
      const twice = await cli("master-key", "reseal");
      expect(twice.code).toBe(0);
      expect(twice.err.match(/^warning: /gm)).toHaveLength(1);
      expect(twice.err).toMatch(/^warning: SLUICE_MASTER_KEY_PREVIOUS is set, but every stored secret/);
      delete process.env.SLUICE_MASTER_KEY_PREVIOUS;
      expect((await cli("projects", "list")).code).toBe(0);
      const again = await cli("master-key", "reseal");
      // No old key set, none to remove: nothing said.
      expect({ code: again.code, err: again.err }).toEqual({ code: 0, err: "" });
      expect(again.json()).toEqual({
        providerKeys: { resealed: 0, alreadyCurrent: 2, unopenedRevoked: 0 },
        deviceCheckKeys: { resealed: 0, alreadyCurrent: 0 },
      });
    } finally {
      delete process.env.SLUICE_MASTER_KEY_PREVIOUS;
      process.env.SLUICE_DATA_DIR = dataDir;
      process.env.SLUICE_MASTER_KEY = masterKey;
      rmSync(own, { recursive: true, force: true });
    }
  });

  it("refuses master-key reseal with flags or arguments, as a usage error", async () => {
    const flagged = await cli("master-key", "reseal", "--id", "x");
    expect(flagged.code).toBe(2);
    expect(flagged.err).toMatch(/^error: master-key reseal does not take --id; it takes no flags\n/);
    expect((await cli("master-key", "reseal", "extra")).code).toBe(2);
    expect((await cli("master-key")).err).toMatch(/^error: master-key needs a subcommand: one of reseal\n/);
  });

  it("warns of a database a newer Sluice migrated, and runs the command on it", async () => {
    const newer = mkdtempSync(join(tmpdir(), "sluice-cli-newer-"));
    const database = await openDatabase({ dataDir: newer });
    await sql`insert into sluice_migrations (name, timestamp)
      values ('0099-added-by-a-later-build', '2099-01-01T00:00:00.000Z')`.execute(database.db);
    await database.close();
    process.env.SLUICE_DATA_DIR = newer;
    try {
      const result = await cli("projects", "list");
      expect(result.code).toBe(0);
      expect(result.json()).toEqual([]);
      expect(result.err).toBe(
        "warning: The database was migrated by a newer Sluice (migrations this build does not know: " +
          "0099-added-by-a-later-build): this build runs on it, as migrations stay backward compatible for " +
          "one version (a build further back works only while no later migration has dropped something it " +
          "uses), but upgrade it to the build that migrated the database\n",
      );
    } finally {
      process.env.SLUICE_DATA_DIR = dataDir;
      rmSync(newer, { recursive: true, force: true });
    }
  });

  it("names DATABASE_URL, without its password, and says why, when the database refuses the connection", async () => {
    process.env.DATABASE_URL = "postgres://postgres:not-the-password@127.0.0.1:1/test";
    try {
      const result = await cli("projects", "list");
      expect(result.code).toBe(1);
      expect(result.err).toBe(
        "error: DATABASE_URL (postgres://postgres@127.0.0.1:1/test): PostgreSQL could not be reached or " +
          "refused the connection (connect ECONNREFUSED 127.0.0.1:1)\n",
      );
    } finally {
      delete process.env.DATABASE_URL;
    }
  });
});

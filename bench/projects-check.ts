/**
 * Times `sluice projects check` over N stored projects, each with an output schema of its own
 * (docs/decisions/0038): seeds a fresh store with SQL, as an earlier release stored its projects,
 * then runs the command as an operator does (`node bin/sluice.js projects check`, a process of its
 * own) and prints its wall and CPU time, peak memory (VmHWM) and summary line.
 *
 *   npx tsx bench/projects-check.ts [--projects 2000] [--schema-kb 4] [--distinct N] [--postgres]
 *
 * `--distinct` is how many different schemas the projects hold (default: one each); `--refused`
 * makes every 100th project's schema one this build refuses (a 600-alternative union), so the
 * lines on stdout are timed too. `--postgres` seeds a schema of its own in the machine's
 * PostgreSQL (127.0.0.1:5432, database `test`) and drops it after; otherwise a temporary data dir
 * holds the embedded SQLite store. bin/sluice.js runs dist/ when it is current (`npm run build`),
 * else the source through tsx (~1 s more to start).
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import pg from "pg";
import { openDatabase } from "../src/storage/database.js";
import type { ProjectsTable } from "../src/storage/schema.js";
import { projectRow } from "../test/support/project-row.js";
import { pidCpuMicros } from "./processes.js";

const { values: options } = parseArgs({
  options: {
    projects: { type: "string", default: "2000" },
    "schema-kb": { type: "string", default: "4" },
    distinct: { type: "string" },
    refused: { type: "boolean", default: false },
    postgres: { type: "boolean", default: false },
  },
});
const count = Number(options.projects);
const schemaBytes = Number(options["schema-kb"]) * 1024;
const distinct = options.distinct === undefined ? count : Number(options.distinct);
const root = join(import.meta.dirname, "..");
const postgresBaseUrl = "postgres://postgres@127.0.0.1:5432/test";

/**
 * A schema of about `bytes` of JSON, different for each `variant` (its names and bounds): objects,
 * arrays of objects, enums, patterns, a `$ref` to a definition, as a real project's may hold.
 */
function schemaOf(variant: number, bytes: number): Record<string, unknown> {
  const properties: Record<string, unknown> = {};
  const required: string[] = [];
  const $defs: Record<string, unknown> = {
    [`address${variant}`]: {
      type: "object",
      properties: {
        street: { type: "string", maxLength: 200 },
        city: { type: "string" },
        postcode: { type: "string", pattern: `^[0-9A-Z]{${3 + (variant % 4)},10}$` },
      },
      required: ["street", "city"],
      additionalProperties: false,
    },
  };
  const schema = { type: "object", properties, required, $defs, additionalProperties: false };
  for (let index = 0; JSON.stringify(schema).length < bytes; index++) {
    const name = `field_${variant}_${index}`;
    required.push(name);
    switch (index % 5) {
      case 0:
        properties[name] = { type: "string", description: `The ${name} of the document`, maxLength: 500 };
        break;
      case 1:
        properties[name] = { type: "integer", minimum: 0, maximum: 1000 + variant };
        break;
      case 2:
        properties[name] = {
          type: "string",
          enum: Array.from({ length: 6 }, (_, option) => `${name}_option_${option}`),
        };
        break;
      case 3:
        properties[name] = {
          type: "array",
          maxItems: 20,
          items: {
            type: "object",
            properties: { label: { type: "string" }, score: { type: "number", minimum: 0, maximum: 1 } },
            required: ["label", "score"],
            additionalProperties: false,
          },
        };
        break;
      default:
        properties[name] = { anyOf: [{ $ref: `#/$defs/address${variant}` }, { type: "null" }] };
    }
  }
  return schema;
}

/** 600 alternatives: more than a schema may hold (at most 500), so the project is reported. */
const refusedSchema = {
  type: "object",
  properties: { pick: { anyOf: Array.from({ length: 600 }, (_, index) => ({ const: `v${index}` })) } },
};

async function seed(dataDir: string, databaseUrl: string | undefined): Promise<number> {
  const database = await openDatabase({ dataDir, databaseUrl });
  let bytes = 0;
  try {
    const base = Date.parse("2026-01-01T00:00:00.000Z");
    const schemas = Array.from({ length: Math.min(distinct, count) }, (_, variant) =>
      JSON.stringify(schemaOf(variant, schemaBytes)),
    );
    for (let start = 0; start < count; start += 500) {
      const rows: ProjectsTable[] = [];
      for (let index = start; index < Math.min(start + 500, count); index++) {
        const outputSchema =
          options.refused && index % 100 === 99
            ? JSON.stringify(refusedSchema)
            : (schemas[index % schemas.length] as string);
        bytes += outputSchema.length;
        rows.push(
          projectRow(`prj-${String(index).padStart(6, "0")}`, new Date(base + index * 1000).toISOString(), {
            output_schema: outputSchema,
          }),
        );
      }
      // PostgreSQL takes at most 65,535 parameters a statement: 500 rows of 22 columns.
      await database.db.insertInto("projects").values(rows).execute();
    }
  } finally {
    await database.close();
  }
  return bytes;
}

/** Runs the command: its wall and CPU time, exit code, stdout's line count, stderr, peak RSS (MiB). */
function runCheck(
  env: NodeJS.ProcessEnv,
): Promise<{ ms: number; cpuMs: number; code: number; lines: number; err: string; peakMiB: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const child = spawn(process.execPath, [join(root, "bin/sluice.js"), "projects", "check"], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let lines = 0;
    let err = "";
    let peakMiB = 0;
    let cpuMs = 0;
    // Read while it runs (every 100 ms, so up to 100 ms of its end is missed): the kernel's
    // high-water mark of its resident memory, and its user and system CPU time, which other work
    // on a shared machine changes less than the wall time.
    const sampler = setInterval(() => {
      try {
        const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
        const kib = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
        peakMiB = Math.max(peakMiB, kib / 1024);
        cpuMs = Math.max(cpuMs, pidCpuMicros(child.pid as number) / 1000);
      } catch {}
    }, 100);
    child.stdout.on("data", (chunk: Buffer) => {
      for (const byte of chunk) if (byte === 10) lines++;
    });
    child.stderr.on("data", (chunk: Buffer) => {
      err += String(chunk);
    });
    child.on("error", reject);
    child.on("close", (code) => {
      clearInterval(sampler);
      resolve({ ms: performance.now() - started, cpuMs, code: code ?? -1, lines, err, peakMiB });
    });
  });
}

const dataDir = mkdtempSync(join(tmpdir(), "sluice-bench-check-"));
let databaseUrl: string | undefined;
let dropSchema = async () => {};
if (options.postgres) {
  const schema = `sluice_bench_${randomBytes(6).toString("hex")}`;
  const client = new pg.Client({ connectionString: postgresBaseUrl });
  await client.connect();
  await client.query(`create schema ${schema}`);
  await client.end();
  databaseUrl = `${postgresBaseUrl}?options=${encodeURIComponent(`-c search_path=${schema}`)}`;
  dropSchema = async () => {
    const dropper = new pg.Client({ connectionString: postgresBaseUrl });
    await dropper.connect();
    await dropper.query(`drop schema if exists ${schema} cascade`);
    await dropper.end();
  };
}
try {
  const seedStarted = performance.now();
  const bytes = await seed(dataDir, databaseUrl);
  console.log(
    `seeded ${count} projects (${Math.min(distinct, count)} distinct schemas, ${(bytes / count / 1024).toFixed(1)} KB each on average) on ${options.postgres ? "PostgreSQL" : "SQLite"} in ${((performance.now() - seedStarted) / 1000).toFixed(1)} s`,
  );
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH ?? "",
    HOME: process.env.HOME ?? "",
    SLUICE_DATA_DIR: dataDir,
    SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
    ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
  };
  const result = await runCheck(env);
  console.log(
    `projects check: ${(result.ms / 1000).toFixed(1)} s wall, ${(result.cpuMs / 1000).toFixed(1)} s CPU, exit ${result.code}, ${result.lines} lines on stdout, peak RSS ${result.peakMiB.toFixed(0)} MiB`,
  );
  console.log(`stderr: ${result.err.trim()}`);
} finally {
  await dropSchema();
  rmSync(dataDir, { recursive: true, force: true });
}

import { appendFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Config } from "../../src/config.js";
import { errorStatus } from "../../src/errors.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  type FuzzCaps,
  type FuzzCase,
  type FuzzSecrets,
  generateCase,
  Random,
  type RouteKind,
} from "../support/fuzz-inputs.js";
import { type RawReply, rawExchange } from "../support/raw-exchange.js";
import { mulberry32 } from "../support/seeded-random.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * "Every bad input gets a clear JSON error with the right status": seeded malformed requests on every
 * route (methods, paths, queries, headers, bodies), each answered within 15 s with a status that
 * docs/api.md allows the route, Sluice's errors in the one envelope with a code from the one table,
 * no secret in any answer, and /health still answering afterwards; then every usage row of the run
 * written (none left queued, dropped or refused by the database).
 *
 * It runs twice with the same seed: on the embedded defaults (SQLite, limits in memory), and on
 * PostgreSQL (a schema of its own) and Redis (a key prefix of its own), as production runs, where
 * values SQLite stores can be refused (a NUL byte or invalid UTF-8 in `text`, an integer out of range).
 * In CI both services must answer (services.ts fails the file otherwise); elsewhere the second run
 * is skipped without them.
 *
 * SLUICE_FUZZ_SEED picks the seed, SLUICE_FUZZ_RUNS the number of requests of each run (default
 * 2000), and SLUICE_FUZZ_ONLY one case index to replay (the others are generated, not sent).
 */
const seed = Number(process.env.SLUICE_FUZZ_SEED ?? 0x51c3);
const runs = Number(process.env.SLUICE_FUZZ_RUNS ?? 2000);
const only = process.env.SLUICE_FUZZ_ONLY === undefined ? null : Number(process.env.SLUICE_FUZZ_ONLY);
/** A file to write one JSON line per request and its answer to, for reading what the run saw. */
const logPath = process.env.SLUICE_FUZZ_LOG;
const requestTimeoutMs = 15_000;

// Known markers, so an answer holding any of them (or a long piece of one) is caught.
const masterKeyMarker = Buffer.from("FUZZ-MASTER-KEY-MARKER-32-BYTES!").toString("base64");
const providerKeyMarkers = {
  "provider-a": "sk-FUZZMARKER-provider-a-key-0123456789",
  "provider-b": "sk-ant-FUZZMARKER-provider-b-key-0123456789",
  "provider-c": "AIzaFUZZMARKER-provider-c-key-0123456789",
} as const;

// Small caps, so a body just over one is cheap. The body cap is above the 10,000 values' bound and an
// output schema's 65,536 bytes, so those are reached first; /v1/vision's and /v1/pdf's own caps are
// under it (their body cap is this one).
const caps: FuzzCaps = { maxBodyBytes: 81_920, maxImageBytes: 16_384, maxPdfBytes: 16_384 };

/** Answers any route may give: the HTTP-level refusals (docs/api.md, Errors). */
const anyRoute = [400, 404, 405, 413, 431];
/** What docs/api.md allows each route besides those. */
const allowed: Record<RouteKind, number[]> = {
  health: [200],
  metrics: [200],
  models: [200, 429],
  structured: [200, 401, 403, 415, 422, 429],
  image: [200, 401, 403, 415, 422, 429],
  // A provider's own answer passes through whatever its status: checked apart (upstreamAnswered).
  proxy: [401, 403, 415, 429],
  admin: [200, 201, 204, 401, 409, 415, 422, 429],
  vault: [403],
  "models-or-proxy": [200, 401, 403, 415, 429],
  unknown: [],
};

const space = redisTestSpace("fuzz-bad-inputs");
afterAll(() => space.cleanup());

interface Engine {
  name: string;
  available: boolean;
  /** The gateway's storage settings, and what removes what they made. */
  open(): Promise<{ config: Partial<Config>; cleanup(): Promise<void> }>;
  /** Where the run's shared state went: its database engine, and whether Redis holds keys of it. */
  storedIn: { database: "sqlite" | "postgres"; redisKeys: boolean };
}

const engines: Engine[] = [
  {
    name: "SQLite, limits in memory",
    available: true,
    open: async () => ({ config: {}, cleanup: async () => {} }),
    storedIn: { database: "sqlite", redisKeys: false },
  },
  {
    name: "PostgreSQL and Redis",
    available: postgresAvailable && redisAvailable,
    async open() {
      const schema = await createPostgresSchema();
      return {
        config: { databaseUrl: schema.url, redisUrl, redisKeyPrefix: `${space.nextPrefix()}:` },
        cleanup: schema.drop,
      };
    },
    storedIn: { database: "postgres", redisKeys: true },
  },
];

interface Failure {
  index: number;
  problem: string;
  request: string;
  answer?: string;
}

for (const engine of engines)
  describe.skipIf(!engine.available)(
    `malformed requests on every route, ${engine.name} (seed ${seed}, ${runs} runs)`,
    () => {
      let fake: FakeUpstream;
      let sluice: TestGateway;
      let port: number;
      let secrets: FuzzSecrets;
      let markers: string[];
      let cleanup: (() => Promise<void>) | undefined;
      let redisKeyPrefix: string | undefined;

      beforeAll(async () => {
        fake = await startFakeUpstream();
        const storage = await engine.open();
        cleanup = storage.cleanup;
        redisKeyPrefix = storage.config.redisKeyPrefix;
        sluice = await startTestGateway({
          ...storage.config,
          ...providerBaseUrls(fake),
          masterKey: masterKeyMarker,
          metricsEnabled: true,
          // High enough that the checks past authentication are what answers, not the throttle.
          authFailureLimit: 1_000_000,
          rateLimitIpPerMinute: 10_000_000,
          ...caps,
        });
        port = Number(new URL(sluice.url).port);
        const admin = sluice.gateway.admin;
        // The fake upstream's structured answer, {"answer": "fake"}, matches it.
        const outputSchema = {
          type: "object",
          properties: { answer: { type: "string" } },
          required: ["answer"],
          additionalProperties: false,
        };
        const created = await admin.createProject({
          id: "fuzz-app",
          name: "Fuzz app",
          provider: "provider-a",
          testMode: true,
          outputSchema,
          rateLimits: { perMinute: 10_000_000, devicePerMinute: 10_000_000 },
        });
        const partial: Record<string, string> = {};
        for (const [provider, apiKey] of Object.entries(providerKeyMarkers))
          partial[provider] = (await admin.addProviderKey("fuzz-app", { provider, apiKey })).partialKey;
        await admin.createProject({
          id: "fuzz-admin",
          name: "Fuzz admin",
          provider: "provider-a",
          testMode: true,
        });
        const adminKey = await admin.addProviderKey("fuzz-admin", {
          provider: "provider-a",
          apiKey: providerKeyMarkers["provider-a"],
        });
        const bearer = (provider: string) => `${partial[provider]}.${created.testKey}`;
        secrets = {
          projectId: "fuzz-app",
          adminProjectId: "fuzz-admin",
          bearerA: bearer("provider-a"),
          bearerB: bearer("provider-b"),
          bearerC: bearer("provider-c"),
          partialKeyA: partial["provider-a"] as string,
          testKey: created.testKey,
          adminToken,
          keyIdA: adminKey.keyId,
        };
        markers = [
          masterKeyMarker,
          Buffer.from(masterKeyMarker, "base64").toString("latin1"),
          adminToken,
          created.testKey,
          adminKey.partialKey,
          ...Object.values(providerKeyMarkers),
          ...Object.values(partial),
        ];
      });
      afterAll(async () => {
        await sluice?.close();
        await fake?.close();
        await cleanup?.();
      });

      it("answers each within 15 s, with an allowed status, the JSON envelope and no secret; /health still answers", async () => {
        const random = new Random(mulberry32(seed));
        const failures: Failure[] = [];
        const seen = new Map<string, number>();
        let sent = 0;
        let exact = 0;
        for (let index = 0; index < runs; index++) {
          const fuzzCase = generateCase(random, index, secrets, caps, port);
          if (only !== null && index !== only) continue;
          const upstreamBefore = fake.requests.length;
          let reply: RawReply;
          try {
            reply = await rawExchange(port, serialize(fuzzCase), {
              head: fuzzCase.method === "HEAD",
              timeoutMs: requestTimeoutMs,
            });
          } catch (error) {
            failures.push({ index, problem: String(error), request: describeCase(fuzzCase) });
            continue;
          }
          sent++;
          if (fuzzCase.expected !== null) exact++;
          seen.set(String(reply.status), (seen.get(String(reply.status)) ?? 0) + 1);
          if (logPath)
            appendFileSync(
              logPath,
              `${JSON.stringify({ index, request: JSON.parse(describeCase(fuzzCase)), status: reply.status, answer: reply.body.toString("utf8").slice(0, 500) })}\n`,
            );
          const upstreamAnswered =
            fuzzCase.target.includes("/v1/provider-") && fake.requests.length > upstreamBefore;
          for (const problem of problemsOf(fuzzCase, reply, upstreamAnswered, markers))
            failures.push({ index, problem, request: describeCase(fuzzCase), answer: answerOf(reply) });
          if (index % 50 === 49 || index === runs - 1 || only !== null) {
            const health = await fetch(`${sluice.url}/health`, {
              signal: AbortSignal.timeout(requestTimeoutMs),
            }).then(
              (response) => String(response.status),
              (error: unknown) => String(error),
            );
            if (health !== "200")
              failures.push({
                index,
                problem: `/health answered ${health} after the requests up to this one`,
                request: "",
              });
          }
        }
        const report = failures
          .slice(0, 25)
          .map(
            (failure) =>
              `#${failure.index} (replay: SLUICE_FUZZ_SEED=${seed} SLUICE_FUZZ_RUNS=${runs} SLUICE_FUZZ_ONLY=${failure.index}): ${failure.problem}\n  request: ${failure.request}\n  answer: ${failure.answer ?? "none"}`,
          )
          .join("\n");
        if (failures.length === 0)
          console.info(
            `seed ${seed}: ${sent} requests (${exact} with one status decided), statuses ${JSON.stringify(Object.fromEntries(seen))}`,
          );
        expect(
          failures.length,
          `seed ${seed}: ${failures.length} failures (the first 25 below)\n${report}`,
        ).toBe(0);
        const health = await fetch(`${sluice.url}/health`);
        expect(health.status).toBe(200);
        // Nor in what the gateway logged of these requests (logger redaction, STYLE.md).
        const logged = sluice.logs.join("");
        expect(
          markers.filter((marker) => logged.includes(marker)).map((marker) => `${marker.slice(0, 6)}…`),
        ).toEqual([]);
      }, 600_000);

      it("wrote every usage row of the run: none left queued, dropped or refused by the database", async () => {
        const metrics = async () => {
          const text = await (await fetch(`${sluice.url}/metrics`)).text();
          return (line: string) => {
            const found = text.split("\n").find((each) => each.startsWith(`${line} `));
            return found === undefined ? undefined : Number(found.slice(line.length + 1));
          };
        };
        const countRows = async () =>
          Number(
            (
              await sluice.gateway.database.db
                .selectFrom("usage_records")
                .select((eb) => eb.fn.countAll<number | string>().as("n"))
                .executeTakeFirstOrThrow()
            ).n,
          );
        // A call's row is queued once Sluice has seen the call end, which may follow its answer: flush
        // until the written count holds still around the table's count (a few rounds at most).
        let metric = await metrics();
        let rows = 0;
        for (let round = 0; round < 10; round++) {
          await sluice.gateway.flushUsage();
          const before = await metrics();
          rows = await countRows();
          metric = await metrics();
          const written = "sluice_usage_rows_written_total";
          if (before(written) === metric(written) && metric("sluice_usage_queue_depth") === 0) break;
        }
        const refusedLines = sluice.logs.filter((line) => line.includes("usage row refused by the database"));
        expect({
          queued: metric("sluice_usage_queue_depth"),
          dropped: metric("sluice_usage_rows_dropped_total"),
          writeFailures: metric("sluice_usage_write_failures_total"),
          refused: refusedLines.map((line) => line.slice(0, 600)),
          databaseDegraded: metric('sluice_degraded{component="database"}') ?? 0,
          redisDegraded: metric('sluice_degraded{component="redis"}') ?? 0,
        }).toEqual({
          queued: 0,
          dropped: 0,
          writeFailures: 0,
          refused: [],
          databaseDegraded: 0,
          redisDegraded: 0,
        });
        // The run went where its engine says: a row refused by PostgreSQL is only seen on PostgreSQL.
        const redisKeys = redisKeyPrefix
          ? (await (await space.readyClient()).keys(`${redisKeyPrefix}*`)).length
          : 0;
        expect({ database: sluice.gateway.database.engine, redisKeys: redisKeys > 0 }).toEqual(
          engine.storedIn,
        );
        // Every row counted as written is in the table (the run writes hundreds: some rows at least).
        const written = metric("sluice_usage_rows_written_total");
        expect(written).toBeGreaterThan(0);
        expect(rows).toBe(written);
      }, 60_000);
    },
  );

function serialize(fuzzCase: FuzzCase): Buffer {
  // Chunked when the last coding named is chunked (any case, with whitespace), as a server reads it.
  const chunked =
    fuzzCase.headers.some(
      ([name, value]) => name === "transfer-encoding" && /(?:^|,)\s*chunked\s*$/i.test(value),
    ) && !fuzzCase.headers.some(([name]) => name === "content-length");
  const head = `${fuzzCase.method} ${fuzzCase.target} HTTP/1.1\r\n${fuzzCase.headers
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("")}\r\n`;
  const body = chunked
    ? Buffer.concat([
        ...(fuzzCase.body.length > 0
          ? [Buffer.from(`${fuzzCase.body.length.toString(16)}\r\n`), fuzzCase.body, Buffer.from("\r\n")]
          : []),
        Buffer.from("0\r\n\r\n"),
      ])
    : fuzzCase.body;
  return Buffer.concat([Buffer.from(head, "utf8"), body]);
}

function problemsOf(
  fuzzCase: FuzzCase,
  reply: RawReply,
  upstreamAnswered: boolean,
  markers: string[],
): string[] {
  const problems: string[] = [];
  const whole = `${JSON.stringify(reply.headers)}\n${reply.body.toString("latin1")}\n${reply.body.toString("utf8")}`;
  for (const marker of markers) {
    const pieces = [marker, marker.slice(0, 16), marker.slice(-16)];
    if (pieces.some((piece) => whole.includes(piece)))
      problems.push(`a secret (${marker.slice(0, 6)}…) is in the answer`);
  }
  if (fuzzCase.expected !== null && reply.status !== fuzzCase.expected)
    problems.push(`status ${reply.status}, where docs/api.md gives ${fuzzCase.expected}`);
  if (upstreamAnswered) {
    // The provider's own answer passes through unchanged (DESIGN.md); the fake here never answers 500.
    if (reply.status === 500) problems.push("status 500 after the provider answered");
    return problems;
  }
  const permitted = [...anyRoute, ...allowed[fuzzCase.kind]];
  if (!permitted.includes(reply.status))
    problems.push(`status ${reply.status} is not one docs/api.md allows a ${fuzzCase.kind} route`);
  if (reply.status < 400) return problems;
  const contentType = reply.headers["content-type"] ?? "";
  if (!/^application\/json(;|$)/.test(contentType))
    problems.push(`content-type ${JSON.stringify(contentType)}`);
  if (fuzzCase.method === "HEAD") return problems;
  let parsed: unknown;
  try {
    parsed = JSON.parse(reply.body.toString("utf8"));
  } catch {
    problems.push("the body is not JSON");
    return problems;
  }
  const error = (parsed as { error?: Record<string, unknown> }).error;
  if (
    typeof parsed !== "object" ||
    parsed === null ||
    Object.keys(parsed).join() !== "error" ||
    typeof error !== "object" ||
    error === null
  ) {
    problems.push("the body is not the error envelope");
    return problems;
  }
  const extra = Object.keys(error).filter(
    (key) => !["code", "message", "requestId", "details"].includes(key),
  );
  if (extra.length > 0) problems.push(`the envelope has other members: ${extra.join()}`);
  const code = error.code as keyof typeof errorStatus;
  if (typeof code !== "string" || !(code in errorStatus))
    problems.push(`code ${String(code)} is not in the table`);
  else if (errorStatus[code] !== reply.status)
    problems.push(`code ${code} is ${errorStatus[code]}, not ${reply.status}`);
  if (typeof error.message !== "string" || error.message.trim().length < 8)
    problems.push(`message ${JSON.stringify(error.message)} says nothing`);
  else if (reply.status !== 500 && /internal error/i.test(error.message))
    problems.push("the message is the internal error's");
  // A problem labelled with nothing (`Invalid query: : unknown parameter`) names nothing.
  else if (/(?:^|: |; ): /.test(error.message)) problems.push("the message names an empty label");
  if (typeof error.requestId !== "string" || error.requestId !== reply.headers["x-request-id"])
    problems.push(
      `requestId ${String(error.requestId)} is not x-request-id ${reply.headers["x-request-id"]}`,
    );
  return problems;
}

function describeCase(fuzzCase: FuzzCase): string {
  const body = fuzzCase.body.toString("latin1");
  return JSON.stringify({
    mutations: fuzzCase.mutations,
    method: fuzzCase.method,
    target:
      fuzzCase.target.length > 200
        ? `${fuzzCase.target.slice(0, 200)}…(${fuzzCase.target.length})`
        : fuzzCase.target,
    headers: fuzzCase.headers
      .filter(([name]) => name !== "host")
      .map(([name, value]) => [
        name,
        value.length > 120 ? `${value.slice(0, 120)}…(${value.length})` : value,
      ]),
    body: body.length > 300 ? `${body.slice(0, 300)}…(${body.length} bytes)` : body,
  });
}

function answerOf(reply: RawReply): string {
  const body = reply.body.toString("utf8");
  return `${reply.status} ${reply.headers["content-type"] ?? ""} ${body.length > 400 ? `${body.slice(0, 400)}…` : body}`;
}

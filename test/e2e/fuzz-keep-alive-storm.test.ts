import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { errorStatus } from "../../src/errors.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { Random } from "../support/fuzz-inputs.js";
import {
  fuzzMaxBodyBytes,
  generateRequest,
  type KeepAliveSecrets,
} from "../support/fuzz-keep-alive-cases.js";
import { type FuzzRequest, Lane, type Reply } from "../support/keep-alive-lane.js";
import { rawExchange } from "../support/raw-exchange.js";
import { mulberry32 } from "../support/seeded-random.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * Seeded requests of every route family on six keep-alive connections at once, one in seven
 * pipelined three at a time (test/support/fuzz-keep-alive-cases.ts says what they hold), to the
 * gateway on its embedded defaults with CORS on and fake providers A, B and C. Each answer comes
 * within 8 s, holds no secret, carries an x-request-id, is no 500, and is Sluice's error envelope
 * with the code's own status unless the provider answered; a pipelined request goes unanswered only
 * after an answer that closed the connection (or a malformed body found after its answer, which gets
 * no second one). Afterwards: /health answers, the log holds no secret and no error line, the
 * connections and the body budget are back to 0, and every call the provider saw has a usage row
 * under the id its answer named.
 *
 * SLUICE_KEEPALIVE_FUZZ_SEED picks the seed, SLUICE_KEEPALIVE_FUZZ_RUNS the number of requests,
 * SLUICE_KEEPALIVE_FUZZ_ONLY a comma-separated list of indexes to send alone (the first of a
 * pipeline, index % 7 === 3, with the two after it).
 */
const seed = Number(process.env.SLUICE_KEEPALIVE_FUZZ_SEED ?? 2);
const runs = Number(process.env.SLUICE_KEEPALIVE_FUZZ_RUNS ?? 3000);
const only = process.env.SLUICE_KEEPALIVE_FUZZ_ONLY?.split(",").map(Number);
const lanesCount = 6;
const requestTimeoutMs = 8_000;

const masterKeyMarker = Buffer.from("KEEPALIVE-MASTER-KEY-MARKER-32B!").toString("base64");
const providerKeyMarkers = {
  "provider-a": "sk-KAMARKER-provider-a-key-0123456789",
  "provider-b": "sk-ant-KAMARKER-provider-b-key-0123456789",
  "provider-c": "AIzaKAMARKER-provider-c-key-0123456789",
} as const;

describe(`seeded requests on keep-alive connections (seed ${seed}, ${runs} requests)`, () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let port: number;
  let secrets: KeepAliveSecrets;
  let markers: string[];

  beforeAll(async () => {
    fake = await startFakeUpstream({ keepAliveTimeoutMs: 1000 });
    sluice = await startTestGateway({
      ...providerBaseUrls(fake),
      masterKey: masterKeyMarker,
      metricsEnabled: true,
      authFailureLimit: 1_000_000,
      rateLimitIpPerMinute: 10_000_000,
      rateLimitProjectPerMinute: 10_000_000,
      maxBodyBytes: fuzzMaxBodyBytes,
      upstreamHeadersTimeoutMs: 3000,
      upstreamIdleTimeoutMs: 3000,
      corsOrigins: ["https://app.example"],
      logLevel: "info",
    });
    port = Number(new URL(sluice.url).port);
    const admin = sluice.gateway.admin;
    const created = await admin.createProject({
      id: "fz-app",
      name: "Fz",
      provider: "provider-a",
      testMode: true,
      outputSchema: {
        type: "object",
        properties: { answer: { type: "string" } },
        required: ["answer"],
        additionalProperties: false,
      },
      rateLimits: { perMinute: 10_000_000, devicePerMinute: 10_000_000 },
    });
    await admin.createProject({ id: "fz-admin", name: "Fz admin", provider: "provider-a", testMode: true });
    const partial: Record<string, string> = {};
    for (const [provider, apiKey] of Object.entries(providerKeyMarkers))
      partial[provider] = (await admin.addProviderKey("fz-app", { provider, apiKey })).partialKey;
    secrets = {
      projectId: "fz-app",
      partial,
      testKey: created.testKey,
      bearer: {
        "provider-a": `${partial["provider-a"]}.${created.testKey}`,
        "provider-b": `${partial["provider-b"]}.${created.testKey}`,
        "provider-c": `${partial["provider-c"]}.${created.testKey}`,
      },
    };
    markers = [
      masterKeyMarker,
      adminToken,
      created.testKey,
      ...Object.values(providerKeyMarkers),
      ...Object.values(partial),
    ];
    fake.setStructuredOutput({ answer: "fake" });
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });

  it("answers each in order and in time, in the envelope, with no secret; then holds nothing and misses no usage row", async () => {
    console.info(`seed ${seed}`);
    const random = new Random(mulberry32(seed));
    let cases: FuzzRequest[] = [];
    for (let index = 0; index < runs; index++) cases.push(generateRequest(random, index, secrets, port));
    if (only) cases = cases.filter((each) => only.includes(each.index));
    const failures: string[] = [];
    const answers: Array<{ request: FuzzRequest; reply: Reply }> = [];
    const reachedProvider = (request: FuzzRequest) =>
      fake.requests.some((seen) => seen.headers["x-client-request-id"] === `fz-${request.index}`);
    const judge = (request: FuzzRequest, reply: Reply, label: string) => {
      answers.push({ request, reply });
      for (const problem of problemsOf(request, reply, markers, reachedProvider(request)))
        failures.push(
          `#${request.index}${label} ${problem} | ${describeRequest(request)} | ${reply.status} ${reply.body.toString("utf8").slice(0, 300)}`,
        );
    };
    let next = 0;
    const lanes = Array.from({ length: lanesCount }, () => new Lane(port, requestTimeoutMs));
    await Promise.all(
      lanes.map(async (lane) => {
        for (let request = cases[next++]; request; request = cases[next++]) {
          const started = Date.now();
          const second = cases[next];
          const third = cases[next + 1];
          if (request.index % 7 === 3 && second && third) {
            next += 2;
            const group = [request, second, third].map((each) => ({ ...each, expectContinue: false }));
            try {
              const replies = await lane.pipeline(group);
              replies.forEach((reply, at) => {
                const each = group[at] as FuzzRequest;
                if (reply) {
                  judge(each, reply, ` (pipelined ${at})`);
                  return;
                }
                const before = replies[at - 1];
                // A malformed body found after its answer gets no second one: the connection closes (docs/api.md).
                const malformedBefore = group[at - 1]?.raw !== undefined;
                const closedBefore =
                  before && (before.closed || /close/i.test(before.headers.connection ?? ""));
                if (at === 0 || !(malformedBefore || closedBefore))
                  failures.push(
                    `#${each.index} (pipelined ${at}): no answer, and the one before did not close | ${describeRequest(each)}`,
                  );
              });
            } catch (error) {
              failures.push(
                `#${request.index} pipeline: ${String(error)} | ${group.map(describeRequest).join(" || ")}`,
              );
            }
            continue;
          }
          try {
            judge(request, await lane.exchange(request, request.method.toUpperCase() === "HEAD"), "");
          } catch (error) {
            failures.push(
              `#${request.index} ${String(error)} after ${Date.now() - started} ms | ${describeRequest(request)}`,
            );
          }
        }
        lane.close();
      }),
    );
    const health = await rawExchange(
      port,
      Buffer.from("GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"),
      { timeoutMs: 5000 },
    );
    expect(health.status).toBe(200);
    // Back to idle: no connection counted, no body bytes held.
    const deadline = Date.now() + 5000;
    while (
      Date.now() < deadline &&
      (sluice.gateway.connections.open() > 0 || sluice.gateway.bodyBudget.held() > 0)
    )
      await new Promise((resolve) => setTimeout(resolve, 50));
    const idle = { connections: sluice.gateway.connections.open(), budget: sluice.gateway.bodyBudget.held() };
    // Every call the provider saw has its usage row, under the id its answer named.
    await sluice.gateway.flushUsage();
    await new Promise((resolve) => setTimeout(resolve, 300));
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db.selectFrom("usage_records").select("request_id").execute();
    const rowIds = new Set(rows.map((row) => row.request_id));
    for (const { request, reply } of answers) {
      const id = reply.headers["x-sluice-request-id"] ?? reply.headers["x-request-id"] ?? "";
      if (reachedProvider(request) && !rowIds.has(id))
        failures.push(
          `#${request.index} reached the provider, and no usage row has ${id} | ${describeRequest(request)}`,
        );
    }
    const logged = sluice.logs.join("");
    expect({
      failures: failures.slice(0, 25),
      count: failures.length,
      idle,
      leaked: markers.filter((marker) => logged.includes(marker)).map((marker) => `${marker.slice(0, 6)}…`),
      errorLines: sluice.logs.filter((line) => /"level":(50|60)/.test(line)).slice(0, 5),
    }).toEqual({ failures: [], count: 0, idle: { connections: 0, budget: 0 }, leaked: [], errorLines: [] });
  }, 120_000);
});

function describeRequest(request: FuzzRequest): string {
  if (request.raw) return `raw ${JSON.stringify(request.raw.toString("latin1").slice(0, 160))}`;
  const cut = (text: string, at: number) =>
    text.length > at ? `${text.slice(0, at)}…(${text.length})` : text;
  return JSON.stringify({
    note: request.note,
    method: request.method,
    target: cut(request.target, 160),
    headers: request.headers
      .filter(([name]) => name !== "host")
      .map(([name, value]) => [name, cut(value, 80)]),
    chunked: request.chunked,
    expect: request.expectContinue,
    body: cut(request.body.toString("latin1"), 120),
  });
}

function problemsOf(request: FuzzRequest, reply: Reply, markers: string[], reached: boolean): string[] {
  const problems: string[] = [];
  const whole = `${JSON.stringify(reply.headers)}\n${reply.body.toString("latin1")}`;
  for (const marker of markers)
    if (whole.includes(marker) || whole.includes(marker.slice(0, 16)))
      problems.push(`a secret (${marker.slice(0, 6)}…) is in the answer`);
  if (!reply.headers["x-request-id"]) problems.push("no x-request-id");
  // A provider's own answer passes through unchanged (DESIGN.md); the fake never answers 500 here.
  if (reply.status === 500) problems.push("500");
  if (reply.status < 400 || (reached && request.family.startsWith("proxy"))) return problems;
  if (!/^application\/json(;|$)/.test(reply.headers["content-type"] ?? ""))
    problems.push(`content-type ${reply.headers["content-type"]}`);
  if (request.method.toUpperCase() === "HEAD" && !request.raw) return problems;
  let parsed: unknown;
  try {
    parsed = JSON.parse(reply.body.toString("utf8"));
  } catch {
    return [...problems, "the body is not JSON"];
  }
  const error = (parsed as { error?: { code?: unknown; requestId?: unknown } } | null)?.error;
  if (!error || typeof error !== "object" || Object.keys(parsed as object).join() !== "error")
    return [...problems, "the body is not the error envelope"];
  const code = error.code as keyof typeof errorStatus;
  if (typeof code !== "string" || !(code in errorStatus))
    problems.push(`code ${String(code)} is not in the table`);
  else if (errorStatus[code] !== reply.status)
    problems.push(`code ${code} is ${errorStatus[code]}, not ${reply.status}`);
  if (error.requestId !== reply.headers["x-request-id"])
    problems.push("its requestId is not its x-request-id");
  return problems;
}

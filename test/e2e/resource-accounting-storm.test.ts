import { randomBytes } from "node:crypto";
import diagnostics from "node:diagnostics_channel";
import { rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { connect } from "node:net";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { Agent, request } from "undici";
import { afterEach, describe, expect, it, vi } from "vitest";
import { deviceTokenDigest } from "../../src/auth/device-token-cache.js";
import { shutDown } from "../../src/server.js";
import { createSafePdfFetcher } from "../../src/structured/safe-pdf-fetch.js";
import { generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { validDeviceToken } from "../support/device-check-stage.js";
import { mulberry32 } from "../support/seeded-random.js";
import { createPostgresSchema, postgresAvailable, redisAvailable, redisUrl } from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * What Sluice holds for a call is given back however the call ends. A seeded storm of calls, most
 * of them faulted: clients that leave before their body, in the middle of it or of a stream, or
 * while the provider or Apple is asked; providers that fail (429, 500, 503), answer invalid JSON,
 * cut a stream or a compressed answer halfway, close the connection, stall before the headers
 * (past SLUICE_UPSTREAM_HEADERS_TIMEOUT_MS) or in a stream (past SLUICE_UPSTREAM_IDLE_TIMEOUT_MS);
 * a network path to provider C cut and restored; bodies over SLUICE_MAX_BODY_BYTES (413, by length
 * and chunked) or refused by SLUICE_MAX_BUFFERED_BODY_BYTES (503); /v1/text, /v1/pdf (a PDF server
 * that stalls, resets or never answers, SLUICE_MAX_PDF_FETCHES) and /v1/image; a project with a
 * spend cap, on DeviceCheck tokens too, cached and single-use (tokens new or sent again). Each case
 * runs on the defaults (SQLite, every count in memory) and on PostgreSQL and Redis (a schema and a
 * key prefix of this run's own; the schema in SLUICE_STORM_DATABASE_URL's database when set).
 * Once all have settled: the body budget holds nothing (its gauge says 0), no call is left
 * unrecorded, no place under the cap is held (here or in Redis), no PDF fetch or Apple call runs,
 * the upstream pools hold no connection, the usage queue is empty and nothing was dropped, the
 * gateway holds no connection, the process's active handles are those it had before, and the usage
 * rows count exactly the requests that reached authentication. Each of those is seen held during
 * the storm, so none is checked idle for never having been used. Each single-use token was admitted
 * once at most, and one that no call was admitted with (and no replay met) passes when sent again.
 * A second case shuts the gateway down a quarter of the way through the storm: every call sent whole
 * before the shutdown began got a status (or its client left by design), every 503 is the
 * gateway's envelope, and once closed it holds nothing, wrote no row twice, and the process holds no
 * socket or timer it did not hold before the gateway started. `SLUICE_STORM_SEED` replays a mix;
 * `SLUICE_STORM_REPORT=1` prints how the shutdown case's calls ended.
 */

const probes = vi.hoisted(() => ({
  authCalls: 0,
  placesOut: 0,
  placesTaken: 0,
  unrecorded: [] as Array<() => number>,
  pools: new Map<string, { stats: Record<string, number> }>(),
  appleInFlight: 0,
  appleCalls: 0,
  shared: [] as Array<{ held(): number }>,
  /** The gateway's PostgreSQL pools: each idle client holds a socket and its idle timer. */
  pgPools: [] as Array<{ idleCount: number }>,
  /** The Authorization header of each call admission admitted (its device token is in it). */
  admittedWith: [] as string[],
}));

vi.mock("pg", async (importOriginal) => {
  const original = await importOriginal<{ default: typeof import("pg") }>();
  class Pool extends original.default.Pool {
    constructor(...args: ConstructorParameters<typeof original.default.Pool>) {
      super(...args);
      probes.pgPools.push(this);
    }
  }
  return { ...original, default: { ...original.default, Pool } };
});

vi.mock("../../src/usage/shared-calls-in-flight.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/usage/shared-calls-in-flight.js")>();
  return {
    ...original,
    createSharedCallsInFlight(options: Parameters<typeof original.createSharedCallsInFlight>[0]) {
      const shared = original.createSharedCallsInFlight(options);
      probes.shared.push(shared);
      return shared;
    },
  };
});

vi.mock("../../src/auth/device-check-client.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/auth/device-check-client.js")>();
  return {
    ...original,
    createDeviceCheckClient(options: Parameters<typeof original.createDeviceCheckClient>[0]) {
      const client = original.createDeviceCheckClient(options);
      return {
        async validate(...args: Parameters<typeof client.validate>) {
          probes.appleInFlight++;
          probes.appleCalls++;
          try {
            return await client.validate(...args);
          } finally {
            probes.appleInFlight--;
          }
        },
      };
    },
  };
});

vi.mock("../../src/http/admission.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/http/admission.js")>();
  return {
    ...original,
    createAdmission(deps: Parameters<typeof original.createAdmission>[0]) {
      const admit = original.createAdmission({
        ...deps,
        authenticate: (req) => {
          probes.authCalls++;
          return deps.authenticate(req);
        },
      });
      probes.unrecorded.push(admit.unrecorded);
      // Synchronous when admission is: a wrapper must not turn its answer into a promise.
      return Object.assign(
        (...args: Parameters<typeof admit>) => {
          const note = <T>(call: T) => {
            probes.admittedWith.push(String(args[0].request.headers.authorization ?? ""));
            return call;
          };
          const admitted = admit(...args);
          return admitted instanceof Promise ? admitted.then(note) : note(admitted);
        },
        { unrecorded: admit.unrecorded, refuseWaiting: admit.refuseWaiting },
      );
    },
  };
});

vi.mock("../../src/proxy/forward.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/proxy/forward.js")>();
  return {
    ...original,
    createUpstreamPools(timeouts: Parameters<typeof original.createUpstreamPools>[0]) {
      const pools = original.createUpstreamPools(timeouts);
      return {
        ...pools,
        get(origin: string) {
          const pool = pools.get(origin);
          probes.pools.set(origin, pool as never);
          return pool;
        },
      };
    },
  };
});

vi.mock("../../src/usage/spend-guard.js", async (importOriginal) => {
  const original = await importOriginal<typeof import("../../src/usage/spend-guard.js")>();
  const counted = (release: () => void) => {
    probes.placesOut++;
    probes.placesTaken++;
    let done = false;
    return () => {
      if (!done) {
        done = true;
        probes.placesOut--;
      }
      release();
    };
  };
  return {
    ...original,
    createSpendGuard(deps: Parameters<typeof original.createSpendGuard>[0]) {
      const guard = original.createSpendGuard(deps);
      return {
        ...guard,
        hold(...args: Parameters<typeof guard.hold>) {
          const held = guard.hold(...args);
          const wrap = (r: (() => void) | undefined) => (r ? counted(r) : r);
          return held instanceof Promise ? held.then(wrap) : wrap(held);
        },
        holdWithLimits(...args: Parameters<typeof guard.holdWithLimits>) {
          const held = guard.holdWithLimits(...args);
          const wrap = (h: Awaited<typeof held>) => (h ? { ...h, release: counted(h.release) } : h);
          return held instanceof Promise ? held.then(wrap) : wrap(held);
        },
        holdPart(...args: Parameters<typeof guard.holdPart>) {
          const part = guard.holdPart(...args);
          if (!part) return part;
          return {
            ...part,
            decide(reply: unknown) {
              const held = part.decide(reply as never);
              return held ? { ...held, release: counted(held.release) } : held;
            },
          };
        },
      };
    },
  };
});

const seed = Number(process.env.SLUICE_STORM_SEED ?? 4242);
const calls = 600;
const concurrency = 24;
const maxBodyBytes = 64 * 1024;
const budgetBytes = 100 * 1024;
const maxPdfFetches = 4;
const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };
const pdf = Buffer.from("%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n");

type Kind =
  | "p-ok"
  | "p-fail"
  | "p-badjson"
  | "p-cut-stream"
  | "p-cut-compressed"
  | "p-destroy"
  | "p-stall-idle"
  | "p-stall-headers"
  | "p-leave-before-body"
  | "p-leave-mid-body"
  | "p-leave-mid-stream"
  | "p-leave-before-headers"
  | "p-413"
  | "p-413-chunked"
  | "p-big-body"
  | "p-slow-upload"
  | "p-netcut"
  | "p-wrong-key"
  | "t-ok"
  | "t-fail"
  | "t-badjson"
  | "t-stall"
  | "t-leave"
  | "pdf-ok"
  | "pdf-stall"
  | "pdf-reset"
  | "pdf-hang"
  | "pdf-leave"
  | "img-ok"
  | "img-fail"
  | "img-leave"
  | "dc-call"
  | "dc-leave"
  | "su-call"
  | "su-leave";

const weights: Array<[Kind, number]> = [
  ["p-ok", 14],
  ["p-fail", 5],
  ["p-badjson", 3],
  ["p-cut-stream", 4],
  ["p-cut-compressed", 4],
  ["p-destroy", 3],
  ["p-stall-idle", 3],
  ["p-stall-headers", 2],
  ["p-leave-before-body", 4],
  ["p-leave-mid-body", 4],
  ["p-leave-mid-stream", 5],
  ["p-leave-before-headers", 4],
  ["p-413", 3],
  ["p-413-chunked", 2],
  ["p-big-body", 8],
  ["p-slow-upload", 6],
  ["p-netcut", 5],
  ["p-wrong-key", 3],
  ["t-ok", 3],
  ["t-fail", 2],
  ["t-badjson", 2],
  ["t-stall", 1],
  ["t-leave", 2],
  ["pdf-ok", 2],
  ["pdf-stall", 1],
  ["pdf-reset", 1],
  ["pdf-hang", 1],
  ["pdf-leave", 1],
  ["img-ok", 2],
  ["img-fail", 1],
  ["img-leave", 1],
  ["dc-call", 5],
  ["dc-leave", 2],
  ["su-call", 5],
  ["su-leave", 3],
];

/** The header that names a call of the storm to the diagnostics channels undici publishes on. */
const callHeader = "x-storm-call";

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function resourceCounts(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const each of process.getActiveResourcesInfo()) counts[each] = (counts[each] ?? 0) + 1;
  return counts;
}

interface Stage {
  sluice: TestGateway;
  fake: FakeUpstream;
  proxyC: Awaited<ReturnType<typeof startTcpProxy>>;
  pdfServer: Server;
  pdfBase: string;
  plain: TestProject;
  capped: TestProject;
  structured: TestProject;
  pdfPending: () => number;
  apple: import("../fakes/fake-apple.js").FakeApple;
  device: TestProject;
  /** A project on single-use DeviceCheck tokens, with a spend cap. */
  singleUse: TestProject;
  deviceToken(): string;
  /** The process's active resources before the gateway started (the fakes' already there). */
  beforeGateway: Record<string, number>;
  /** Set once the test shut the gateway down itself: `close` then closes the rest. */
  gatewayClosed: boolean;
  close(): Promise<void>;
}

async function startStage(extra: Record<string, unknown>): Promise<Stage> {
  // Idle upstream connections end soon after the storm (undici keeps them a second less).
  const fake = await startFakeUpstream({ keepAliveTimeoutMs: 1500 });
  const appleKeys = generateAppleKeyPair();
  const apple = await startFakeApple({ label: "production" });
  apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: appleKeys.publicKeyPem });
  const proxyC = await startTcpProxy(Number(new URL(fake.url).port));
  const pdfSockets = new Set<import("node:net").Socket>();
  const pdfServer = createServer((req, res) => {
    const url = req.url ?? "";
    if (url.startsWith("/ok")) return void res.end(pdf);
    if (url.startsWith("/stall")) {
      res.writeHead(200, { "content-type": "application/pdf" });
      res.write(pdf.subarray(0, 5));
      return; // never ends
    }
    if (url.startsWith("/reset")) {
      res.writeHead(200, { "content-type": "application/pdf", "content-length": "1000" });
      res.write(pdf.subarray(0, 10));
      setTimeout(() => res.socket?.destroy(), 20);
      return;
    }
    // hang: no headers ever
  });
  pdfServer.on("connection", (socket) => {
    pdfSockets.add(socket);
    socket.on("close", () => pdfSockets.delete(socket));
  });
  await new Promise<void>((resolve) => pdfServer.listen(0, "127.0.0.5", resolve));
  const pdfBase = `http://127.0.0.5:${(pdfServer.address() as AddressInfo).port}`;
  const fetcher = createSafePdfFetcher({
    isAllowedAddress: (ip) => ip === "127.0.0.5",
    allowedProtocols: ["http:"],
    maxBytes: 1 << 20,
    timeoutMs: 500,
    maxFetches: maxPdfFetches,
  });
  let pending = 0;
  const beforeGateway = resourceCounts();
  const sluice = await startTestGateway(
    {
      ...providerBaseUrls(fake),
      providerCBaseUrl: `http://127.0.0.1:${proxyC.port}/c/v1beta`,
      upstreamHeadersTimeoutMs: 800,
      upstreamIdleTimeoutMs: 400,
      maxBodyBytes,
      maxBufferedBodyBytes: budgetBytes,
      maxConnections: 40,
      rateLimitProjectPerMinute: 1_000_000,
      rateLimitIpPerMinute: 1_000_000,
      authFailureLimit: 1_000_000,
      metricsEnabled: true,
      logLevel: "warn",
      deviceCheckProductionUrl: apple.url,
      deviceCheckTimeoutMs: 300,
      ...extra,
    },
    {
      fetchPdf: async (url, signal, requestId) => {
        pending++;
        try {
          return await fetcher(url, signal, requestId);
        } finally {
          pending--;
        }
      },
    },
  );
  const plain = await createTestProject(sluice.gateway);
  const capped = await createTestProject(sluice.gateway, { monthlySpendCapUsd: 3 });
  const structured = await createTestProject(sluice.gateway, {
    provider: "provider-a",
    outputSchema: schema,
  });
  const device = await createDeviceCheckProject(sluice.gateway, appleKeys.privateKeyPem, "cached", {
    monthlySpendCapUsd: 3,
  });
  const singleUse = await createDeviceCheckProject(sluice.gateway, appleKeys.privateKeyPem, "single-use", {
    monthlySpendCapUsd: 3,
  });
  const stage: Stage = {
    sluice,
    fake,
    proxyC,
    pdfServer,
    pdfBase,
    plain,
    capped,
    structured,
    pdfPending: () => pending,
    apple,
    device,
    singleUse,
    deviceToken: () => validDeviceToken(apple),
    beforeGateway,
    gatewayClosed: false,
    async close() {
      if (stage.gatewayClosed) rmSync(sluice.gateway.config.dataDir, { recursive: true, force: true });
      else await sluice.close();
      await apple.close();
      await proxyC.close();
      await fake.close();
      for (const socket of pdfSockets) socket.destroy();
      await new Promise((resolve) => pdfServer.close(resolve));
    },
  };
  return stage;
}

/** How a call of the storm ended, as its client saw it. */
interface Call {
  kind: Kind;
  /** The answer's status; null when none came. */
  status: number | null;
  /**
   * Why the call ended without its whole answer: `left` (the client's own choice), `closed` (the
   * gateway closed a raw call's connection), or the client's error code (ECONNREFUSED, …).
   */
  error?: string;
  /** An error answer's envelope: its code, and its message. */
  answer?: { code?: unknown; message?: unknown };
  /** The single-use device token the call carried. */
  token?: string;
  /** When its request was sent whole (undici's `bodySent`, a raw call's last write); unset if never. */
  sentAt?: number;
  /**
   * The connection it was sent on: when it was made, whether a call before it had used it, and its
   * port on this side.
   */
  connection?: { connectedAt: number; reused: boolean; port: number };
  /** An error answer's body, when it was no envelope. */
  body?: string;
}

interface Outcome extends Call {
  startedAt: number;
  endedAt: number;
}

/** The client's error, or `left` for its own abort. */
function errorOf(error: unknown): string {
  const { name, code } = error as { name?: string; code?: string };
  return name === "AbortError" ? "left" : (code ?? name ?? String(error));
}

/** The call's answer read to its end; an error answer's envelope kept. */
async function answerOf(
  kind: Kind,
  response: Awaited<ReturnType<typeof request>>,
): Promise<Call & { status: number }> {
  const status = response.statusCode;
  if (status < 400) {
    await response.body.dump({ limit: 10 << 20 });
    return { kind, status };
  }
  const text = await response.body.text();
  try {
    const { error } = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    return { kind, status, answer: { code: error?.code, message: error?.message } };
  } catch {
    return { kind, status, answer: {}, body: text.slice(0, 200) };
  }
}

/** A raw request on a socket of its own: headers, `sent` bytes of a body of `length`, then left or finished. */
function rawCall(
  port: number,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  plan: { sendBytes: number; leaveAfterMs: number; trickleMs?: number; chunked?: boolean },
): Promise<Pick<Call, "status" | "error" | "sentAt" | "connection" | "answer" | "body">> {
  return new Promise((resolve) => {
    const socket = connect(port, "127.0.0.1");
    let status: number | null = null;
    let settled = false;
    let sentAt: number | undefined;
    let connectedAt = -1;
    let localPort = -1;
    const received: Buffer[] = [];
    socket.once("connect", () => {
      connectedAt = performance.now();
      localPort = socket.localPort ?? -1;
    });
    const finish = (error: string) => {
      if (settled) return;
      settled = true;
      socket.destroy();
      const sent = {
        ...(sentAt === undefined ? {} : { sentAt }),
        connection: { connectedAt, reused: false, port: localPort },
      };
      if (status === null) return resolve({ status, error, ...sent });
      // An error answer's envelope, as answerOf reads it (the gateway's error answers have a length).
      const text = Buffer.concat(received).toString("utf8");
      const body = text.slice(text.indexOf("\r\n\r\n") + 4);
      if (status < 400) return resolve({ status, ...sent });
      try {
        const { error } = JSON.parse(body) as { error?: { code?: unknown; message?: unknown } };
        resolve({ status, ...sent, answer: { code: error?.code, message: error?.message } });
      } catch {
        resolve({ status, ...sent, answer: {}, body: body.slice(0, 200) });
      }
    };
    socket.on("error", (error: NodeJS.ErrnoException) => finish(error.code ?? error.name));
    socket.on("close", () => finish("closed"));
    socket.on("data", (chunk: Buffer) => {
      received.push(chunk);
      const found = /^HTTP\/1\.1 (\d{3})/.exec(chunk.toString("latin1"));
      if (found && status === null) status = Number(found[1]);
    });
    const head = Object.entries({
      host: "x",
      ...(plan.chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(body.length) }),
      ...headers,
    })
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join("");
    socket.write(`POST ${path} HTTP/1.1\r\n${head}connection: close\r\n\r\n`);
    const pieces = plan.trickleMs ? 8 : 1;
    const piece = Math.ceil(plan.sendBytes / pieces);
    let sent = 0;
    const sendMore = () => {
      if (settled) return;
      if (sent >= plan.sendBytes) {
        const whole = plan.sendBytes >= body.length;
        if (plan.chunked && whole) socket.write("0\r\n\r\n");
        // The request's last byte has left once the write ahead of this empty one has.
        if (whole)
          socket.write("", (error) => {
            if (!error) sentAt = performance.now();
          });
        return;
      }
      const part = body.subarray(sent, Math.min(plan.sendBytes, sent + piece));
      sent += part.length;
      if (plan.chunked) socket.write(`${part.length.toString(16)}\r\n`);
      socket.write(part);
      if (plan.chunked) socket.write("\r\n");
      if (plan.trickleMs) setTimeout(sendMore, plan.trickleMs / pieces);
      else sendMore();
    };
    sendMore();
    setTimeout(() => finish("left"), plan.leaveAfterMs);
  });
}

function proxyBody(provider: string, model: string, streamed: boolean, padding = 0): Record<string, unknown> {
  const content = `call ${model}${padding ? ` ${"x".repeat(padding)}` : ""}`;
  if (provider === "provider-b")
    return { model, max_tokens: 64, messages: [{ role: "user", content }], stream: streamed };
  if (provider === "provider-c") return { contents: [{ role: "user", parts: [{ text: content }] }] };
  return { model, messages: [{ role: "user", content }], stream: streamed };
}

function proxyPath(project: TestProject, provider: string, model: string, streamed: boolean): string {
  const base = `/v1/${provider}/${project.projectId}`;
  if (provider === "provider-a") return `${base}/chat/completions`;
  if (provider === "provider-b") return `${base}/v1/messages`;
  return `${base}/v1beta/models/${model}:${streamed ? "streamGenerateContent?alt=sse" : "generateContent"}`;
}

async function runStorm(
  stage: Stage,
  runSeed: number,
  count: number,
  dispatcher: Agent,
  /** Told each time a call ended, with how many have. */
  onEnded?: (ended: number) => void,
): Promise<Outcome[]> {
  const random = mulberry32(runSeed);
  const int = (low: number, high: number) => low + Math.floor(random() * (high - low + 1));
  const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)] as T;
  const total = weights.reduce((sum, [, w]) => sum + w, 0);
  const { sluice, fake } = stage;
  const port = Number(new URL(sluice.url).port);
  const plans = new Map<number, () => import("../fakes/fake-upstream.js").RequestPlan | undefined>();
  fake.setPlan((recorded) => {
    const found = /zz-(\d+)/.exec(`${recorded.path} ${recorded.body.toString("utf8")}`);
    return found ? plans.get(Number(found[1]))?.() : undefined;
  });
  const badJson = () => {
    fake.enqueueResponse({ status: 200, body: "{not json", headers: { "content-type": "application/json" } });
    return {};
  };
  // Cuts and restores the network path to provider C now and then.
  let cutting = true;
  const cutter = (async () => {
    while (cutting) {
      await sleep(int(100, 300));
      stage.proxyC.cut();
      await sleep(int(20, 80));
      stage.proxyC.restore();
    }
  })();
  // Rotates Apple's behaviour: answering, hanging past the timeout, closing, failing.
  const appleRotation = (async () => {
    while (cutting) {
      await sleep(int(100, 250));
      const mode = int(0, 5);
      stage.apple.fail(
        mode === 0
          ? { kind: "hang" }
          : mode === 1
            ? { kind: "close" }
            : mode === 2
              ? { kind: "status", status: 500 }
              : null,
      );
    }
    stage.apple.fail(null);
  })();
  const cachedTokens: string[] = [];
  const singleUseTokens: string[] = [];
  const outcomes: Outcome[] = [];
  let next = 0;
  const one = async (index: number): Promise<Call> => {
    let roll = random() * total;
    let kind: Kind = "p-ok";
    for (const [each, w] of weights) {
      roll -= w;
      if (roll < 0) {
        kind = each;
        break;
      }
    }
    const tag = `zz-${index}`;
    const usage = { input: int(1, 20_000), output: int(1, 4000), cached: 0, reasoning: 0 };
    if (kind.startsWith("p-")) {
      const provider = kind === "p-netcut" ? "provider-c" : pick(["provider-a", "provider-b"] as const);
      const project = random() < 0.35 ? stage.capped : stage.plain;
      const model =
        provider === "provider-a"
          ? `gpt-4o-mini-${tag}`
          : provider === "provider-b"
            ? `claude-haiku-4-5-${tag}`
            : `gemini-2.5-flash-${tag}`;
      const streamed =
        ["p-cut-stream", "p-stall-idle", "p-leave-mid-stream"].includes(kind) ||
        (!["p-cut-compressed", "p-badjson"].includes(kind) && random() < 0.5);
      const compression = random() < 0.25 ? pick(["gzip", "br", "deflate"] as const) : null;
      const planOf: Record<string, () => import("../fakes/fake-upstream.js").RequestPlan> = {
        "p-ok": () => ({ usage, compression }),
        "p-fail": () => ({ failStatus: pick([429, 500, 503]) }),
        "p-badjson": badJson,
        "p-cut-stream": () => ({ usage, streamEnd: "cut", compression }),
        "p-cut-compressed": () => ({
          usage,
          cutBody: true,
          compression: pick(["gzip", "br", "deflate"] as const),
        }),
        "p-destroy": () => ({ destroy: true }),
        "p-stall-idle": () => ({ usage, hangStreamsAfter: 1, compression }),
        "p-stall-headers": () => ({ latencyMs: 1500 }),
        "p-leave-mid-stream": () => ({ usage, hangStreamsAfter: 2, compression }),
        "p-leave-before-headers": () => ({ latencyMs: 400 }),
        "p-netcut": () => ({ usage, sseDelayMs: 20, compression }),
      };
      const planFn = planOf[kind] ?? (() => ({ usage }));
      plans.set(index, planFn);
      const bearer =
        kind === "p-wrong-key" ? `${project.partialKeys[provider]}.tk_wrong` : project.bearer(provider);
      const path = proxyPath(project, provider, model, streamed);
      const headers = {
        authorization: `Bearer ${bearer}`,
        "content-type": "application/json",
        [callHeader]: String(index),
      };
      let body = Buffer.from(JSON.stringify(proxyBody(provider, model, streamed)));
      if (kind === "p-413" || kind === "p-413-chunked")
        body = Buffer.from(JSON.stringify(proxyBody(provider, model, streamed, maxBodyBytes + 100)));
      if (kind === "p-big-body" || kind === "p-slow-upload")
        body = Buffer.from(JSON.stringify(proxyBody(provider, model, streamed, int(40_000, 60_000))));
      if (kind === "p-leave-before-body")
        return {
          kind,
          ...(await rawCall(port, path, headers, body, { sendBytes: 0, leaveAfterMs: int(0, 50) })),
        };
      if (kind === "p-leave-mid-body")
        return {
          kind,
          ...(await rawCall(port, path, headers, body, {
            sendBytes: Math.floor(body.length / 2),
            leaveAfterMs: int(0, 80),
            chunked: random() < 0.3,
          })),
        };
      if (kind === "p-413-chunked")
        return {
          kind,
          ...(await rawCall(port, path, headers, body, {
            sendBytes: body.length,
            leaveAfterMs: 3000,
            chunked: true,
          })),
        };
      if (kind === "p-slow-upload") {
        const completes = random() < 0.5;
        return {
          kind,
          ...(await rawCall(port, path, headers, body, {
            sendBytes: completes ? body.length : Math.floor(body.length * 0.7),
            trickleMs: int(100, 400),
            leaveAfterMs: completes ? 4000 : int(150, 450),
          })),
        };
      }
      const controller = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      if (kind === "p-leave-before-headers") timer = setTimeout(() => controller.abort(), int(0, 200));
      let status: number | null = null;
      try {
        const response = await request(`${sluice.url}${path}`, {
          method: "POST",
          headers,
          body,
          dispatcher,
          signal: controller.signal,
        });
        status = response.statusCode;
        if (kind !== "p-leave-mid-stream" || status >= 400) return await answerOf(kind, response);
        let first = true;
        for await (const _chunk of response.body) {
          if (first) {
            first = false;
            timer = setTimeout(() => controller.abort(), int(0, 100));
          }
        }
        return { kind, status };
      } catch (error) {
        return { kind, status, error: errorOf(error) };
      } finally {
        clearTimeout(timer);
      }
    }
    if (kind.startsWith("dc-") || kind.startsWith("su-")) {
      // A token new now and then, one sent before otherwise: in cached mode Apple is asked once per
      // token; in single-use mode a replay, refused once a call was admitted with the token, or the
      // retry of calls all refused before admission (a client that left, say), which passes.
      const cached = kind.startsWith("dc-");
      const tokens = cached ? cachedTokens : singleUseTokens;
      if (tokens.length === 0 || random() < (cached ? 0.4 : 0.5)) tokens.push(stage.deviceToken());
      const token = pick(tokens);
      const leaving = kind === "dc-leave" || kind === "su-leave";
      const model = `gpt-4o-mini-${tag}`;
      plans.set(index, () => ({ usage, latencyMs: leaving ? 300 : 0 }));
      const controller = new AbortController();
      const timer = leaving ? setTimeout(() => controller.abort(), int(0, 400)) : undefined;
      const project = cached ? stage.device : stage.singleUse;
      try {
        const response = await request(`${sluice.url}${proxyPath(project, "provider-a", model, false)}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${project.partialKeys["provider-a"]}.${token}`,
            "content-type": "application/json",
            [callHeader]: String(index),
          },
          body: JSON.stringify(proxyBody("provider-a", model, false)),
          dispatcher,
          signal: controller.signal,
        });
        return { ...(await answerOf(kind, response)), ...(cached ? {} : { token }) };
      } catch (error) {
        return { kind, status: null, error: errorOf(error), ...(cached ? {} : { token }) };
      } finally {
        clearTimeout(timer);
      }
    }
    // Structured and image endpoints.
    const project = stage.structured;
    let path: string;
    let payload: Record<string, unknown>;
    let leaveAfter: number | undefined;
    if (kind.startsWith("t-")) {
      path = `/v1/text/${project.projectId}`;
      payload = { text: `call ${tag}` };
      plans.set(
        index,
        {
          "t-ok": () => ({ usage }),
          "t-fail": () => ({ failStatus: pick([429, 500]) }),
          "t-badjson": badJson,
          "t-stall": () => ({ latencyMs: 1500 }),
          "t-leave": () => ({ latencyMs: 400 }),
        }[kind as "t-ok"],
      );
      if (kind === "t-leave") leaveAfter = int(0, 300);
    } else if (kind.startsWith("pdf-")) {
      path = `/v1/pdf/${project.projectId}`;
      const which = {
        "pdf-ok": "ok",
        "pdf-stall": "stall",
        "pdf-reset": "reset",
        "pdf-hang": "hang",
        "pdf-leave": "hang",
      }[kind as "pdf-ok"];
      payload = { pdf: `${stage.pdfBase}/${which}-${tag}.pdf` };
      plans.set(index, () => ({ usage }));
      if (kind === "pdf-leave") leaveAfter = int(0, 300);
    } else {
      path = `/v1/image/${project.projectId}`;
      payload = { prompt: `a cat ${tag}` };
      plans.set(
        index,
        {
          "img-ok": () => ({}),
          "img-fail": () => pick([{ failStatus: 500 }, { destroy: true }, { latencyMs: 1500 }]),
          "img-leave": () => ({ latencyMs: 400 }),
        }[kind as "img-ok"],
      );
      if (kind === "img-leave") leaveAfter = int(0, 300);
    }
    const controller = new AbortController();
    const timer = leaveAfter === undefined ? undefined : setTimeout(() => controller.abort(), leaveAfter);
    try {
      const response = await request(`${sluice.url}${path}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer("provider-a")}`,
          "content-type": "application/json",
          [callHeader]: String(index),
        },
        body: JSON.stringify(payload),
        dispatcher,
        signal: controller.signal,
      });
      return await answerOf(kind, response);
    } catch (error) {
      return { kind, status: null, error: errorOf(error) };
    } finally {
      clearTimeout(timer);
    }
  };
  const worker = async () => {
    for (let index = next++; index < count; index = next++) {
      const startedAt = performance.now();
      const call = await one(index);
      const sentAt = call.sentAt ?? sent.get(index);
      const connection = call.connection ?? connectionOf.get(index);
      outcomes.push({
        ...call,
        ...(sentAt === undefined ? {} : { sentAt }),
        ...(connection === undefined ? {} : { connection }),
        startedAt,
        endedAt: performance.now(),
      });
      onEnded?.(outcomes.length);
    }
  };
  // When each undici call's request was sent whole, and on which connection.
  const sent = new Map<number, number>();
  const connectionOf = new Map<number, { connectedAt: number; reused: boolean; port: number }>();
  const connectedAt = new WeakMap<object, number>();
  const usedBefore = new WeakSet<object>();
  const callOf = (request: { headers?: unknown }) => {
    const headers = request.headers;
    if (!Array.isArray(headers)) return undefined;
    const at = headers.indexOf(callHeader);
    return at < 0 ? undefined : Number(headers[at + 1]);
  };
  const onConnected = (message: unknown) => {
    connectedAt.set((message as { socket: object }).socket, performance.now());
  };
  const onSendHeaders = (message: unknown) => {
    const { request, socket } = message as {
      request: { headers?: unknown };
      socket: { localPort?: number };
    };
    const index = callOf(request);
    if (index === undefined) return;
    connectionOf.set(index, {
      connectedAt: connectedAt.get(socket) ?? -1,
      reused: usedBefore.has(socket),
      port: socket.localPort ?? -1,
    });
    usedBefore.add(socket);
  };
  const onBodySent = (message: unknown) => {
    const index = callOf((message as { request: { headers?: unknown } }).request);
    if (index !== undefined) sent.set(index, performance.now());
  };
  diagnostics.subscribe("undici:client:connected", onConnected);
  diagnostics.subscribe("undici:client:sendHeaders", onSendHeaders);
  diagnostics.subscribe("undici:request:bodySent", onBodySent);
  try {
    await Promise.all(Array.from({ length: concurrency }, worker));
  } finally {
    diagnostics.unsubscribe("undici:client:connected", onConnected);
    diagnostics.unsubscribe("undici:client:sendHeaders", onSendHeaders);
    diagnostics.unsubscribe("undici:request:bodySent", onBodySent);
  }
  cutting = false;
  await cutter;
  await appleRotation;
  fake.setPlan(null);
  return outcomes;
}

/** What Sluice holds now, read from its own counters and the probes above. */
/** What `held` reads once every call has ended: no byte, row, place, fetch, call or connection. */
const nothingHeld = {
  bodyBytes: 0,
  unrecorded: 0,
  placesUnderCap: 0,
  placesInRedis: 0,
  pdfFetches: 0,
  appleCalls: 0,
  upstreamRunning: 0,
  upstreamWaiting: 0,
  connections: 0,
};

function held(stage: Stage) {
  const { gateway } = stage.sluice;
  return {
    bodyBytes: gateway.bodyBudget.held(),
    unrecorded: probes.unrecorded.reduce((sum, read) => sum + read(), 0),
    placesUnderCap: probes.placesOut,
    placesInRedis: probes.shared.reduce((sum, each) => sum + each.held(), 0),
    pdfFetches: stage.pdfPending(),
    appleCalls: probes.appleInFlight,
    upstreamRunning: [...probes.pools.values()].reduce((sum, pool) => sum + (pool.stats.running ?? 0), 0),
    upstreamWaiting: [...probes.pools.values()].reduce(
      (sum, pool) => sum + (pool.stats.pending ?? 0) + (pool.stats.connected ?? 0) - (pool.stats.free ?? 0),
      0,
    ),
    connections: gateway.connections.open(),
  };
}

/** A call of the shutdown case as a failed check shows it: its times counted from the shutdown's start. */
function described(outcome: Outcome, stoppedAt: number, accepted: ReadonlyMap<number, number>) {
  const since = (at: number | undefined) => (at === undefined ? undefined : Math.round(at - stoppedAt));
  const { kind, status, error, answer, body, connection } = outcome;
  return {
    kind,
    status,
    error,
    ...(answer ? { answer, body } : {}),
    sent: since(outcome.sentAt),
    connected: since(connection?.connectedAt),
    takenByGateway: since(connection && accepted.get(connection.port)),
    ended: since(outcome.endedAt),
  };
}

/**
 * How the calls that ended once the shutdown began ended, counted (SLUICE_STORM_REPORT=1 prints it):
 * sent whole before it or not, the status or error, the kind, and the connection.
 */
function shutdownReport(
  outcomes: readonly Outcome[],
  stoppedAt: number,
  accepted: ReadonlyMap<number, number>,
): string {
  const tally = new Map<string, number>();
  for (const outcome of outcomes) {
    if (outcome.endedAt < stoppedAt) continue;
    const { kind, status, error, sentAt, connection, answer } = outcome;
    const sent =
      sentAt === undefined ? "never sent whole" : sentAt < stoppedAt ? "sent before" : "sent after";
    const end =
      status === null
        ? `no status, ${error}`
        : `${status}${status === 503 && answer?.code !== "SERVICE_UNAVAILABLE" ? " (no envelope)" : ""}${error ? `, then ${error}` : ""}`;
    const taken = connection ? accepted.get(connection.port) : undefined;
    const on =
      connection === undefined || connection.connectedAt < 0
        ? "no connection"
        : `${connection.reused ? "kept-alive" : "new"} connection ${taken === undefined ? "never taken" : taken < stoppedAt ? "taken before" : "taken after"}`;
    const key = `${sent} | ${end} | ${kind} | ${on}`;
    tally.set(key, (tally.get(key) ?? 0) + 1);
  }
  return [...tally]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, count]) => `${count}\t${key}`)
    .join("\n");
}

/** The gateway's metrics, on a connection closed once read (it must not count as one held). */
async function metricsOf(sluice: TestGateway): Promise<Record<string, number>> {
  const response = await request(`${sluice.url}/metrics`, { reset: true });
  const values: Record<string, number> = {};
  for (const line of (await response.body.text()).split("\n")) {
    if (line.startsWith("#") || line === "") continue;
    const at = line.lastIndexOf(" ");
    values[line.slice(0, at)] = Number(line.slice(at + 1));
  }
  return values;
}

/** The probes back to nothing seen, for the next case's gateway. */
function resetProbes(): void {
  probes.authCalls = 0;
  probes.placesTaken = 0;
  probes.appleCalls = 0;
  probes.unrecorded.length = 0;
  probes.pools.clear();
  probes.shared.length = 0;
  probes.admittedWith.length = 0;
  probes.pgPools.length = 0;
}

/** The PostgreSQL clients idle in the gateway's pools (closed after pg's 10 s idle timeout). */
function idlePostgresClients(): number {
  return probes.pgPools.reduce((sum, pool) => sum + pool.idleCount, 0);
}

/**
 * Where the gateway keeps its rows and counts: its defaults (SQLite in its data dir, every count
 * in memory), or PostgreSQL (a schema of this run's own, in SLUICE_STORM_DATABASE_URL's database
 * or the shared one) and Redis (a key prefix of this run's own).
 */
interface Engine {
  name: string;
  shared: boolean;
}

const engines: Engine[] = [
  { name: "SQLite and memory", shared: false },
  { name: "PostgreSQL and Redis", shared: true },
];

interface EngineSpace {
  settings: Record<string, unknown>;
  redisPrefix: string | null;
  /** The usage rows of a gateway that has closed, read from its database. */
  rowsAfterClose(
    sluice: TestGateway,
  ): Promise<Array<{ model: string | null; status: number; requests: number }>>;
  drop(): Promise<void>;
}

async function openEngine(engine: Engine): Promise<EngineSpace> {
  if (!engine.shared)
    return {
      settings: {},
      redisPrefix: null,
      async rowsAfterClose(sluice) {
        const database = new BetterSqlite3(join(sluice.gateway.config.dataDir, "sluice.sqlite"), {
          readonly: true,
        });
        try {
          return database.prepare("select model, status, requests from usage_records").all() as never;
        } finally {
          database.close();
        }
      },
      async drop() {},
    };
  const schema = await createPostgresSchema(process.env.SLUICE_STORM_DATABASE_URL);
  const redisPrefix = `storm-${randomBytes(4).toString("hex")}:`;
  return {
    settings: { databaseUrl: schema.url, redisUrl, redisKeyPrefix: redisPrefix },
    redisPrefix,
    async rowsAfterClose() {
      const client = new pg.Client({ connectionString: schema.url });
      await client.connect();
      try {
        const { rows } = await client.query("select model, status, requests from usage_records");
        return rows.map((row) => ({ ...row, requests: Number(row.requests) }));
      } finally {
        await client.end();
      }
    },
    async drop() {
      const redis = new Redis(redisUrl);
      const keys = await redis.keys(`${redisPrefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
      await schema.drop();
    },
  };
}

/** The Redis keys under `prefix` that match `pattern`, each with `read`'s answer. */
async function redisValues<T>(
  prefix: string,
  pattern: string,
  read: (redis: Redis, key: string) => Promise<T>,
): Promise<Map<string, T>> {
  const redis = new Redis(redisUrl);
  try {
    const keys = await redis.keys(`${prefix}${pattern}`);
    return new Map(await Promise.all(keys.map(async (key) => [key, await read(redis, key)] as const)));
  } finally {
    redis.disconnect();
  }
}

/** How many calls admission admitted with each single-use token of the storm. */
function singleUseAdmissions(outcomes: readonly Outcome[]): Map<string, number> {
  const admitted = new Map<string, number>();
  for (const { token } of outcomes) if (token !== undefined) admitted.set(token, 0);
  for (const header of probes.admittedWith) {
    const token = header.slice(header.lastIndexOf(".") + 1);
    const count = admitted.get(token);
    if (count !== undefined) admitted.set(token, count + 1);
  }
  return admitted;
}

async function usageRequests(sluice: TestGateway): Promise<number> {
  await sluice.gateway.flushUsage();
  const sum = await sluice.gateway.database.db
    .selectFrom("usage_records")
    .select((eb) => eb.fn.sum<number>("requests").as("requests"))
    .executeTakeFirst();
  return Number(sum?.requests ?? 0);
}

describe("what a storm of faulted calls held is given back", () => {
  let stage: Stage | undefined;
  let space: EngineSpace | undefined;
  afterEach(async () => {
    await stage?.close();
    await space?.drop();
    stage = undefined;
    space = undefined;
    resetProbes();
  });

  const sharedMissing = !postgresAvailable || !redisAvailable;

  for (const engine of engines)
    it.skipIf(engine.shared && sharedMissing)(
      `on ${engine.name}: leaves every budget, slot, place and connection idle, one usage row per authenticated request, and each single-use token admitted once at most`,
      async () => {
        space = await openEngine(engine);
        stage = await startStage(space.settings);
        const current = stage;
        const prefix = space.redisPrefix;
        await sleep(200);
        const baseline = resourceCounts();
        const idleBefore = idlePostgresClients();
        const dispatcher = new Agent({ connections: concurrency, keepAliveTimeout: 1000 });
        // The most each counter held during the storm.
        const most: Record<string, number> = {};
        const sampler = setInterval(() => {
          for (const [name, value] of Object.entries(held(current)))
            most[name] = Math.max(most[name] ?? 0, value);
        }, 5);
        let outcomes: Outcome[];
        try {
          outcomes = await runStorm(current, seed, calls, dispatcher);
        } finally {
          clearInterval(sampler);
          await dispatcher.close();
        }
        const statuses = new Set(outcomes.map((outcome) => outcome.status));
        // The faults were met: refusals of the body's size and of the budget, provider failures, timeouts.
        for (const status of [200, 401, 413, 502, 503, 504])
          expect(statuses, `seed ${seed}`).toContain(status);
        for (const name of Object.keys(nothingHeld))
          if (name !== "placesInRedis" || engine.shared)
            expect(most[name], `${name} held during the storm`).toBeGreaterThan(0);
        await vi.waitFor(
          async () => {
            expect(held(current)).toEqual(nothingHeld);
            expect(await usageRequests(current.sluice), `seed ${seed}: usage rows`).toBe(probes.authCalls);
          },
          { timeout: 15_000, interval: 100 },
        );
        // Every socket and timer the storm made is gone, but the upstream connections left idle (reused by
        // the next calls, or closed after the pools' 30 s): undici opens one when a call is aborted once
        // sent (nodejs/undici#5845). Each is at most four sockets of this process (through provider C's
        // proxy). So are the PostgreSQL clients the storm's writes opened, idle in their pools, each a
        // socket and an idle timer. Read outside vi.waitFor, whose own timers would count.
        let resources = resourceCounts();
        let idleConnections = 0;
        let idleClients = 0;
        const beside = () => {
          const { TCPSocketWrap: sockets = 0, Timeout: timers = 0, ...others } = resources;
          return { others, timers: timers - idleClients, sockets: sockets - idleClients };
        };
        const { TCPSocketWrap: socketsBefore = 0, Timeout: timersBefore = 0, ...othersBefore } = baseline;
        for (let tries = 0; tries < 100; tries++) {
          idleConnections = [...probes.pools.values()].reduce((sum, pool) => sum + (pool.stats.free ?? 0), 0);
          idleClients = idlePostgresClients() - idleBefore;
          resources = resourceCounts();
          const now = beside();
          if (
            JSON.stringify(now.others) === JSON.stringify(othersBefore) &&
            now.timers === timersBefore &&
            now.sockets <= socketsBefore + 4 * idleConnections
          )
            break;
          await sleep(100);
        }
        const now = beside();
        expect(now.others).toEqual(othersBefore);
        expect(now.timers).toBe(timersBefore);
        expect(now.sockets - socketsBefore).toBeLessThanOrEqual(4 * idleConnections);
        const metrics = await metricsOf(current.sluice);
        expect(metrics.sluice_buffered_body_bytes).toBe(0);
        expect(metrics.sluice_usage_queue_depth).toBe(0);
        expect(metrics.sluice_usage_rows_dropped_total).toBe(0);
        expect(metrics.sluice_body_budget_refusals_total, "bodies the budget refused").toBeGreaterThan(0);
        if (prefix !== null) {
          const places = await redisValues(prefix, "sluice:spend-in-flight:*", (redis, key) =>
            redis.zcard(key),
          );
          expect([...places.values()].every((count) => count === 0)).toBe(true);
        }
        await expectSingleUseKept(current, outcomes, prefix);
      },
      60_000,
    );

  for (const engine of engines)
    it.skipIf(engine.shared && sharedMissing)(
      `on ${engine.name}: a shutdown in the middle of the storm gives back everything held, writes no row twice, and leaves no connection or timer`,
      async () => {
        space = await openEngine(engine);
        stage = await startStage({ ...space.settings, shutdownTimeoutMs: 400 });
        const current = stage;
        const { sluice } = current;
        const dispatcher = new Agent({ connections: concurrency, keepAliveTimeout: 1000 });
        let outcomes: Outcome[];
        let stoppedAt = 0;
        /** The client ports of the connections the gateway took, and when. */
        const accepted = new Map<number, number>();
        sluice.server.on("connection", (socket: import("node:net").Socket) => {
          accepted.set(socket.remotePort ?? -1, performance.now());
        });
        try {
          // Once a quarter of the calls have ended: the others are under way or still to come.
          let stopping: Promise<void> | undefined;
          const storm = runStorm(current, seed + 1, calls, dispatcher, (ended) => {
            if (ended < calls / 4 || stopping) return;
            stoppedAt = performance.now();
            stopping = shutDown(sluice.server, sluice.gateway);
          });
          outcomes = await storm;
          await stopping;
          current.gatewayClosed = true;
        } finally {
          await dispatcher.close();
        }
        const during = outcomes.filter((outcome) => outcome.endedAt >= stoppedAt);
        if (process.env.SLUICE_STORM_REPORT) console.log(shutdownReport(outcomes, stoppedAt, accepted));
        // Nothing is held once the gateway closed: every admitted call's row written (or dropped), no
        // place, budget, PDF fetch, Apple call or upstream connection.
        expect(held(current)).toEqual(nothingHeld);
        // Every call whose request was sent whole before the shutdown began got an answer, but for those
        // whose client left by design: its answer, a 503 refusal at the deadline, or a stream begun and
        // then cut; never a bare reset of a connection the gateway took. The drain takes the
        // connections still queued on the listener for 25 ms at most before it closes it: under load
        // one queued longer than that, which the gateway never took, is reset (the connection-drain
        // test shows those queued taken; decision 0012). (A call sent later may also meet a closed
        // listener, or an idle connection closed as it was sent: README, "Shutdown".)
        const sentBefore = outcomes.filter(
          (outcome) => outcome.sentAt !== undefined && outcome.sentAt < stoppedAt,
        );
        const neverTaken = (outcome: Outcome) =>
          outcome.connection !== undefined &&
          !outcome.connection.reused &&
          !accepted.has(outcome.connection.port);
        expect(sentBefore.length).toBeGreaterThan(0);
        expect(
          sentBefore
            .filter((outcome) => outcome.status === null && outcome.error !== "left" && !neverTaken(outcome))
            .map((outcome) => described(outcome, stoppedAt, accepted)),
          `seed ${seed + 1}: calls sent before the shutdown without an answer`,
        ).toEqual([]);
        // Every 503 is the gateway's envelope, whole, but a provider's own, passed on (with its message).
        expect(
          outcomes
            .filter(
              (outcome) =>
                outcome.status === 503 &&
                outcome.answer?.code !== "SERVICE_UNAVAILABLE" &&
                !(outcome.kind === "p-fail" && typeof outcome.answer?.message === "string"),
            )
            .map((outcome) => described(outcome, stoppedAt, accepted)),
          `seed ${seed + 1}: 503 answers without the envelope`,
        ).toEqual([]);
        // No row is written twice. (Rows lost were seen now and then under load and are not checked
        // here yet.)
        const rows = await space.rowsAfterClose(sluice);
        expect(
          rows.reduce((sum, row) => sum + row.requests, 0),
          `seed ${seed + 1}: usage rows`,
        ).toBeLessThanOrEqual(probes.authCalls);
        // The calls that came once the gateway stopped listening were refused at connection.
        expect(new Set(during.map((outcome) => outcome.error))).toContain("ECONNREFUSED");
        // No socket or timer of the gateway is left: the process holds no more of each kind than it did
        // before the gateway started (fewer, when a former case's idle connection closed meanwhile).
        const before = current.beforeGateway;
        const more = () =>
          Object.entries(resourceCounts()).filter(([kind, count]) => count > (before[kind] ?? 0));
        for (let tries = 0; tries < 50 && more().length > 0; tries++) await sleep(100);
        expect(Object.fromEntries(more()), "resources beyond those before the gateway").toEqual({});
      },
      60_000,
    );
});

/**
 * Each single-use token of the storm was admitted once at most (the calls sent with it again were
 * replays, 401), and none is left marked by calls that were all refused before admission: sent
 * again now, a token admitted before is refused as a replay, and so is one a replay met while a
 * call held its mark (docs/auth.md: the replay gives nothing back, the token stays used); any other
 * passes, once. In Redis, such a token's entry counts no use.
 */
async function expectSingleUseKept(stage: Stage, stormed: readonly Outcome[], prefix: string | null) {
  // The storm met each way a single-use call ends: admitted, a replay, Apple unavailable, a client gone.
  const ends = new Set(
    stormed.filter((outcome) => outcome.token !== undefined).map((o) => o.status ?? o.error),
  );
  for (const end of [200, 401, 503, "left"]) expect(ends, `seed ${seed}`).toContain(end);
  // Whether a token of the storm's was refused on each of its calls depends on their timing against
  // Apple's rotation (another of its calls may pass later): one more is, for sure, with Apple failing.
  stage.apple.fail({ kind: "status", status: 500 });
  const refusedToken = stage.deviceToken();
  const startedAt = performance.now();
  const refused = await request(
    `${stage.sluice.url}${proxyPath(stage.singleUse, "provider-a", "gpt-4o-mini", false)}`,
    {
      method: "POST",
      headers: {
        authorization: `Bearer ${stage.singleUse.partialKeys["provider-a"]}.${refusedToken}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(proxyBody("provider-a", "gpt-4o-mini", false)),
      reset: true,
    },
  );
  stage.apple.fail(null);
  const refusal = { ...(await answerOf("su-call", refused)), token: refusedToken };
  expect(refusal.status, "a call while Apple fails").toBe(503);
  const outcomes = [...stormed, { ...refusal, startedAt, endedAt: performance.now() }];
  const admitted = singleUseAdmissions(outcomes);
  const singleUse = outcomes.filter((outcome) => outcome.token !== undefined);
  expect(
    [...admitted].filter(([, count]) => count > 1),
    `seed ${seed}: tokens admitted twice`,
  ).toEqual([]);
  const replays = singleUse.filter((outcome) => outcome.status === 401);
  expect(
    replays.filter((outcome) => !/already used/.test(String(outcome.answer?.message))),
    "every 401 a replay",
  ).toEqual([]);
  const replayed = new Set(replays.map((outcome) => outcome.token));
  const unused = [...admitted.keys()].filter((token) => admitted.get(token) === 0 && !replayed.has(token));
  expect(unused.length, "tokens no call was admitted with").toBeGreaterThan(0);
  if (prefix !== null) {
    const uses = await redisValues(
      prefix,
      `sluice:device-token:${stage.singleUse.projectId}:*`,
      (redis, key) => (key.endsWith(":verified") ? Promise.resolve(null) : redis.get(key)),
    );
    const marked = unused.filter((token) => {
      const value = uses.get(
        `${prefix}sluice:device-token:${stage.singleUse.projectId}:${deviceTokenDigest(token)}`,
      );
      return value !== undefined && value !== null && Number(value) !== 0;
    });
    expect(marked, `seed ${seed}: unused tokens marked in Redis`).toEqual([]);
  }
  stage.fake.setPlan(() => ({ usage: { input: 10, output: 10, cached: 0, reasoning: 0 } }));
  const again = async (token: string) => {
    const response = await request(
      `${stage.sluice.url}${proxyPath(stage.singleUse, "provider-a", "gpt-4o-mini", false)}`,
      {
        method: "POST",
        headers: {
          authorization: `Bearer ${stage.singleUse.partialKeys["provider-a"]}.${token}`,
          "content-type": "application/json",
        },
        body: JSON.stringify(proxyBody("provider-a", "gpt-4o-mini", false)),
        reset: true,
      },
    );
    await response.body.dump();
    return response.statusCode;
  };
  const wrong: Array<{ admitted: number; replayed: boolean; first: number; second: number }> = [];
  for (const [token, count] of admitted) {
    const first = await again(token);
    const second = await again(token);
    const free = count === 0 && !replayed.has(token);
    if (first !== (free ? 200 : 401) || second !== 401)
      wrong.push({ admitted: count, replayed: replayed.has(token), first, second });
  }
  expect(wrong, `seed ${seed}: tokens sent again (${admitted.size})`).toEqual([]);
  stage.fake.setPlan(null);
}

/**
 * Soak run of the production build (`npm run build` first): SLUICE_ENV=production on PostgreSQL and
 * Redis, fake providers and a fake Apple in this process, ~15 req/s of mixed traffic for
 * SOAK_MINUTES (default 18). Samples memory, Redis keys, /metrics series and usage rows every 30 s,
 * then stops the gateway with SIGTERM and compares the usage rows with the requests sent.
 * Needs DATABASE_URL (a scratch database) and REDIS_URL; SOAK_DIR for the log and samples.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes, randomInt } from "node:crypto";
import { createWriteStream, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Redis } from "ioredis";
import pg from "pg";
import { Agent, request } from "undici";
import { generateAppleKeyPair, startFakeApple } from "../test/fakes/fake-apple.js";
import { startFakeUpstream } from "../test/fakes/fake-upstream.js";

const root = join(import.meta.dirname, "..");
const minutes = Number(process.env.SOAK_MINUTES ?? 18);
const dir = process.env.SOAK_DIR ?? "/tmp/soak-run";
const databaseUrl = process.env.DATABASE_URL ?? "";
const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";
const prefix = process.env.SOAK_REDIS_PREFIX ?? `soak-${randomBytes(3).toString("hex")}:`;
const targetRps = Number(process.env.SOAK_RPS ?? 15);
if (!databaseUrl.startsWith("postgres")) throw new Error("DATABASE_URL: a scratch PostgreSQL database");
mkdirSync(dir, { recursive: true });

// --- fakes -------------------------------------------------------------------------------------
const upstream = await startFakeUpstream({ keepAliveTimeoutMs: 65_000 });
upstream.setStructuredOutput({ answer: "fake" });
upstream.setPlan((r) => {
  const body = r.body.toString("utf8");
  if (body.includes("soak-slow")) return { sseDelayMs: 150 };
  if (body.includes("soak-hang")) return { latencyMs: 3000 };
  return undefined;
});
setInterval(() => upstream.clear(), 1000).unref();
const apple = await startFakeApple({ label: "production" });
const { privateKeyPem, publicKeyPem } = generateAppleKeyPair();
apple.registerKey("SOAKKEY001", { teamId: "SOAKTEAM01", publicKeyPem });
setInterval(() => {
  apple.calls.length = 0;
}, 5000).unref();
const newToken = () => {
  const token = randomBytes(1800).toString("base64");
  apple.registerValidToken(token);
  return token;
};
const tokens = Array.from({ length: 400 }, newToken);

// --- gateway -----------------------------------------------------------------------------------
const adminToken = randomBytes(24).toString("hex");
const log = createWriteStream(join(dir, "gateway.log"));
const gateway: ChildProcess = spawn(
  process.execPath,
  ["--heapsnapshot-signal=SIGUSR2", join(root, "dist/src/main.js")],
  {
    cwd: dir,
    env: {
      PATH: process.env.PATH ?? "",
      SLUICE_ENV: "production",
      HOST: "127.0.0.1",
      PORT: "0",
      LOG_LEVEL: "info",
      SLUICE_DATA_DIR: join(dir, "data"),
      SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      SLUICE_ADMIN_TOKEN: adminToken,
      DATABASE_URL: databaseUrl,
      REDIS_URL: redisUrl,
      SLUICE_REDIS_KEY_PREFIX: prefix,
      SLUICE_TRUST_PROXY: "127.0.0.1",
      SLUICE_PROVIDER_A_BASE_URL: `${upstream.url}/a/v1`,
      SLUICE_PROVIDER_B_BASE_URL: `${upstream.url}/b/v1`,
      SLUICE_PROVIDER_C_BASE_URL: `${upstream.url}/c/v1beta`,
      SLUICE_PROVIDER_A_IMAGE_MODEL: "gpt-image-2.6-sunburst",
      SLUICE_PROVIDER_C_IMAGE_MODEL: "gemini-nano-banana-2.1",
      SLUICE_DEVICECHECK_PRODUCTION_URL: apple.url,
    },
    stdio: ["ignore", "pipe", "pipe"],
  },
);
gateway.stdout?.pipe(log);
gateway.stderr?.pipe(log);
const base = await new Promise<string>((resolve, reject) => {
  let seen = "";
  const timer = setTimeout(() => reject(new Error(`no start: ${seen}`)), 60_000);
  gateway.stdout?.on("data", function onData(chunk: Buffer) {
    seen += String(chunk);
    const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(seen);
    if (match?.[1]) {
      clearTimeout(timer);
      gateway.stdout?.off("data", onData);
      resolve(match[1]);
    }
  });
  gateway.once("exit", (code) => reject(new Error(`exited ${code}: ${seen}`)));
});
const pid = gateway.pid ?? 0;
console.log(`gateway ${pid} at ${base}, redis prefix ${prefix}`);

// Enough connections that no request waits in the client for one (an abort there would reach nobody).
const agent = new Agent({ connections: 256, keepAliveTimeout: 30_000 });
const admin = async (method: "GET" | "POST", path: string, body?: unknown, token = adminToken) => {
  const response = await request(`${base}/admin/v1${path}`, {
    dispatcher: agent,
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.statusCode, json: (await response.body.json()) as Record<string, unknown> };
};
const deviceCheck = {
  enabled: true,
  teamId: "SOAKTEAM01",
  keyId: "SOAKKEY001",
  privateKey: privateKeyPem,
  environment: "production",
};
const outputSchema = {
  type: "object",
  properties: { answer: { type: "string" } },
  required: ["answer"],
  additionalProperties: false,
};
type Provider = "provider-a" | "provider-b" | "provider-c";
interface Project {
  id: string;
  provider: Provider;
  partial: Record<Provider, string>;
}
async function project(provider: Provider, extra: Record<string, unknown> = {}): Promise<Project> {
  const created = await admin("POST", "/projects", {
    name: `soak ${provider}`,
    provider,
    deviceCheck,
    outputSchema,
    ...extra,
  });
  const id = (created.json.project as { id: string } | undefined)?.id;
  if (!id) throw new Error(`project: ${JSON.stringify(created.json)}`);
  const partial = {} as Record<Provider, string>;
  for (const p of ["provider-a", "provider-b", "provider-c"] as const) {
    const key = await admin("POST", `/projects/${id}/keys`, {
      provider: p,
      apiKey: `sk-soak-${randomBytes(16).toString("hex")}`,
    });
    partial[p] = key.json.partialKey as string;
  }
  return { id, provider, partial };
}
const projects = [await project("provider-a"), await project("provider-b"), await project("provider-c")];
const burst = await project("provider-a", { rateLimits: { perMinute: 20, devicePerMinute: 120 } });

// --- traffic -----------------------------------------------------------------------------------
/** What was sent, by scenario and status, and how many usage rows should stand for it. */
const counts = new Map<string, number>();
let rowsExpected = 0;
let sent = 0;
let transportErrors = 0;
const count = (key: string) => counts.set(key, (counts.get(key) ?? 0) + 1);
const pick = <T>(list: readonly T[]): T => list[randomInt(list.length)] as T;
const ips = Array.from({ length: 200 }, (_, i) => `198.51.100.${i + 1}`);
const clientIp = () =>
  randomInt(20) === 0
    ? `2001:db8:${randomInt(65536).toString(16)}::${randomInt(65536).toString(16)}`
    : pick(ips);

interface Call {
  name: string;
  method?: "GET" | "POST";
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
  /** Whether the gateway writes a usage row for it (before the throttle's say). */
  row: boolean;
  /** Read this many body chunks, then cut the connection; `abortAfterMs`: cut before the answer. */
  cutAfterChunks?: number;
  abortAfterMs?: number;
}

async function send(call: Call): Promise<void> {
  sent++;
  const controller = new AbortController();
  const timer = call.abortAfterMs ? setTimeout(() => controller.abort(), call.abortAfterMs) : null;
  try {
    const response = await request(`${base}${call.path}`, {
      dispatcher: agent,
      method: call.method ?? "POST",
      headers: {
        "x-forwarded-for": clientIp(),
        ...(call.body === undefined ? {} : { "content-type": "application/json" }),
        ...call.headers,
      },
      ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
      signal: controller.signal,
    });
    const policy = String(response.headers["ratelimit-policy"] ?? "");
    const throttled = response.statusCode === 429 && policy.includes("auth-failures");
    if (call.row && !throttled) rowsExpected++;
    count(`${call.name} ${response.statusCode}${throttled ? " throttled" : ""}`);
    if (call.cutAfterChunks) {
      let chunks = 0;
      for await (const _ of response.body) {
        if (++chunks >= call.cutAfterChunks) break;
      }
      response.body.destroy();
    } else {
      await response.body.dump({ limit: 10 * 1024 * 1024 });
    }
  } catch (error) {
    if (controller.signal.aborted) {
      if (call.row) rowsExpected++;
      count(`${call.name} aborted`);
    } else {
      transportErrors++;
      count(`${call.name} error ${(error as Error).message}`);
    }
  } finally {
    if (timer) clearTimeout(timer);
  }
}

const models = {
  "provider-a": "gpt-4o-mini",
  "provider-b": "claude-sonnet-4-5",
  "provider-c": "gemini-2.5-flash",
};
function proxied(
  p: Project,
  provider: Provider,
  mode: "json" | "sse" | "cut" | "hang",
  token = pick(tokens),
): Call {
  const credential = `${p.partial[provider]}.${token}`;
  const marker = mode === "cut" ? "soak-slow" : mode === "hang" ? "soak-hang" : "hello";
  const stream = mode !== "json" && mode !== "hang";
  const extra = mode === "cut" ? { cutAfterChunks: 2 } : mode === "hang" ? { abortAfterMs: 300 } : {};
  const name = `${provider} ${mode}`;
  if (provider === "provider-a")
    return {
      name,
      path: `/v1/provider-a/${p.id}/chat/completions`,
      headers: { authorization: `Bearer ${credential}` },
      body: {
        model: models[provider],
        messages: [{ role: "user", content: marker }],
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      },
      row: true,
      ...extra,
    };
  if (provider === "provider-b")
    return {
      name,
      path: `/v1/provider-b/${p.id}/v1/messages`,
      headers: { "x-api-key": credential, "anthropic-version": "2023-06-01" },
      body: {
        model: models[provider],
        max_tokens: 64,
        messages: [{ role: "user", content: marker }],
        ...(stream ? { stream: true } : {}),
      },
      row: true,
      ...extra,
    };
  return {
    name,
    path: `/v1/provider-c/${p.id}/v1beta/models/${models[provider]}:${stream ? "streamGenerateContent?alt=sse" : "generateContent"}`,
    headers: { "x-goog-api-key": credential },
    body: { contents: [{ role: "user", parts: [{ text: marker }] }] },
    row: true,
    ...extra,
  };
}

const providers = ["provider-a", "provider-b", "provider-c"] as const;
const chat = (p: Project | string) => `/v1/provider-a/${typeof p === "string" ? p : p.id}/chat/completions`;
const bearer = (p: Project, provider: Provider = "provider-a", token = pick(tokens)) => ({
  authorization: `Bearer ${p.partial[provider]}.${token}`,
});
const hex = (bytes: number) => randomBytes(bytes).toString("hex");
/** A call with a usage row (`row`) or without; a body makes it a POST. */
const call = (
  name: string,
  path: string,
  headers: Record<string, string>,
  body?: unknown,
  row = true,
): Call =>
  body === undefined ? { name, method: "GET", path, headers, row } : { name, path, headers, body, row };
const adminAuth = { authorization: `Bearer ${adminToken}` };
const scenarios: Array<[number, () => Call | Promise<void>]> = [
  [30, () => proxied(pick(projects), pick(providers), "json")],
  [25, () => proxied(pick(projects), pick(providers), "sse")],
  [6, () => proxied(pick(projects), pick(providers), "cut")],
  [3, () => proxied(pick(projects), pick(providers), "hang")],
  [
    8,
    () => {
      const p = pick(projects);
      return call(`text ${p.provider}`, `/v1/text/${p.id}`, bearer(p, p.provider), {
        text: "Summarise: soak",
      });
    },
  ],
  [
    2,
    () => {
      // A token Apple has not seen yet: one verification, then a ledger entry (kept in the pool).
      const fresh = newToken();
      tokens.push(fresh);
      if (tokens.length > 2000) tokens.splice(0, 1);
      return proxied(pick(projects), "provider-a", "json", fresh);
    },
  ],
  [
    2,
    () =>
      call(
        "wrong partial key",
        chat(pick(projects)),
        { authorization: `Bearer sk_sluice_${hex(20)}.${pick(tokens)}` },
        {},
      ),
  ],
  // Apple answers 400 for a token it does not know: 401.
  [
    1,
    () => {
      const p = pick(projects);
      return call(
        "unknown device token",
        chat(p),
        bearer(p, "provider-a", randomBytes(300).toString("base64")),
        {},
      );
    },
  ],
  [
    1,
    () =>
      call(
        "unknown project",
        chat(`prj_${hex(6)}`),
        { authorization: `Bearer sk_sluice_x.${pick(tokens)}` },
        {},
      ),
  ],
  [
    1,
    () => {
      const p = pick(projects);
      return call("upstream 404", `/v1/provider-a/${p.id}/no/such/path`, bearer(p));
    },
  ],
  [
    1,
    () => {
      const p = pick(projects);
      return call(
        "wrong provider key",
        `/v1/provider-b/${p.id}/v1/messages`,
        { "x-api-key": bearer(p).authorization.slice(7) },
        { model: "x", max_tokens: 1, messages: [] },
      );
    },
  ],
  [1, () => call("no route", `/v1/nothing/${hex(4)}`, {}, undefined, false)],
  [2, () => call("admin projects", "/admin/v1/projects", adminAuth, undefined, false)],
  [
    1,
    () =>
      call(
        "admin usage",
        `/admin/v1/projects/${pick(projects).id}/usage?groupBy=${pick(["day", "model", "endpoint"])}`,
        adminAuth,
        undefined,
        false,
      ),
  ],
  [
    1,
    () =>
      call("admin bad token", "/admin/v1/projects", { authorization: `Bearer ${hex(8)}` }, undefined, false),
  ],
  [1, () => call("health", "/health", {}, undefined, false)],
  [1, () => call("models", `/v1/${pick(providers)}/models`, {}, undefined, false)],
];
const totalWeight = scenarios.reduce((sum, [w]) => sum + w, 0);
function next(): Call | Promise<void> {
  let r = randomInt(totalWeight);
  for (const [w, make] of scenarios) {
    if (r < w) return make();
    r -= w;
  }
  throw new Error("unreachable");
}

/** 40 calls at once on the project limited to 20 a minute (authenticated 429s, coalesced rows). */
async function rateLimitBurst() {
  const token = pick(tokens);
  await Promise.all(
    Array.from({ length: 40 }, () => send({ ...proxied(burst, "provider-a", "json", token), name: "burst" })),
  );
}
/** 40 wrong keys from one address: 30 rows, then the throttle's 429s (no rows). */
async function authFailureBurst() {
  const ip = `203.0.113.${randomInt(1, 255)}`;
  const p = pick(projects);
  for (let i = 0; i < 40; i++)
    await send({
      name: "auth burst",
      path: `/v1/provider-a/${p.id}/chat/completions`,
      headers: {
        "x-forwarded-for": ip,
        authorization: `Bearer sk_sluice_${randomBytes(20).toString("hex")}.${pick(tokens)}`,
      },
      body: {},
      row: true,
    });
}

// --- samples -----------------------------------------------------------------------------------
const db = new pg.Pool({ connectionString: databaseUrl, max: 2 });
const redis = new Redis(redisUrl, { lazyConnect: false, maxRetriesPerRequest: 1 });
async function redisKeys() {
  let cursor = "0";
  let total = 0;
  let noTtl = 0;
  const kinds = new Map<string, number>();
  do {
    const [nextCursor, keys] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
    cursor = nextCursor;
    for (const key of keys) {
      total++;
      const kind = key.slice(prefix.length).split(":").slice(0, 2).join(":");
      kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
      if ((await redis.pttl(key)) === -1) noTtl++;
    }
  } while (cursor !== "0");
  return { total, noTtl, kinds: Object.fromEntries(kinds) };
}
async function usageRows() {
  const result = await db.query<{ rows: string; requests: string }>(
    "select count(*) as rows, coalesce(sum(requests), 0) as requests from usage_records",
  );
  return { rows: Number(result.rows[0]?.rows), requests: Number(result.rows[0]?.requests) };
}
async function metrics() {
  const response = await request(`${base}/metrics`, { dispatcher: agent });
  const text = await response.body.text();
  const lines = text.split("\n").filter((line) => line && !line.startsWith("#"));
  const value = (name: string) => Number(lines.find((line) => line.startsWith(`${name} `))?.split(" ")[1]);
  const families = new Map<string, number>();
  for (const line of lines) {
    const name = /^[a-zA-Z_:]+/.exec(line)?.[0] ?? "";
    families.set(name, (families.get(name) ?? 0) + 1);
  }
  return {
    series: lines.length,
    rss: value("sluice_process_resident_memory_bytes"),
    heapUsed: value("sluice_nodejs_heap_size_used_bytes"),
    heapTotal: value("sluice_nodejs_heap_size_total_bytes"),
    external: value("sluice_nodejs_external_memory_bytes"),
    queueDepth: value("sluice_usage_queue_depth"),
    written: value("sluice_usage_rows_written_total"),
    dropped: value("sluice_usage_rows_dropped_total"),
    families: Object.fromEntries([...families].filter(([, n]) => n > 20)),
  };
}
const proc = () => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]);
  return { rssKiB: kb("VmRSS"), hwmKiB: kb("VmHWM") };
};
const samples: unknown[] = [];
const started = Date.now();
async function sample() {
  const entry = {
    t: Math.round((Date.now() - started) / 1000),
    sent,
    rowsExpected,
    ...proc(),
    metrics: await metrics(),
    redis: await redisKeys(),
    usage: await usageRows(),
  };
  samples.push(entry);
  writeFileSync(join(dir, "samples.json"), JSON.stringify(samples, null, 1));
  const m = entry.metrics;
  console.log(
    `t=${entry.t}s sent=${sent} rss=${(entry.rssKiB / 1024).toFixed(1)}MiB heapUsed=${(m.heapUsed / 2 ** 20).toFixed(1)}MiB ` +
      `series=${m.series} redisKeys=${entry.redis.total} (noTtl ${entry.redis.noTtl}) rows=${entry.usage.rows}/${entry.usage.requests} expected~${rowsExpected} queue=${m.queueDepth}`,
  );
}

// --- run ---------------------------------------------------------------------------------------
// Heap snapshots (SIGUSR2) only after the measured minutes: writing one raises the RSS for good.
const snapshotMinutes = Number(process.env.SOAK_SNAPSHOT_MINUTES ?? 4);
const endAt = started + (minutes + snapshotMinutes) * 60_000;
const snapshotsAt = snapshotMinutes > 0 ? [started + minutes * 60_000, endAt - 15_000] : [];
const inFlight = new Set<Promise<void>>();
await sample();
let nextSample = Date.now() + 30_000;
let nextBurst = Date.now() + 45_000;
let nextAuthBurst = Date.now() + 100_000;
const interval = 1000 / targetRps;
let due = Date.now();
while (Date.now() < endAt) {
  const now = Date.now();
  if (now >= nextSample) {
    nextSample += 30_000;
    void sample();
  }
  if (now >= nextBurst) {
    nextBurst += 90_000;
    const p = rateLimitBurst();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }
  if (now >= nextAuthBurst) {
    nextAuthBurst += 150_000;
    const p = authFailureBurst();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }
  if (snapshotsAt[0] !== undefined && now >= snapshotsAt[0]) {
    snapshotsAt.shift();
    console.log("heap snapshot (SIGUSR2)");
    gateway.kill("SIGUSR2");
  }
  if (inFlight.size < 64) {
    const made = next();
    const p = made instanceof Promise ? made : send(made);
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  }
  due += interval;
  const wait = due - Date.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
  else due = Date.now();
}
await Promise.all(inFlight);
await sample();
const beforeStop = await (await request(`${base}/metrics`, { dispatcher: agent })).body.text();
writeFileSync(join(dir, "metrics-before-stop.txt"), beforeStop);
console.log(
  beforeStop
    .split("\n")
    .filter((line) => /^sluice_http_requests_total.*status="499"/.test(line))
    .join("\n"),
);

// Shutdown under way: a burst's coalesced refusals and slow streams still pending, then SIGTERM.
await rateLimitBurst();
const slow = (): Call => {
  const { cutAfterChunks: _, ...call } = proxied(pick(projects), pick(providers), "cut");
  return { ...call, name: `${call.name} at shutdown` };
};
const last = Array.from({ length: 6 }, () => send(slow()));
await new Promise((resolve) => setTimeout(resolve, 300));
const exited = new Promise<number | null>((resolve) => gateway.once("exit", (code) => resolve(code)));
gateway.kill("SIGTERM");
await Promise.all(last);
const code = await exited;
const final = await usageRows();
const byStatus = await db.query(
  "select status, outcome, count(*)::int as rows, sum(requests)::int as requests from usage_records group by 1, 2 order by 1, 2",
);
console.log(`gateway exited ${code}`);
console.log(
  JSON.stringify(
    { sent, rowsExpected, transportErrors, final, counts: Object.fromEntries([...counts].sort()) },
    null,
    1,
  ),
);
console.table(byStatus.rows);
console.log(`redis after stop: ${JSON.stringify(await redisKeys())}`);
writeFileSync(
  join(dir, "result.json"),
  JSON.stringify(
    {
      sent,
      rowsExpected,
      transportErrors,
      final,
      counts: Object.fromEntries(counts),
      byStatus: byStatus.rows,
    },
    null,
    1,
  ),
);
await db.end();
redis.disconnect();
await agent.close();
await upstream.close();
await apple.close();
process.exit(final.requests === rowsExpected ? 0 : 1);

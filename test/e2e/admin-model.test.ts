import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { clockAwayFromMonthEnd } from "../support/away-from-month-end.js";
import { seededBelow } from "../support/seeded-random.js";
import {
  createPostgresSchema,
  postgresAvailable,
  redisAvailable,
  redisTestSpace,
  redisUrl,
} from "../support/services.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * A model-based test of the admin API against live proxied traffic: a seeded sequence of admin
 * writes (projects created, changed, disabled, deleted and created again under their ids; provider
 * keys added and revoked; test keys rotated and revoked; limits, caps and allow-lists changed)
 * interleaved with proxied calls made with current and stale credentials, each answer compared with
 * what a small model of the documented rules (docs/api.md, docs/auth.md) says it must be. Admin
 * writes take effect at once on the gateway that served them (the cache TTL is set to a minute here,
 * so nothing passes by expiring). The gateway's clock moves ahead by more than a minute now and
 * then, for the test-key rotation's "issued in the minute before" rule. Usage rows are written only
 * when the usage reports are checked (the flush interval is a minute), so the spend cap judges on
 * costs held in memory too. The seed is printed; `SLUICE_MODEL_SEED` (and `SLUICE_MODEL_STEPS`)
 * run another.
 */

type CallKind = "a-chat" | "a-embed" | "b-msg" | "c-gen";
type Provider = "provider-a" | "provider-b" | "provider-c";
const providers: Provider[] = ["provider-a", "provider-b", "provider-c"];
const providerOf: Record<CallKind, Provider> = {
  "a-chat": "provider-a",
  "a-embed": "provider-a",
  "b-msg": "provider-b",
  "c-gen": "provider-c",
};
const modelOf: Record<CallKind, string> = {
  "a-chat": "gpt-4o-mini",
  "a-embed": "text-embedding-3-small",
  "b-msg": "claude-haiku-4-5",
  "c-gen": "gemini-2.5-flash",
};
const kinds: CallKind[] = ["a-chat", "a-embed", "b-msg", "c-gen"];

/** The allow-lists the sequence sets, each with the call kinds it lets through. */
const allowLists: Array<{ rules: Record<string, string[]> | null; allows: CallKind[] }> = [
  { rules: null, allows: kinds },
  { rules: {}, allows: [] },
  {
    rules: {
      "provider-a": ["POST chat/completions"],
      "provider-b": ["POST messages"],
      "provider-c": ["POST models/*:generateContent"],
    },
    allows: ["a-chat", "b-msg", "c-gen"],
  },
  { rules: { "provider-a": ["**"] }, allows: ["a-chat", "a-embed"] },
  { rules: { "provider-a": ["POST embeddings"], "provider-b": ["POST **"] }, allows: ["a-embed", "b-msg"] },
];

interface ModelKey {
  keyId: string;
  provider: Provider;
  partialKey: string;
  revoked: boolean;
  projectId: string;
  incarnation: number;
}

interface ModelTestKey {
  testKeyId: string;
  testKey: string;
  /** The clock epoch (see `advanceClock`) it was issued in. */
  epoch: number;
  /** Issue order, across the run. */
  seq: number;
}

interface ModelProject {
  id: string;
  incarnation: number;
  createdAt: string;
  name: string;
  disabled: boolean;
  testMode: boolean;
  allowList: number;
  perMinute: number | null;
  cap: number | null;
  keys: ModelKey[];
  testKeys: ModelTestKey[];
  spent: number;
  /** The admitted calls of its rate-limit window: at least `admittedLow`, at most `admittedHigh`. */
  admittedLow: number;
  admittedHigh: number;
  usage: {
    requests: number;
    ok: number;
    inputTokens: number;
    outputTokens: number;
    cachedTokens: number;
    reasoningTokens: number;
    costUsd: number;
    /** Refusals that may be coalesced, per coalescing key: past 10 they may not be written yet. */
    coalescable: Map<string, number>;
  };
}

interface Calibration {
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  costUsd: number;
}

// Seed 7 meets a project created again under a deleted one's id, with a cap, whose predecessor's
// costs were not written yet (src/usage/usage-spend-guard.test.ts has it alone).
/** A project as the admin API answers it, in the fields the model reads. */
interface ViewSeen {
  id: string;
  name: string;
  disabled: boolean;
  testMode: boolean;
  rateLimits?: { perMinute: number | null };
  monthlySpendCapUsd: number | null;
  proxyAllowList: unknown;
  createdAt: string;
}

/** A usage report's group, in the fields the model reads. */
interface ReportRow {
  group: string;
  requests: number;
  errors: number;
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  costUsd: number | null;
}

/** An admin answer's body: each route's members, read only where that route answered them. */
interface AdminBody extends ViewSeen {
  project: ViewSeen;
  testKey: string;
  testKeyId: string;
  keyId: string;
  partialKey: string;
  data: Array<ViewSeen & { keyId: string; provider: string; revokedAt: string | null; testKeyId: string }>;
  next?: string;
  rows: ReportRow[];
  error?: { code?: string };
}

const seed = Number(process.env.SLUICE_MODEL_SEED ?? 7);
const steps = Number(process.env.SLUICE_MODEL_STEPS ?? 1000);

const engines = [
  { name: "the embedded defaults (SQLite, no Redis)", available: true, shared: false },
  {
    name: "PostgreSQL and Redis",
    available: postgresAvailable && redisAvailable,
    shared: true,
  },
];

for (const engine of engines) {
  describe.skipIf(!engine.available)(`the admin API against live traffic, on ${engine.name}`, () => {
    let fake: FakeUpstream;
    let sluice: TestGateway;
    let dropSchema: (() => Promise<void>) | undefined;
    const redisSpace = redisTestSpace("admin-model");
    const baseClock = clockAwayFromMonthEnd();
    let clockOffsetMs = 0;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      fake.setUsage({ input: 1000, output: 200, cached: 0, reasoning: 0 });
      const shared = engine.shared
        ? await (async () => {
            const schema = await createPostgresSchema();
            dropSchema = schema.drop;
            return {
              databaseUrl: schema.url,
              redisUrl,
              redisKeyPrefix: `${redisSpace.nextPrefix()}:`,
            };
          })()
        : {};
      sluice = await startTestGateway(
        {
          ...providerBaseUrls(fake),
          ...shared,
          logLevel: "warn",
          projectCacheTtlMs: 60_000,
          usageFlushIntervalMs: 60_000,
          authFailureLimit: 1_000_000,
          rateLimitProjectPerMinute: 1_000_000,
          rateLimitIpPerMinute: 1_000_000,
        },
        { now: () => new Date(baseClock().getTime() + clockOffsetMs) },
      );
    });
    afterAll(async () => {
      await sluice?.close();
      await fake?.close();
      await redisSpace.cleanup();
      await dropSchema?.();
    });

    async function admin(method: string, path: string, body?: unknown) {
      const response = await fetch(`${sluice.url}/admin/v1${path}`, {
        method,
        headers: {
          authorization: `Bearer ${adminToken}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      const text = await response.text();
      return { status: response.status, body: (text === "" ? {} : JSON.parse(text)) as AdminBody };
    }

    /** A proxied call of `kind` to project `projectId` with these credentials. */
    async function call(
      kind: CallKind,
      projectId: string,
      partialKey: string,
      testKey: string,
      method: "bearer" | "header",
    ) {
      const bearer = `${partialKey}.${testKey}`;
      const credentials: Record<string, string> =
        method === "header"
          ? { "x-sluice-test-key": testKey, "x-ai-key": partialKey }
          : kind === "b-msg"
            ? { "x-api-key": bearer }
            : kind === "c-gen"
              ? { "x-goog-api-key": bearer }
              : { authorization: `Bearer ${bearer}` };
      const [path, body] =
        kind === "a-chat"
          ? [`provider-a/${projectId}/chat/completions`, { model: modelOf[kind], messages: [] }]
          : kind === "a-embed"
            ? [`provider-a/${projectId}/embeddings`, { model: modelOf[kind], input: "Hi" }]
            : kind === "b-msg"
              ? [
                  `provider-b/${projectId}/v1/messages`,
                  { model: modelOf[kind], max_tokens: 10, messages: [{ role: "user", content: "Hi" }] },
                ]
              : [
                  `provider-c/${projectId}/v1beta/models/${modelOf[kind]}:generateContent`,
                  { contents: [{ parts: [{ text: "Hi" }] }] },
                ];
      const response = await fetch(`${sluice.url}/v1/${path}`, {
        method: "POST",
        headers: { ...credentials, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      let code: string | undefined;
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
      } catch {
        code = undefined;
      }
      return { status: response.status, code, text };
    }

    /** The tokens and cost of one call of each kind, read from a usage report. */
    async function calibrate(): Promise<Record<CallKind, Calibration>> {
      const created = await admin("POST", "/projects", {
        id: "calibration",
        name: "Calibration",
        provider: "provider-a",
        testMode: true,
      });
      expect(created.status).toBe(201);
      const result = {} as Record<CallKind, Calibration>;
      for (const kind of kinds) {
        const key = await admin("POST", "/projects/calibration/keys", {
          provider: providerOf[kind],
          apiKey: `real-${kind}-key-0123456789`,
        });
        expect(key.status).toBe(201);
        const answer = await call(kind, "calibration", key.body.partialKey, created.body.testKey, "bearer");
        expect(answer.status, answer.text).toBe(200);
        await sluice.gateway.flushUsage();
        const report = await admin("GET", "/projects/calibration/usage?groupBy=model");
        const row = report.body.rows.find((entry) => entry.group === modelOf[kind]);
        if (!row?.costUsd) throw new Error(`the calibration call of ${kind} has no cost in the report`);
        result[kind] = {
          inputTokens: row.inputTokens,
          outputTokens: row.outputTokens,
          cachedTokens: row.cachedTokens,
          reasoningTokens: row.reasoningTokens,
          costUsd: row.costUsd,
        };
      }
      expect((await admin("DELETE", "/projects/calibration")).status).toBe(204);
      return result;
    }

    it(`answers every step as the model says (seed ${seed}, ${steps} steps)`, async () => {
      console.log(`admin model on ${engine.name}: seed ${seed} (SLUICE_MODEL_SEED replays it)`);
      const costs = await calibrate();
      const below = seededBelow(seed);
      const pick = <T>(items: readonly T[]): T => items[below(items.length)] as T;
      const chance = (percent: number) => below(100) < percent;

      const ids = ["m-alpha", "m-beta", "m-gamma", "M-delta", "m_eps", "0zeta", "m-eta"];
      /** Every project ever made, by id: the latest incarnation (alive or not). */
      const projects = new Map<string, ModelProject & { alive: boolean }>();
      const incarnations = new Map<string, number>();
      /** Rate-limit windows are keyed by project id: the admitted calls of each id so far. */
      const admittedById = new Map<string, number>();
      const everyKey: ModelKey[] = [];
      const everyTestKey: Array<ModelTestKey & { projectId: string; incarnation: number }> = [];
      let epoch = 0;
      let epochStartedAt = Date.now();
      let testKeySeq = 0;
      const log: string[] = [];
      const tally = new Map<string, number>();
      const alive = () => [...projects.values()].filter((project) => project.alive);

      function fail(step: number, what: string): never {
        throw new Error(`seed ${seed}, step ${step}: ${what}\nlast steps:\n${log.slice(-12).join("\n")}`);
      }

      function newTestKey(testKeyId: string, testKey: string, project: ModelProject): ModelTestKey {
        const key = { testKeyId, testKey, epoch, seq: testKeySeq++ };
        everyTestKey.push({ ...key, projectId: project.id, incarnation: project.incarnation });
        return key;
      }

      const blankUsage = () => ({
        requests: 0,
        ok: 0,
        inputTokens: 0,
        outputTokens: 0,
        cachedTokens: 0,
        reasoningTokens: 0,
        costUsd: 0,
        coalescable: new Map<string, number>(),
      });

      async function createProject(step: number) {
        const omitId = chance(15);
        const id = omitId ? undefined : pick(ids);
        const fields: Record<string, unknown> = {
          name: `Project ${step}`,
          provider: pick(providers),
          testMode: !chance(10),
        };
        if (chance(15)) fields.disabled = true;
        if (chance(25)) fields.rateLimits = { perMinute: 2 + below(5) };
        // An id used before more often gets a cap: the spend of its predecessor must not count.
        if (chance(id !== undefined && projects.has(id) ? 60 : 25)) fields.monthlySpendCapUsd = capFor();
        const allowList = chance(25) ? below(allowLists.length) : 0;
        if (allowList !== 0) fields.proxyAllowList = allowLists[allowList]?.rules;
        const answer = await admin("POST", "/projects", { ...(id ? { id } : {}), ...fields });
        const existing = id ? projects.get(id) : undefined;
        if (existing?.alive) {
          expectError(step, answer, 409, "CONFLICT");
          return;
        }
        if (answer.status !== 201)
          fail(step, `create answered ${answer.status} ${JSON.stringify(answer.body)}`);
        const projectId = answer.body.project.id as string;
        const incarnation = (incarnations.get(projectId) ?? 0) + 1;
        incarnations.set(projectId, incarnation);
        const inherited = admittedById.get(projectId) ?? 0;
        const project: ModelProject & { alive: boolean } = {
          id: projectId,
          incarnation,
          createdAt: answer.body.project.createdAt,
          name: fields.name as string,
          alive: true,
          disabled: fields.disabled === true,
          testMode: fields.testMode as boolean,
          allowList,
          perMinute: (fields.rateLimits as { perMinute: number } | undefined)?.perMinute ?? null,
          cap: (fields.monthlySpendCapUsd as number | undefined) ?? null,
          keys: [],
          testKeys: [],
          spent: 0,
          // A project created again under an id may find the window its predecessor opened.
          admittedLow: 0,
          admittedHigh: inherited,
          usage: blankUsage(),
        };
        project.testKeys.push(newTestKey(answer.body.testKeyId, answer.body.testKey, project));
        projects.set(projectId, project);
        log.push(`${step}: create ${projectId} #${incarnation} ${JSON.stringify(fields)}`);
        for (const provider of providers) if (chance(60)) await addKey(step, projectId, provider);
      }

      function capFor(): number {
        // A few calls' worth, halfway between two sums of the chat call's cost.
        const unit = costs["a-chat"].costUsd;
        return Number(((1 + below(4)) * unit + unit / 2).toFixed(9));
      }

      function expectError(
        step: number,
        answer: { status: number; body: AdminBody },
        status: number,
        code: string,
      ): void {
        if (answer.status !== status || answer.body.error?.code !== code)
          fail(step, `expected ${status} ${code}, got ${answer.status} ${JSON.stringify(answer.body)}`);
      }

      /** An id to send: mostly a live project's, else a deleted one's or one never made. */
      function targetId(): string {
        const live = alive();
        if (live.length > 0 && chance(85)) return pick(live).id;
        const gone = [...projects.values()].filter((project) => !project.alive);
        if (gone.length > 0 && chance(60)) return pick(gone).id;
        return pick([...ids, "never-made"]);
      }

      async function updateProject(step: number) {
        const id = targetId();
        const project = projects.get(id);
        const changes: Record<string, unknown> = {};
        const which = below(7);
        if (which === 0 || chance(20)) changes.disabled = chance(35);
        if (which === 1 || chance(15)) changes.testMode = !chance(25);
        if (which === 2 || chance(15)) changes.rateLimits = { perMinute: chance(30) ? null : 1 + below(6) };
        if (which === 3 || chance(15)) changes.monthlySpendCapUsd = chance(30) ? null : capFor();
        let allowList: number | undefined;
        if (which === 4 || chance(15)) {
          allowList = below(allowLists.length);
          changes.proxyAllowList = allowLists[allowList]?.rules;
        }
        if (which === 5) changes.name = `Renamed ${step}`;
        const answer = await admin("PATCH", `/projects/${id}`, changes);
        log.push(`${step}: update ${id} ${JSON.stringify(changes)}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        if (answer.status !== 200)
          fail(step, `update answered ${answer.status} ${JSON.stringify(answer.body)}`);
        if ("disabled" in changes) project.disabled = changes.disabled as boolean;
        if ("testMode" in changes) project.testMode = changes.testMode as boolean;
        if ("rateLimits" in changes)
          project.perMinute = (changes.rateLimits as { perMinute: number | null }).perMinute;
        if ("monthlySpendCapUsd" in changes) project.cap = changes.monthlySpendCapUsd as number | null;
        if (allowList !== undefined) project.allowList = allowList;
        if ("name" in changes) project.name = changes.name as string;
        checkView(step, project, answer.body);
      }

      function checkView(step: number, project: ModelProject, view: ViewSeen) {
        const expected = {
          id: project.id,
          name: project.name,
          disabled: project.disabled,
          testMode: project.testMode,
          perMinute: project.perMinute,
          cap: project.cap,
          proxyAllowList: allowLists[project.allowList]?.rules,
          createdAt: project.createdAt,
        };
        const seen = {
          id: view.id,
          name: view.name,
          disabled: view.disabled,
          testMode: view.testMode,
          perMinute: view.rateLimits?.perMinute,
          cap: view.monthlySpendCapUsd,
          proxyAllowList: view.proxyAllowList,
          createdAt: view.createdAt,
        };
        if (JSON.stringify(seen) !== JSON.stringify(expected))
          fail(step, `project view ${JSON.stringify(seen)}, model ${JSON.stringify(expected)}`);
      }

      async function deleteProject(step: number) {
        const id = targetId();
        const project = projects.get(id);
        const answer = await admin("DELETE", `/projects/${id}`);
        log.push(`${step}: delete ${id}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        if (answer.status !== 204)
          fail(step, `delete answered ${answer.status} ${JSON.stringify(answer.body)}`);
        project.alive = false;
        admittedById.set(id, project.admittedHigh);
      }

      async function addKey(step: number, id = targetId(), provider = pick(providers)) {
        const project = projects.get(id);
        const answer = await admin("POST", `/projects/${id}/keys`, {
          provider,
          apiKey: `real-${provider}-key-${step}-abcdef`,
        });
        log.push(`${step}: add ${provider} key to ${id}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        if (answer.status !== 201)
          fail(step, `key add answered ${answer.status} ${JSON.stringify(answer.body)}`);
        const key: ModelKey = {
          keyId: answer.body.keyId,
          provider,
          partialKey: answer.body.partialKey,
          revoked: false,
          projectId: id,
          incarnation: project.incarnation,
        };
        project.keys.push(key);
        everyKey.push(key);
      }

      async function revokeKey(step: number) {
        const id = targetId();
        const project = projects.get(id);
        const own = project?.alive ? project.keys : [];
        const key =
          own.length > 0 && chance(85) ? pick(own) : everyKey.length > 0 ? pick(everyKey) : undefined;
        const keyId = key?.keyId ?? "k_unknown";
        const answer = await admin("DELETE", `/projects/${id}/keys/${keyId}`);
        log.push(`${step}: revoke key ${keyId} of ${id}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        const mine = project.keys.find((candidate) => candidate.keyId === keyId);
        if (!mine || mine.revoked) return expectError(step, answer, 404, "NOT_FOUND");
        if (answer.status !== 204)
          fail(step, `key revoke answered ${answer.status} ${JSON.stringify(answer.body)}`);
        mine.revoked = true;
      }

      async function rotateTestKey(step: number) {
        const id = targetId();
        const project = projects.get(id);
        const answer = await admin("POST", `/projects/${id}/test-keys`);
        log.push(`${step}: rotate test keys of ${id}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        if (answer.status !== 201)
          fail(step, `rotation answered ${answer.status} ${JSON.stringify(answer.body)}`);
        // Kept: the new key, the one before it, and any issued in the minute before (this epoch's).
        const newestFirst = [...project.testKeys].sort((left, right) => right.seq - left.seq);
        project.testKeys = newestFirst.filter((key, index) => index === 0 || key.epoch === epoch);
        project.testKeys.push(newTestKey(answer.body.testKeyId, answer.body.testKey, project));
      }

      async function revokeTestKey(step: number) {
        const id = targetId();
        const project = projects.get(id);
        const own = project?.alive ? project.testKeys : [];
        const key =
          own.length > 0 && chance(80) ? pick(own) : everyTestKey.length > 0 ? pick(everyTestKey) : undefined;
        const testKeyId = key?.testKeyId ?? "tk_unknown";
        const answer = await admin("DELETE", `/projects/${id}/test-keys/${testKeyId}`);
        log.push(`${step}: revoke test key ${testKeyId} of ${id}`);
        if (!project?.alive) return expectError(step, answer, 404, "PROJECT_NOT_FOUND");
        const mine = project.testKeys.find((candidate) => candidate.testKeyId === testKeyId);
        if (!mine) return expectError(step, answer, 404, "NOT_FOUND");
        if (answer.status !== 204)
          fail(step, `test key revoke answered ${answer.status} ${JSON.stringify(answer.body)}`);
        project.testKeys = project.testKeys.filter((candidate) => candidate !== mine);
      }

      function advanceClock(step: number) {
        const realElapsed = Date.now() - epochStartedAt;
        // The model takes every key of an epoch as issued within the minute before a rotation in it.
        if (realElapsed > 50_000) fail(step, `an epoch lasted ${realElapsed} ms: too slow for the model`);
        clockOffsetMs += 61_000 + below(5000);
        epoch++;
        epochStartedAt = Date.now();
        log.push(`${step}: the clock moves ahead (offset ${clockOffsetMs} ms)`);
      }

      async function proxiedCall(step: number) {
        const projectId = targetId();
        const project = projects.get(projectId);
        const kind = pick(kinds);
        const method = kind.startsWith("a-") && chance(25) ? "header" : "bearer";
        // A partial key: mostly one of the project's (of the call's provider when there is one), else any.
        const own = project?.alive ? project.keys : [];
        const ownOfProvider = own.filter((key) => key.provider === providerOf[kind] && !key.revoked);
        let partial: ModelKey | undefined;
        let forged = false;
        const roll = below(100);
        if (ownOfProvider.length > 0 && roll < 75) partial = pick(ownOfProvider);
        else if (own.length > 0 && roll < 80) partial = pick(own);
        else if (everyKey.length > 0) partial = pick(everyKey);
        let partialKey = partial?.partialKey ?? "sk_sluice_nokey_AAAAAAAAAAAA";
        if (partial && chance(5)) {
          // The right key id with another client share.
          forged = true;
          // The share's first character (the last may carry only padding bits).
          const at = `sk_sluice_${partial.keyId}_`.length;
          const swapped = partialKey[at] === "A" ? "B" : "A";
          partialKey = `${partialKey.slice(0, at)}${swapped}${partialKey.slice(at + 1)}`;
        }
        const ownTestKeys = project?.alive ? project.testKeys : [];
        const token =
          ownTestKeys.length > 0 && chance(85)
            ? pick(ownTestKeys).testKey
            : everyTestKey.length > 0
              ? pick(everyTestKey).testKey
              : "tk_none";
        const answer = await call(kind, projectId, partialKey, token, method);
        const described = `${step}: ${kind} ${method} call to ${projectId} with key ${partial?.keyId ?? "none"}${
          forged ? " (forged)" : ""
        } of ${partial?.projectId ?? "-"}#${partial?.incarnation ?? "-"}${partial?.revoked ? " (revoked)" : ""}, token ${
          everyTestKey.find((key) => key.testKey === token)?.testKeyId ?? token
        }`;
        log.push(`${described} -> ${answer.status} ${answer.code ?? ""}`);
        const branch = (name: string) => tally.set(name, (tally.get(name) ?? 0) + 1);

        const expectAnswer = (status: number, code: string | undefined, uncertain429 = false) => {
          const ok = answer.status === status && (code === undefined || answer.code === code);
          if (!ok && !(uncertain429 && answer.status === 429 && answer.code === "TOO_MANY_REQUESTS"))
            fail(
              step,
              `${described}: expected ${status} ${code ?? ""}, got ${answer.status} ${answer.text.slice(0, 300)}`,
            );
        };
        if (!project?.alive) {
          branch("404");
          return expectAnswer(404, "PROJECT_NOT_FOUND");
        }
        const usage = project.usage;
        usage.requests++;
        const coalesce = (status: number, code: string) => {
          const key = `${partial?.keyId}|${providerOf[kind]}|${status}|${code}|${method}`;
          usage.coalescable.set(key, (usage.coalescable.get(key) ?? 0) + 1);
        };
        const tokenPasses = project.testMode && ownTestKeys.some((key) => key.testKey === token);
        const keyIsProjects =
          !forged &&
          partial !== undefined &&
          partial.projectId === projectId &&
          partial.incarnation === project.incarnation;
        if (!tokenPasses || !keyIsProjects) {
          branch("401");
          return expectAnswer(401, "UNAUTHORIZED");
        }
        if (partial?.revoked || partial?.provider !== providerOf[kind] || project.disabled) {
          branch(partial?.revoked ? "403 revoked" : project.disabled ? "403 disabled" : "403 provider");
          coalesce(403, "FORBIDDEN");
          return expectAnswer(403, "FORBIDDEN");
        }
        if (!allowLists[project.allowList]?.allows.includes(kind)) {
          branch("403 allow-list");
          coalesce(403, "FORBIDDEN");
          return expectAnswer(403, "FORBIDDEN");
        }
        if (project.cap !== null && project.spent >= project.cap) {
          branch("403 cap");
          coalesce(403, "FORBIDDEN");
          return expectAnswer(403, "FORBIDDEN");
        }
        const limit = project.perMinute ?? 1_000_000;
        if (project.admittedLow >= limit) {
          branch("429");
          coalesce(429, "TOO_MANY_REQUESTS");
          return expectAnswer(429, "TOO_MANY_REQUESTS");
        }
        const mayBeLimited = project.admittedHigh >= limit;
        expectAnswer(200, undefined, mayBeLimited);
        branch(answer.status === 429 ? "429 inherited window" : "200");
        if (answer.status === 429) {
          // The window its predecessor under the id opened: it is the one counted.
          project.admittedLow = project.admittedHigh;
          coalesce(429, "TOO_MANY_REQUESTS");
          return;
        }
        project.admittedLow++;
        project.admittedHigh++;
        project.spent += costs[kind].costUsd;
        usage.ok++;
        usage.inputTokens += costs[kind].inputTokens;
        usage.outputTokens += costs[kind].outputTokens;
        usage.cachedTokens += costs[kind].cachedTokens;
        usage.reasoningTokens += costs[kind].reasoningTokens;
        usage.costUsd += costs[kind].costUsd;
      }

      async function listProjects(step: number) {
        const limit = 1 + below(4);
        const seen: string[] = [];
        let cursor: string | undefined;
        // Maybe a write between the first page and the rest: a project created meanwhile is on the
        // last page, one deleted meanwhile shifts no other.
        const meddle = chance(40);
        const before = new Set(alive().map((project) => project.id));
        let pages = 0;
        do {
          const answer = await admin(
            "GET",
            `/projects?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
          );
          if (answer.status !== 200)
            fail(step, `list answered ${answer.status} ${JSON.stringify(answer.body)}`);
          if (answer.body.data.length > limit)
            fail(step, `a page of ${answer.body.data.length} for limit ${limit}`);
          for (const view of answer.body.data) {
            seen.push(view.id);
            if (!meddle) {
              const project = projects.get(view.id);
              if (!project?.alive) fail(step, `the list holds ${view.id}, which the model has not`);
              checkView(step, project, view);
            }
          }
          cursor = answer.body.next;
          if (meddle && pages === 0) {
            if (chance(50)) await createProject(step);
            else await deleteProject(step);
          }
          pages++;
        } while (cursor !== undefined);
        const after = new Set(alive().map((project) => project.id));
        if (new Set(seen).size !== seen.length) fail(step, `the list answered a project twice: ${seen}`);
        const order = (id: string) => projects.get(id)?.createdAt ?? "";
        const sorted = [...seen].sort((left, right) =>
          order(left) === order(right)
            ? Buffer.compare(Buffer.from(left), Buffer.from(right))
            : order(left) < order(right)
              ? -1
              : 1,
        );
        if (JSON.stringify(sorted) !== JSON.stringify(seen)) fail(step, `list out of order: ${seen}`);
        const throughout = [...before].filter((id) => after.has(id));
        for (const id of throughout)
          if (!seen.includes(id)) fail(step, `the list left out ${id} (pages of ${limit})`);
        for (const id of seen)
          if (!before.has(id) && !after.has(id)) fail(step, `the list holds ${id}, never alive meanwhile`);
        log.push(`${step}: list of ${seen.length} in pages of ${limit}${meddle ? " (a write between)" : ""}`);
      }

      async function readProject(step: number) {
        const id = targetId();
        const project = projects.get(id);
        log.push(`${step}: read ${id}, its keys and test keys`);
        const [view, keys, testKeys] = await Promise.all([
          admin("GET", `/projects/${id}`),
          admin("GET", `/projects/${id}/keys`),
          admin("GET", `/projects/${id}/test-keys`),
        ]);
        if (!project?.alive) {
          for (const answer of [view, keys, testKeys]) expectError(step, answer, 404, "PROJECT_NOT_FOUND");
          return;
        }
        checkView(step, project, view.body);
        const keysSeen = (
          keys.body.data as Array<{ keyId: string; provider: string; revokedAt: string | null }>
        )
          .map((key) => `${key.keyId}:${key.provider}:${key.revokedAt === null ? "live" : "revoked"}`)
          .sort();
        const keysModel = project.keys
          .map((key) => `${key.keyId}:${key.provider}:${key.revoked ? "revoked" : "live"}`)
          .sort();
        if (JSON.stringify(keysSeen) !== JSON.stringify(keysModel))
          fail(step, `keys ${keysSeen}, model ${keysModel}`);
        const testSeen = (testKeys.body.data as Array<{ testKeyId: string }>)
          .map((key) => key.testKeyId)
          .sort();
        const testModel = project.testKeys.map((key) => key.testKeyId).sort();
        if (JSON.stringify(testSeen) !== JSON.stringify(testModel))
          fail(step, `test keys ${testSeen}, model ${testModel}`);
      }

      async function checkUsage(step: number) {
        await sluice.gateway.flushUsage();
        for (const project of alive()) {
          const answer = await admin("GET", `/projects/${project.id}/usage?groupBy=endpoint`);
          if (answer.status !== 200) fail(step, `usage answered ${answer.status}`);
          const sum = (field: Exclude<keyof ReportRow, "group">) =>
            answer.body.rows.reduce((total, row) => total + (row[field] ?? 0), 0);
          const usage = project.usage;
          const pendingAtMost = [...usage.coalescable.values()].reduce(
            (total, count) => total + Math.max(0, count - 10),
            0,
          );
          const seen = {
            ok: sum("requests") - sum("errors"),
            inputTokens: sum("inputTokens"),
            outputTokens: sum("outputTokens"),
            cachedTokens: sum("cachedTokens"),
            reasoningTokens: sum("reasoningTokens"),
            costMicro: Math.round(sum("costUsd") * 1e6),
          };
          const expected = {
            ok: usage.ok,
            inputTokens: usage.inputTokens,
            outputTokens: usage.outputTokens,
            cachedTokens: usage.cachedTokens,
            reasoningTokens: usage.reasoningTokens,
            costMicro: Math.round(usage.costUsd * 1e6),
          };
          if (JSON.stringify(seen) !== JSON.stringify(expected))
            fail(step, `usage of ${project.id}: ${JSON.stringify(seen)}, model ${JSON.stringify(expected)}`);
          const requests = sum("requests");
          if (requests > usage.requests || requests < usage.requests - pendingAtMost)
            fail(
              step,
              `usage of ${project.id}: ${requests} requests, model ${usage.requests} (up to ${pendingAtMost} coalesced not written yet)`,
            );
        }
        log.push(`${step}: usage reports checked`);
      }

      const actions: Array<[number, (step: number) => Promise<void> | void]> = [
        [8, createProject],
        [10, updateProject],
        [3, deleteProject],
        [7, addKey],
        [4, revokeKey],
        [5, rotateTestKey],
        [3, revokeTestKey],
        [1, advanceClock],
        [50, proxiedCall],
        [3, listProjects],
        [4, readProject],
        [2, checkUsage],
      ];
      const totalWeight = actions.reduce((total, [weight]) => total + weight, 0);
      for (let step = 0; step < steps; step++) {
        let roll = below(totalWeight);
        for (const [weight, action] of actions) {
          if (roll < weight) {
            // The first steps build some projects to work on.
            await (step < 6 ? createProject(step) : action(step));
            break;
          }
          roll -= weight;
        }
      }
      await checkUsage(steps);
      await listProjects(steps + 1);
      console.log(
        `calls answered: ${JSON.stringify(Object.fromEntries(tally))}; epochs ${epoch}; projects ${incarnations.size}`,
      );
    }, 60_000);
  });
}

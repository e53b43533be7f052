import type { IncomingMessage } from "node:http";
import { describe, expect, it, vi } from "vitest";
import { admissionRequestContext } from "../../test/support/admission-request-context.js";
import { fakeUsageRepository, spendOf } from "../../test/support/fake-usage-repository.js";
import type { AuthResult } from "../auth/authenticate.js";
import { refusalOf, refuseAtDeadline } from "../deadline-refusal.js";
import { GatewayError } from "../errors.js";
import { createMetrics } from "../observability/metrics.js";
import type { LimitRequest, RateLimitDecision, RateLimiter } from "../rate-limit/rate-limiter.js";
import type { Project } from "../storage/project-repository.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import { createSpendGuard, type SpendGuard } from "../usage/spend-guard.js";
import type { UsageRecorder } from "../usage/usage-recorder.js";
import { type AdmittedCall, type CallReport, createAdmission } from "./admission.js";

/**
 * An authentication that admits the caller as `project`'s provider A key `key_1` (with a test key,
 * or with a DeviceCheck token whose use `refundDeviceToken` gives back).
 */
function authenticatedAs(project: object, refundDeviceToken?: () => Promise<void>): () => AuthResult {
  return () => ({
    ok: true,
    method: refundDeviceToken ? "bearer-device-check" : "bearer-test-key",
    project: project as unknown as Project,
    keyId: "key_1",
    provider: "provider-a",
    providerKey: "sk-real",
    deviceDigest: refundDeviceToken ? "digest" : null,
    ...(refundDeviceToken ? { refundDeviceToken } : {}),
    generation: 0,
    readAt: 0,
  });
}

/** The project limit's decision, allowed or not. */
const decision = (allowed: boolean): RateLimitDecision => ({
  allowed,
  limit: 1,
  remaining: 0,
  resetSeconds: 60,
  name: "project",
  windowSeconds: 60,
});

describe("admission", () => {
  it("writes the usage row of a request whose authentication could not be decided (database down: 503)", async () => {
    const rows: UsageRecord[] = [];
    const recorder = { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder;
    const unavailable = new GatewayError("SERVICE_UNAVAILABLE", "The database is unavailable", {
      details: { retryable: true },
    });
    const admit = createAdmission({
      authenticate: () => Promise.reject(unavailable),
      limiter: {} as RateLimiter,
      spend: {} as SpendGuard,
      recorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const context = admissionRequestContext({ writesOwnHeaders: false });

    await expect(
      admit(context, { endpoint: "text", projectId: "prj_1", provider: "provider-a" }),
    ).rejects.toBe(unavailable);
    expect(rows).toMatchObject([
      {
        request_id: "req_1",
        project_id: "prj_1",
        key_id: null,
        status: 503,
        error_code: "SERVICE_UNAVAILABLE",
        outcome: "error",
        auth_method: null,
        client_ip: "192.0.2.1",
      },
    ]);
  });

  it("gives authentication and the spend check one wait for stale reads, so a request waits reloadWaitMs in all", async () => {
    const waits: unknown[] = [];
    const project = {
      id: "prj_1",
      createdAt: "2026-11-01T00:00:00.000Z",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: 10,
    };
    const admit = createAdmission({
      authenticate: async (request): Promise<AuthResult> => {
        waits.push(request);
        return {
          ok: true,
          method: "bearer-test-key",
          project: project as unknown as Project,
          keyId: "key_1",
          provider: "provider-a",
          providerKey: "sk-real",
          deviceDigest: null,
          generation: 0,
          readAt: 0,
        };
      },
      limiter: { consumeAll: () => [] } as unknown as RateLimiter,
      spend: {
        monthToDate: async (_projectId: string, _createdAt?: string, wait?: unknown) => {
          waits.push(wait);
          return 0;
        },
        holdWithLimits: () => ({ release: () => {} }),
      } as unknown as SpendGuard,
      recorder: { record: () => {} } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const context = admissionRequestContext({ writesOwnHeaders: true });
    await admit(context, { endpoint: "text", projectId: "prj_1", provider: "provider-a" });
    await admit(
      { ...context, requestId: "req_2" },
      { endpoint: "text", projectId: "prj_1", provider: "provider-a" },
    );
    expect(waits).toHaveLength(4);
    expect(waits[0]).toBeTypeOf("object");
    expect(waits[1]).toBe(waits[0]);
    // Each request its own: another request's wait, begun or spent, is not this one's.
    expect(waits[3]).toBe(waits[2]);
    expect(waits[2]).not.toBe(waits[0]);
  });

  // The row's time and the guard's month were read from the clock apart: a call that finished at
  // November's last millisecond, its row November's, counted in December's figure instead, and as
  // its row never comes back in a December read, the project was refused all December for it.
  it("counts a call's cost in its row's month, though the month turns while its row is recorded", async () => {
    const project = {
      id: "prj_1",
      createdAt: "2026-11-01T00:00:00.000Z",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: 1,
    };
    let clock = new Date("2026-11-30T23:59:59.999Z");
    const stored: UsageRecord[] = [];
    const spend = createSpendGuard({
      usage: fakeUsageRepository({
        spendSince: async (projectId, from) =>
          spendOf(stored.filter((row) => row.project_id === projectId && row.created_at >= from)),
      }),
      now: () => clock,
    });
    const admit = createAdmission({
      authenticate: authenticatedAs(project),
      limiter: { consumeAll: () => [] } as unknown as RateLimiter,
      spend,
      recorder: {
        record: (row: UsageRecord) => {
          stored.push(row);
          // Midnight passes between the row's timestamp and what follows it.
          clock = new Date("2026-12-01T00:00:00.000Z");
        },
      } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => clock,
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const options = { endpoint: "text", projectId: "prj_1", provider: "provider-a" } as const;
    const call = (await admit(admissionRequestContext(), options)) as AdmittedCall;
    call.finish({
      status: 200,
      outcome: "ok",
      provider: "provider-a",
      model: "gpt-4o",
      usage: { inputTokens: 1_000_000, outputTokens: 1_000_000, cachedInputTokens: 0, reasoningTokens: 0 },
      costUsd: 12.5,
      streamed: false,
      timeToFirstByteMs: 1,
      errorCode: null,
    });
    expect(stored.map((row) => row.created_at)).toEqual(["2026-11-30T23:59:59.999Z"]);
    spend.written(stored);
    // December's first request: nothing spent this month.
    await expect(admit(admissionRequestContext({ requestId: "req_2" }), options)).resolves.toBeDefined();
  });

  it("writes no usage row for a request the failed-authentication throttle refused (429)", async () => {
    const rows: UsageRecord[] = [];
    const throttled = new GatewayError("TOO_MANY_REQUESTS", "Too many failed authentication attempts");
    const admit = createAdmission({
      authenticate: () => ({ ok: false, error: throttled, project: null, method: null }),
      limiter: {} as RateLimiter,
      spend: {} as SpendGuard,
      recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    expect(() =>
      admit(admissionRequestContext(), { endpoint: "text", projectId: "prj_1", provider: "provider-a" }),
    ).toThrow(throttled);
    expect(rows).toEqual([]);
  });

  it("holds a request to the project's own per-minute and per-device limits, and the address block's", async () => {
    const project = {
      id: "prj_1",
      rateLimits: { perMinute: 5, devicePerMinute: 2 },
      monthlySpendCapUsd: null,
      proxyAllowList: null,
    };
    const asked: unknown[] = [];
    const admit = createAdmission({
      authenticate: authenticatedAs(project, async () => {}),
      limiter: {
        consumeAll: (requests: unknown[]) => {
          asked.push(...requests);
          return [];
        },
      } as unknown as RateLimiter,
      spend: {} as SpendGuard,
      recorder: { record: () => {} } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 30, ipPerMinute: 90 },
    });
    await admit(admissionRequestContext({ clientIp: "2001:db8:1:2:3:4:5:6" }), {
      endpoint: "text",
      projectId: "prj_1",
      provider: "provider-a",
    });
    expect(asked).toEqual([
      { name: "project", key: "prj_1", limit: 5 },
      { name: "ip", key: "prj_1:2001:db8:1:2::/64", limit: 90 },
      { name: "device", key: "prj_1:digest", limit: 2 },
    ]);
  });

  describe("a device token's use", () => {
    const project = {
      id: "prj_1",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: null,
    };
    const context = () => admissionRequestContext();
    function admission(allowed: boolean, refundDeviceToken?: () => Promise<void>) {
      return createAdmission({
        authenticate: authenticatedAs(project, refundDeviceToken),
        limiter: { consumeAll: () => [decision(allowed)] } as unknown as RateLimiter,
        spend: { add: vi.fn() } as unknown as SpendGuard,
        recorder: { record: () => {} } as unknown as UsageRecorder,
        metrics: createMetrics({ collectDefaults: false }),
        now: () => new Date("2026-11-23T12:00:00Z"),
        defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
      });
    }
    const options = { endpoint: "text", projectId: "prj_1", provider: "provider-a" } as const;

    it("is given back, once and before the refusal is answered, when the limits refuse the request", async () => {
      let refunded = 0;
      const refund = vi.fn(async () => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        refunded++;
      });
      const refusal = admission(false, refund)(context(), options);
      await expect(refusal).rejects.toMatchObject({ status: 429 });
      expect(refund).toHaveBeenCalledTimes(1);
      expect(refunded).toBe(1);
    });

    it("is kept by an admitted request, which is answered without a promise", () => {
      const refund = vi.fn(async () => {});
      const call = admission(true, refund)(context(), options);
      expect(call).not.toBeInstanceOf(Promise);
      expect(refund).not.toHaveBeenCalled();
    });

    it("leaves a test key's refusal synchronous: nothing to give back", () => {
      expect(() => admission(false)(context(), options)).toThrow(GatewayError);
    });
  });

  describe("a proxy allow-list", () => {
    const listed = {
      id: "prj_1",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: null,
      proxyAllowList: { "provider-a": ["POST chat/completions"] },
    };
    function admission(
      project: object,
      refundDeviceToken?: () => Promise<void>,
      decide: (requests: readonly LimitRequest[]) => RateLimitDecision[] = () => [],
    ) {
      const rows: UsageRecord[] = [];
      const consumeAll = vi.fn(decide);
      const admit = createAdmission({
        authenticate: authenticatedAs(project, refundDeviceToken),
        limiter: { consumeAll } as unknown as RateLimiter,
        spend: {} as SpendGuard,
        recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
        metrics: createMetrics({ collectDefaults: false }),
        now: () => new Date("2026-11-23T12:00:00Z"),
        defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
      });
      return { admit, rows, consumeAll };
    }
    const call = (method: string, proxyPath?: string) =>
      [
        admissionRequestContext({
          request: {
            method,
            headers: {},
            rawHeaders: [],
            socket: { destroyed: false },
          } as unknown as IncomingMessage,
        }),
        {
          endpoint: proxyPath === undefined ? "text" : "proxy",
          projectId: "prj_1",
          provider: "provider-a",
          ...(proxyPath === undefined ? {} : { proxyPath }),
        },
      ] as const;

    it("refuses a call it leaves out with 403 and its row, counted by the client's own limits only", () => {
      const { admit, rows, consumeAll } = admission(listed);
      expect(() => admit(...call("GET", "files"))).toThrow(
        expect.objectContaining({
          code: "FORBIDDEN",
          message: "This project's proxy allow-list does not include GET files on provider-a",
        }),
      );
      // The client IP's limit (and a device's), never the project's.
      expect(consumeAll).toHaveBeenCalledTimes(1);
      expect(consumeAll.mock.calls[0]?.[0].map((request) => request.name)).toEqual(["ip"]);
      expect(rows).toMatchObject([
        { status: 403, error_code: "FORBIDDEN", outcome: "error", provider: "provider-a", key_id: "key_1" },
      ]);
    });

    it("answers 429 with its row once the client's own limit refuses, and gives a device token's use back", async () => {
      const refund = vi.fn(async () => {});
      const over = (requests: readonly LimitRequest[]): RateLimitDecision[] =>
        requests.map((request) => ({
          name: request.name,
          allowed: request.name !== "ip",
          limit: request.limit,
          remaining: 0,
          resetSeconds: 30,
          windowSeconds: 60,
        }));
      const { admit, rows, consumeAll } = admission(listed, refund, over);
      await expect(admit(...call("GET", "files"))).rejects.toMatchObject({
        code: "TOO_MANY_REQUESTS",
        message: "Rate limit exceeded (ip: 60 per 60s)",
      });
      expect(consumeAll.mock.calls[0]?.[0].map((request) => request.name)).toEqual(["ip", "device"]);
      expect(rows).toMatchObject([{ status: 429, error_code: "TOO_MANY_REQUESTS" }]);
      expect(refund).toHaveBeenCalledTimes(1);
    });

    it("admits a call it lists, and leaves the other endpoints and unlisted projects alone", () => {
      const { admit, consumeAll } = admission(listed);
      expect(admit(...call("POST", "chat/completions"))).toMatchObject({ providerKey: "sk-real" });
      expect(admit(...call("POST"))).toMatchObject({ providerKey: "sk-real" });
      expect(consumeAll).toHaveBeenCalledTimes(2);
      const open = admission({ ...listed, proxyAllowList: null });
      expect(open.admit(...call("GET", "files"))).toMatchObject({ providerKey: "sk-real" });
    });

    it("gives a device token's use back when it refuses the call", async () => {
      const refund = vi.fn(async () => {});
      const { admit } = admission(listed, refund);
      await expect(admit(...call("DELETE", "files/file_1"))).rejects.toMatchObject({ status: 403 });
      expect(refund).toHaveBeenCalledTimes(1);
    });
  });

  describe("a background run's row", () => {
    const project = {
      id: "prj_1",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: null,
    };
    const tokens = { inputTokens: 11, outputTokens: 7, cachedInputTokens: 3, reasoningTokens: 2 };
    const none = { inputTokens: null, outputTokens: null, cachedInputTokens: null, reasoningTokens: null };

    function gateway(remembered?: number) {
      const rows: UsageRecord[] = [];
      const spend = { add: vi.fn(), addUnpriced: vi.fn() };
      const metrics = createMetrics({ collectDefaults: false });
      const countTokens = vi.spyOn(metrics, "countTokens");
      const decision: RateLimitDecision = {
        allowed: true,
        limit: 100,
        remaining: 99,
        resetSeconds: 60,
        name: "project",
        windowSeconds: 60,
      };
      const admit = createAdmission({
        authenticate: authenticatedAs(project),
        limiter: { consumeAll: () => [decision] } as unknown as RateLimiter,
        spend: spend as unknown as SpendGuard,
        recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
        metrics,
        now: () => new Date("2026-11-23T12:00:00Z"),
        defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
        ...(remembered === undefined ? {} : { backgroundRunsRemembered: remembered }),
      });
      let calls = 0;
      /** One GET poll through admission that saw the run `rowId` finished. */
      const poll = (rowId: string) => {
        const context = admissionRequestContext({
          requestId: `req_${++calls}`,
          path: "/v1/provider-a/prj_1/responses/resp_1",
        });
        const call = admit(context, { endpoint: "proxy", projectId: "prj_1", provider: "provider-a" });
        const report: CallReport = {
          status: 200,
          outcome: "ok",
          provider: "provider-a",
          model: null,
          usage: none,
          costUsd: null,
          streamed: false,
          timeToFirstByteMs: 12,
          errorCode: null,
          backgroundRun: { rowId, model: "gpt-4o-mini", usage: tokens, costUsd: 0.25, streamed: false },
        };
        (call as AdmittedCall).finish(report);
      };
      const inputTokensCounted = () =>
        countTokens.mock.calls.filter(([, kind, count]) => kind === "input" && count !== null);
      return { rows, spend, poll, inputTokensCounted };
    }

    it("is written beside the call's own, once however often the run is reported, and counted once", () => {
      const { rows, spend, poll, inputTokensCounted } = gateway();
      for (let index = 0; index < 3; index++) poll("bg_0000000000001aaaaaaaaaaaaaaaaaaaa");
      expect(rows.map((row) => row.request_id)).toEqual([
        "req_1",
        "bg_0000000000001aaaaaaaaaaaaaaaaaaaa",
        "req_2",
        "req_3",
      ]);
      expect(rows[0]).toMatchObject({ input_tokens: null, cost_usd: null, latency_ms: expect.any(Number) });
      expect(rows[1]).toEqual({
        request_id: "bg_0000000000001aaaaaaaaaaaaaaaaaaaa",
        project_id: "prj_1",
        key_id: "key_1",
        endpoint: "proxy",
        provider: "provider-a",
        model: "gpt-4o-mini",
        status: 200,
        error_code: null,
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
        cost_usd: 0.25,
        latency_ms: 0,
        ttfb_ms: null,
        streamed: 0,
        outcome: "ok",
        auth_method: "bearer-test-key",
        client_ip: "192.0.2.1",
        created_at: "2026-11-23T12:00:00.000Z",
        requests: 1,
      });
      // With its row's length (none: the calls that reported it have their own).
      expect(spend.add.mock.calls).toEqual([
        ["prj_1", 0.25, new Date("2026-11-23T12:00:00.000Z"), 0, "bg_0000000000001aaaaaaaaaaaaaaaaaaaa"],
      ]);
      // The polls' own rows: calls of unknown cost here (no price given), each counted toward the cap.
      expect(spend.addUnpriced.mock.calls).toEqual(
        Array.from({ length: 3 }, () => [
          "prj_1",
          new Date("2026-11-23T12:00:00.000Z"),
          expect.any(Number),
          expect.any(String),
        ]),
      );
      expect(inputTokensCounted()).toEqual([["provider-a", "input", 11]]);
    });

    it("forgets the runs reported least recently beyond its bound, and then leaves the repeat to the database", () => {
      const { rows, spend, poll } = gateway(2);
      for (const run of ["bg_a", "bg_b", "bg_a", "bg_c", "bg_a", "bg_b"]) poll(run);
      // bg_a, polled again, stays remembered; bg_b was forgotten when bg_c came.
      expect(rows.map((row) => row.request_id).filter((id) => id.startsWith("bg_"))).toEqual([
        "bg_a",
        "bg_b",
        "bg_c",
        "bg_b",
      ]);
      expect(spend.add).toHaveBeenCalledTimes(4);
    });
  });
});

/**
 * Which rows the recorder may coalesce (decision 0015): the refusals a client whose credentials
 * passed can repeat as fast as it sends (a rate limit's 429, a 403), and no other.
 */
describe("the kind of a usage row", () => {
  const project = {
    id: "prj_1",
    createdAt: "2026-11-01T00:00:00.000Z",
    rateLimits: { perMinute: null, devicePerMinute: null },
    monthlySpendCapUsd: null as number | null,
    proxyAllowList: null,
  };
  const options = { endpoint: "text", projectId: "prj_1", provider: "provider-a" } as const;

  function admission(fields: {
    authenticate?: () => AuthResult;
    allowed?: boolean;
    monthToDate?: () => Promise<number>;
    capUsd?: number;
  }) {
    const kinds: Array<[number, string | null, string]> = [];
    const admit = createAdmission({
      authenticate:
        fields.authenticate ?? authenticatedAs({ ...project, monthlySpendCapUsd: fields.capUsd ?? null }),
      limiter: { consumeAll: () => [decision(fields.allowed ?? true)] } as unknown as RateLimiter,
      spend: {
        add: () => {},
        addUnpriced: () => {},
        monthToDate: fields.monthToDate ?? (async () => 0),
        holdWithLimits: () => ({ release: () => {} }),
      } as unknown as SpendGuard,
      recorder: {
        record: (row: UsageRecord, kind = "call") => kinds.push([row.status, row.error_code, kind]),
      } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const attempt = async (context = admissionRequestContext()) => {
      try {
        return await admit(context, options);
      } catch {
        return null;
      }
    };
    return { attempt, kinds };
  }
  const failed = (status: 401 | 403): (() => AuthResult) => {
    const error =
      status === 401
        ? new GatewayError("UNAUTHORIZED", "the test key does not match")
        : new GatewayError("FORBIDDEN", "This project is disabled");
    return () => ({ ok: false, error, project: project as unknown as Project, method: "bearer-test-key" });
  };

  it("a rate limit's 429 after authentication: an authenticated refusal", async () => {
    const { attempt, kinds } = admission({ allowed: false });
    await attempt();
    expect(kinds).toEqual([[429, "TOO_MANY_REQUESTS", "authenticated-refusal"]]);
  });

  it("the spend cap's 403, and its 503 when it cannot be checked: authenticated refusals", async () => {
    const spent = admission({ capUsd: 1, monthToDate: async () => 2 });
    await spent.attempt();
    expect(spent.kinds).toEqual([[403, "FORBIDDEN", "authenticated-refusal"]]);
    const unknown = admission({
      capUsd: 1,
      monthToDate: async () => {
        throw new Error("database down");
      },
    });
    await unknown.attempt();
    // Counted by no limit (the cap is asked first) and by no throttle: coalesced, or an outage's
    // calls would write a row each without bound.
    expect(unknown.kinds).toEqual([[503, "SERVICE_UNAVAILABLE", "authenticated-refusal"]]);
  });

  it("a 503 of authentication once the partial key found its project (DeviceCheck resting, its key not loading): an authenticated refusal", async () => {
    const unavailable = new GatewayError(
      "SERVICE_UNAVAILABLE",
      "Device verification is unavailable right now",
      {
        details: { retryable: true },
      },
    );
    const { attempt, kinds } = admission({
      authenticate: () => ({
        ok: false,
        error: unavailable,
        project: project as unknown as Project,
        method: "bearer-device-check",
      }),
    });
    await attempt();
    expect(kinds).toEqual([[503, "SERVICE_UNAVAILABLE", "authenticated-refusal"]]);
  });

  it("a 503 of authentication that found no project (the credentials could not be read): a refusal", async () => {
    const unavailable = new GatewayError("SERVICE_UNAVAILABLE", "The database is unavailable", {
      details: { retryable: true },
    });
    const { attempt, kinds } = admission({
      authenticate: () => ({ ok: false, error: unavailable, project: null, method: null }),
    });
    await attempt();
    expect(kinds).toEqual([[503, "SERVICE_UNAVAILABLE", "refusal"]]);
  });

  it("a 403 of authentication (credentials passed: a revoked key, a disabled project): an authenticated refusal", async () => {
    const { attempt, kinds } = admission({ authenticate: failed(403) });
    await attempt();
    expect(kinds).toEqual([[403, "FORBIDDEN", "authenticated-refusal"]]);
  });

  // Counted by no limit (its credentials were still being checked: Apple asked about a device
  // token, a key read from PostgreSQL) and by no throttle (they passed): before, each wrote a row of
  // its own, so a client with credentials could write rows without bound by sending and leaving.
  it("a 499 of a client that left while its credentials were checked: an authenticated refusal", async () => {
    const { attempt, kinds } = admission({});
    await attempt(
      admissionRequestContext({
        request: { headers: {}, rawHeaders: [], socket: { destroyed: true } } as unknown as IncomingMessage,
      }),
    );
    expect(kinds).toEqual([[499, null, "authenticated-refusal"]]);
  });

  it("a failed authentication (401): a refusal, as before", async () => {
    const { attempt, kinds } = admission({ authenticate: failed(401) });
    await attempt();
    expect(kinds).toEqual([[401, "UNAUTHORIZED", "refusal"]]);
  });

  it("an admitted call's row, finished or failed at the provider: a call", async () => {
    const { attempt, kinds } = admission({});
    const first = await attempt();
    first?.finish({
      status: 200,
      outcome: "ok",
      provider: "provider-a",
      model: "gpt-4o-mini",
      usage: null,
      costUsd: null,
      streamed: false,
      timeToFirstByteMs: null,
      errorCode: null,
    });
    const second = await attempt();
    second?.fail(new GatewayError("PROVIDER_ERROR", "upstream 500", { details: { retryable: true } }));
    const third = await attempt();
    // A provider's own 429 or 403 passed through is the call's, never coalesced.
    third?.fail(new GatewayError("TOO_MANY_REQUESTS", "the provider's rate limit"));
    expect(kinds).toEqual([
      [200, null, "call"],
      [502, "PROVIDER_ERROR", "call"],
      [429, "TOO_MANY_REQUESTS", "call"],
    ]);
  });
});

/**
 * The shutdown's deadline coming while a call waits to be admitted (`refuseAtDeadline`): the call
 * is refused at once (the route answers the refusal's 503), its row written then, and what the
 * wait ends with admits nothing: the place under the spend cap and the device token's use are
 * given back, and no admitted call is left without a row.
 */
describe("admission at the shutdown deadline", () => {
  const project = {
    id: "prj_1",
    createdAt: "2026-11-01T00:00:00.000Z",
    rateLimits: { perMinute: null, devicePerMinute: null },
    monthlySpendCapUsd: 10,
    proxyAllowList: null,
  };

  function admission(
    authenticate: () => AuthResult | Promise<AuthResult>,
    limits: Promise<RateLimitDecision[]>,
  ) {
    const rows: UsageRecord[] = [];
    const release = vi.fn();
    const admit = createAdmission({
      authenticate,
      limiter: { consumeAll: () => limits } as unknown as RateLimiter,
      spend: {
        monthToDate: async () => 0,
        holdWithLimits: () => ({ release }),
      } as unknown as SpendGuard,
      recorder: { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const context = admissionRequestContext();
    return { admit, rows, release, context, response: context.response };
  }

  it("refuses a call waiting for its limits, writes its row, and gives back its place and token use", async () => {
    const refund = vi.fn(async () => {});
    let decide: (decisions: RateLimitDecision[]) => void = () => {};
    const limits = new Promise<RateLimitDecision[]>((resolve) => {
      decide = resolve;
    });
    const { admit, rows, release, context, response } = admission(authenticatedAs(project, refund), limits);
    const admitted = admit(context, { endpoint: "proxy", projectId: "prj_1", provider: "provider-a" });
    const settled = Promise.resolve(admitted).catch((error: unknown) => error);
    await vi.waitFor(() => expect(rows).toEqual([]));
    await new Promise((resolve) => setTimeout(resolve, 10));

    expect(refuseAtDeadline(response)).toBe(true);
    const refusal = refusalOf(response);
    expect(await settled).toBe(refusal);
    expect(rows).toMatchObject([
      {
        project_id: "prj_1",
        key_id: "key_1",
        status: 503,
        error_code: "SERVICE_UNAVAILABLE",
        outcome: "error",
      },
    ]);
    expect(release).toHaveBeenCalled();

    decide([decision(true)]);
    await vi.waitFor(() => expect(refund).toHaveBeenCalledTimes(1));
    expect(rows).toHaveLength(1);
    expect(admit.unrecorded()).toBe(0);
  });

  it("refuses a call whose authentication has not settled, under the project id it named", async () => {
    let authenticated: (result: AuthResult) => void = () => {};
    const authentication = new Promise<AuthResult>((resolve) => {
      authenticated = resolve;
    });
    const refund = vi.fn(async () => {});
    const { admit, rows, context, response } = admission(
      () => authentication,
      Promise.resolve([decision(true)]),
    );
    const settled = Promise.resolve(
      admit(context, { endpoint: "text", projectId: "prj_1", provider: "provider-a" }),
    ).catch((error: unknown) => error);

    expect(refuseAtDeadline(response)).toBe(true);
    expect(await settled).toBe(refusalOf(response));
    expect(rows).toMatchObject([
      { project_id: "prj_1", key_id: null, status: 503, error_code: "SERVICE_UNAVAILABLE", outcome: "error" },
    ]);

    authenticated(authenticatedAs(project, refund)());
    await vi.waitFor(() => expect(refund).toHaveBeenCalledTimes(1));
    expect(rows).toHaveLength(1);
    expect(admit.unrecorded()).toBe(0);
  });
});

/**
 * The spend cap's messages name amounts as Sluice takes them (plain digits to the billionth, as
 * `--monthly-spend-cap` shows them): a price summed in floats came out as `0.5010000000000001 USD`,
 * and a cap under a millionth as `1e-7 USD`.
 */
describe("the spend cap's messages", () => {
  function admitted(capUsd: number, verdict: "over-cap" | "in-flight") {
    const project = {
      id: "prj_1",
      createdAt: "2026-11-01T00:00:00.000Z",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: capUsd,
      proxyAllowList: null,
    };
    const admit = createAdmission({
      authenticate: authenticatedAs(project),
      limiter: { consumeAll: () => [decision(true)] } as unknown as RateLimiter,
      spend: {
        add: () => {},
        addUnpriced: () => {},
        monthToDate: async () => 0,
        holdWithLimits: () => ({ release: () => {}, price: () => verdict }),
      } as unknown as SpendGuard,
      recorder: { record: () => {} } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    return admit(admissionRequestContext(), {
      endpoint: "image",
      projectId: "prj_1",
      provider: "provider-a",
    });
  }
  const messageOf = (run: () => unknown) => {
    try {
      run();
    } catch (error) {
      return (error as GatewayError).message;
    }
    return null;
  };

  it("names a price and a cap to the billionth, in plain digits", async () => {
    const call = await admitted(0.3, "over-cap");
    expect(messageOf(() => call.priceKnown?.(0.1 + 0.2 + 0.201))).toMatch(
      /^This call's price, 0\.501 USD, would take this project past its monthly spend cap of 0\.3 USD;/,
    );
    const tiny = await admitted(1e-7, "over-cap");
    expect(messageOf(() => tiny.priceKnown?.(2e-9))).toMatch(
      /^This call's price, 0\.000000002 USD, .* cap of 0\.0000001 USD;/,
    );
    const inFlight = await admitted(1e-7, "in-flight");
    expect(messageOf(() => inFlight.priceKnown?.(2e-9))).toContain("monthly spend cap of 0.0000001 USD;");
  });

  it("names the cap the month reached in plain digits", async () => {
    const project = {
      id: "prj_1",
      createdAt: "2026-11-01T00:00:00.000Z",
      rateLimits: { perMinute: null, devicePerMinute: null },
      monthlySpendCapUsd: 1e-7,
      proxyAllowList: null,
    };
    const admit = createAdmission({
      authenticate: authenticatedAs(project),
      limiter: { consumeAll: () => [decision(true)] } as unknown as RateLimiter,
      spend: { monthToDate: async () => 1e-7 } as unknown as SpendGuard,
      recorder: { record: () => {} } as unknown as UsageRecorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const refused = await Promise.resolve(
      admit(admissionRequestContext(), { endpoint: "text", projectId: "prj_1", provider: "provider-a" }),
    ).catch((error: unknown) => error as GatewayError);
    expect((refused as GatewayError).message).toMatch(/monthly spend cap of 0\.0000001 USD;/);
  });
});

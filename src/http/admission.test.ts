import type { IncomingMessage, ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { createMetrics } from "../observability/metrics.js";
import type { RateLimiter } from "../rate-limit/rate-limiter.js";
import type { UsageRecord } from "../storage/usage-repository.js";
import type { SpendGuard } from "../usage/spend-guard.js";
import type { UsageRecorder } from "../usage/usage-recorder.js";
import { createAdmission } from "./admission.js";
import type { RequestContext } from "./router.js";

describe("admission", () => {
  it("writes the usage row of a request whose authentication could not be decided (database down: 503)", async () => {
    const rows: UsageRecord[] = [];
    const recorder = { record: (row: UsageRecord) => rows.push(row) } as unknown as UsageRecorder;
    const unavailable = new GatewayError("SERVICE_UNAVAILABLE", "The database is unavailable");
    const admit = createAdmission({
      authenticate: () => Promise.reject(unavailable),
      limiter: {} as RateLimiter,
      spend: {} as SpendGuard,
      recorder,
      metrics: createMetrics({ collectDefaults: false }),
      now: () => new Date("2026-11-23T12:00:00Z"),
      defaults: { projectPerMinute: 60, devicePerMinute: 60, ipPerMinute: 60 },
    });
    const context = {
      request: { headers: {}, socket: { destroyed: false } } as unknown as IncomingMessage,
      response: {} as ServerResponse,
      params: {},
      requestId: "req_1",
      startedAt: performance.now(),
      clientIp: "192.0.2.1",
      path: "/v1/text",
      query: "",
      writesOwnHeaders: false,
      corsHeaders: null,
    } satisfies RequestContext;

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
});

import { describe, expect, it } from "vitest";
import { createMetrics } from "./metrics.js";

describe("metrics", () => {
  it("renders requests, overhead, tokens, cost, limits and degraded states in Prometheus format", async () => {
    const metrics = createMetrics();
    metrics.observeRequest("/v1/provider-a/:projectId/*", "POST", 200, 0.012);
    metrics.observeRequest("/v1/provider-a/:projectId/*", "POST", 200, 0.02);
    metrics.observeRequest("/v1/provider-a/:projectId/*", "POST", 429, 0.001);
    metrics.observeOverhead("provider-a", 0.0002);
    metrics.observeTimeToFirstByte("provider-a", 0.1);
    metrics.countTokens("provider-a", "input", 11);
    metrics.countTokens("provider-a", "input", 4);
    metrics.countTokens("provider-a", "output", null);
    metrics.countCost("provider-a", 0.25);
    metrics.countLimitDecision("project", "limited");
    metrics.setUsageQueueDepth(3);
    metrics.setDegraded("redis", true);
    const { body, contentType } = await metrics.render();
    expect(contentType).toContain("text/plain");
    expect(body).toContain(
      'sluice_http_requests_total{route="/v1/provider-a/:projectId/*",method="POST",status="200"} 2',
    );
    expect(body).toContain(
      'sluice_http_requests_total{route="/v1/provider-a/:projectId/*",method="POST",status="429"} 1',
    );
    expect(body).toContain(
      'sluice_http_request_duration_seconds_count{route="/v1/provider-a/:projectId/*"} 3',
    );
    expect(body).toContain('sluice_gateway_overhead_seconds_count{provider="provider-a"} 1');
    expect(body).toContain('sluice_upstream_time_to_first_byte_seconds_count{provider="provider-a"} 1');
    expect(body).toContain('sluice_tokens_total{provider="provider-a",kind="input"} 15');
    expect(body).not.toContain('kind="output"');
    expect(body).toContain('sluice_cost_usd_total{provider="provider-a"} 0.25');
    expect(body).toContain('sluice_rate_limit_decisions_total{limit="project",decision="limited"} 1');
    expect(body).toContain("sluice_usage_queue_depth 3");
    expect(body).toContain('sluice_degraded{component="redis"} 1');
  });

  it("keeps a component degraded while any source finds it so: health answering does not hide failing writes", async () => {
    const metrics = createMetrics();
    const database = async () =>
      (await metrics.render()).body
        .split("\n")
        .find((line) => line.startsWith('sluice_degraded{component="database"}'));
    metrics.setDegraded("database", true, "usage-writes");
    metrics.setDegraded("database", false, "health");
    expect(await database()).toBe('sluice_degraded{component="database"} 1');
    metrics.setDegraded("database", false, "usage-writes");
    expect(await database()).toBe('sluice_degraded{component="database"} 0');
  });
});

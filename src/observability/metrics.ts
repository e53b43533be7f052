import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client";

/** Prometheus metrics, one registry per gateway (tests build their own). Names in snake_case. */
export function createMetrics(options: { collectDefaults?: boolean } = {}) {
  const registry = new Registry();
  if (options.collectDefaults) collectDefaultMetrics({ register: registry, prefix: "sluice_" });
  const latencyBuckets = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
  ];

  const requests = new Counter({
    name: "sluice_http_requests_total",
    help: "Requests answered, by route pattern, method and status",
    labelNames: ["route", "method", "status"] as const,
    registers: [registry],
  });
  const duration = new Histogram({
    name: "sluice_http_request_duration_seconds",
    help: "Time from request arrival to response close, by route pattern",
    labelNames: ["route"] as const,
    buckets: latencyBuckets,
    registers: [registry],
  });
  const overhead = new Histogram({
    name: "sluice_gateway_overhead_seconds",
    help: "Time the gateway spent before sending a request upstream (auth, key rebuild, limits)",
    labelNames: ["provider"] as const,
    buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5],
    registers: [registry],
  });
  const timeToFirstByte = new Histogram({
    name: "sluice_upstream_time_to_first_byte_seconds",
    help: "Time from sending upstream to the first response byte, by provider",
    labelNames: ["provider"] as const,
    buckets: latencyBuckets,
    registers: [registry],
  });
  const tokens = new Counter({
    name: "sluice_tokens_total",
    help: "Tokens reported by providers, by provider and kind (input, output, cached, reasoning)",
    labelNames: ["provider", "kind"] as const,
    registers: [registry],
  });
  const cost = new Counter({
    name: "sluice_cost_usd_total",
    help: "Known cost in USD, by provider",
    labelNames: ["provider"] as const,
    registers: [registry],
  });
  const limitDecisions = new Counter({
    name: "sluice_rate_limit_decisions_total",
    help: "Rate-limit decisions, by limit (project, device, ip, auth_failures) and decision (allowed, limited)",
    labelNames: ["limit", "decision"] as const,
    registers: [registry],
  });
  const authResults = new Counter({
    name: "sluice_auth_results_total",
    help: "Authentication outcomes, by method and result",
    labelNames: ["method", "result"] as const,
    registers: [registry],
  });
  const usageQueueDepth = new Gauge({
    name: "sluice_usage_queue_depth",
    help: "Usage rows waiting to be written",
    registers: [registry],
  });
  const usageRowsDropped = new Counter({
    name: "sluice_usage_rows_dropped_total",
    help: "Usage rows dropped because the queue was full during a database outage",
    registers: [registry],
  });
  const usageWriteFailures = new Counter({
    name: "sluice_usage_write_failures_total",
    help: "Failed attempts to write a usage batch (the batch is kept and retried)",
    registers: [registry],
  });
  const degraded = new Gauge({
    name: "sluice_degraded",
    help: "1 while a component runs degraded (redis: per-instance limits; database: usage queued)",
    labelNames: ["component"] as const,
    registers: [registry],
  });

  // prom-client hashes a label object on every call; the hot path keeps bound children instead,
  // found through maps keyed by the label values themselves (no key strings built per call).
  const requestChild = memo((route: string) =>
    memo((method: string) =>
      memo((status: number) => requests.labels({ route, method, status: String(status) })),
    ),
  );
  const durationChild = memo((route: string) => duration.labels({ route }));
  const overheadChild = memo((provider: string) => overhead.labels({ provider }));
  const timeToFirstByteChild = memo((provider: string) => timeToFirstByte.labels({ provider }));
  const tokensChild = memo((provider: string) => memo((kind: string) => tokens.labels({ provider, kind })));
  const costChild = memo((provider: string) => cost.labels({ provider }));

  return {
    registry,
    observeRequest(route: string, method: string, status: number, seconds: number) {
      requestChild(route)(method)(status).inc();
      durationChild(route).observe(seconds);
    },
    observeOverhead: (provider: string, seconds: number) => overheadChild(provider).observe(seconds),
    observeTimeToFirstByte: (provider: string, seconds: number) =>
      timeToFirstByteChild(provider).observe(seconds),
    countTokens(provider: string, kind: "input" | "output" | "cached" | "reasoning", count: number | null) {
      if (count) tokensChild(provider)(kind).inc(count);
    },
    countCost(provider: string, usd: number | null) {
      if (usd) costChild(provider).inc(usd);
    },
    countLimitDecision: (limit: string, decision: "allowed" | "limited") =>
      limitDecisions.inc({ limit, decision }),
    countAuthResult: (method: string, result: string) => authResults.inc({ method, result }),
    setUsageQueueDepth: (depth: number) => usageQueueDepth.set(depth),
    countUsageRowsDropped: (count: number) => usageRowsDropped.inc(count),
    countUsageWriteFailure: () => usageWriteFailures.inc(),
    setDegraded: (component: string, on: boolean) => degraded.set({ component }, on ? 1 : 0),
    async render(): Promise<{ contentType: string; body: string }> {
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/** Memoizes a one-argument factory; label values come from code, so the map stays small (capped). */
function memo<K, V>(make: (key: K) => V): (key: K) => V {
  const made = new Map<K, V>();
  return (key) => {
    let value = made.get(key);
    if (value === undefined) {
      value = make(key);
      if (made.size < 1000) made.set(key, value);
    }
    return value;
  };
}

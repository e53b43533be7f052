import { Counter, collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { CellCounter, CellGauge, CellHistogram } from "./metric-cells.js";

/** Prometheus metrics, one registry per gateway (tests build their own). Names in snake_case. */
export function createMetrics(options: { collectDefaults?: boolean } = {}) {
  const registry = new Registry();
  if (options.collectDefaults) collectDefaultMetrics({ register: registry, prefix: "sluice_" });
  const latencyBuckets = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
  ];

  // The per-request metrics are cells (metric-cells.ts): a property update per call, no label hashing.
  const requests = new CellCounter(
    registry,
    "sluice_http_requests_total",
    "Requests answered, by route pattern, method and status",
    ["route", "method", "status"],
  );
  const duration = new CellHistogram(
    registry,
    "sluice_http_request_duration_seconds",
    "Time from request arrival to response close, by route pattern",
    ["route"],
    latencyBuckets,
  );
  const overhead = new CellHistogram(
    registry,
    "sluice_gateway_overhead_seconds",
    "Time the gateway spent before sending a proxied request upstream (auth, key rebuild, limits); proxies only",
    ["provider"],
    [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.1, 0.5],
  );
  const timeToFirstByte = new CellHistogram(
    registry,
    "sluice_upstream_time_to_first_byte_seconds",
    "Time from sending a proxied request upstream to the first response byte, by provider; proxies only",
    ["provider"],
    latencyBuckets,
  );
  const tokens = new CellCounter(
    registry,
    "sluice_tokens_total",
    "Tokens reported by providers, by provider and kind (input, output, cached, reasoning)",
    ["provider", "kind"],
  );
  const cost = new CellCounter(registry, "sluice_cost_usd_total", "Known cost in USD, by provider", [
    "provider",
  ]);
  const limitDecisions = new CellCounter(
    registry,
    "sluice_rate_limit_decisions_total",
    "Rate-limit decisions, by limit (project, device, ip; auth_failures and admin_auth_failures: refusals only) and decision (allowed, limited)",
    ["limit", "decision"],
  );
  const authResults = new CellCounter(
    registry,
    "sluice_auth_results_total",
    "Authentication outcomes, by method (the apps' methods, none, admin-token) and result (ok, or the error code)",
    ["method", "result"],
  );
  const deviceCheckResults = new Counter({
    name: "sluice_devicecheck_results_total",
    help: "Apple DeviceCheck verdicts on device tokens, by environment and result: valid, rejected (Apple refused the token), malformed (not sent to Apple); Apple unavailable: misconfigured (Apple refused the project's key or JWT), apple-error, timeout, network, resting (Apple throttled the key: not asked)",
    labelNames: ["environment", "result"] as const,
    registers: [registry],
  });
  const usageQueueDepth = new CellGauge(
    registry,
    "sluice_usage_queue_depth",
    "Usage rows waiting to be written",
    [],
  ).cell({});
  const usageRowsDropped = new Counter({
    name: "sluice_usage_rows_dropped_total",
    help: "Usage rows dropped: the queue was full during a database outage, rows were still queued at shutdown, or the database refused the row",
    registers: [registry],
  });
  const refusalsCoalesced = new Counter({
    name: "sluice_usage_refusals_coalesced_total",
    help: "Refusals of authenticated clients (429 of a rate limit, 403) not written as a usage row of their own but counted in their minute's coalesced row, by error code",
    labelNames: ["code"] as const,
    registers: [registry],
  });
  const usageRowsWritten = new Counter({
    name: "sluice_usage_rows_written_total",
    help: "Usage rows written to the database (a coalesced row of refusals counts once)",
    registers: [registry],
  });
  const usageWriteFailures = new Counter({
    name: "sluice_usage_write_failures_total",
    help: "Failed attempts to write a usage batch (the batch is kept and retried)",
    registers: [registry],
  });
  const logLinesDropped = new Counter({
    name: "sluice_log_lines_dropped_total",
    help: "Log lines not written: stdout refused them (a full disk, a closed pipe) or fell more than 1 MiB behind",
    registers: [registry],
  });
  const connectionsRefused = new Counter({
    name: "sluice_connections_refused_total",
    help: "Connections refused at once because their client address held SLUICE_MAX_CONNECTIONS_PER_IP already",
    registers: [registry],
  });
  const connectionsRefusedFull = new Counter({
    name: "sluice_connections_refused_full_total",
    help: "Connections refused at once (503) because the gateway held SLUICE_MAX_CONNECTIONS connections already",
    registers: [registry],
  });
  /** The body budget the two metrics below read when scraped (`watchBodyBudget`); none until then. */
  let bodyBudget: { held(): number; refused(): number } | null = null;
  new Gauge({
    name: "sluice_buffered_body_bytes",
    help: "Request-body bytes held in memory now, counted in SLUICE_MAX_BUFFERED_BODY_BYTES",
    registers: [registry],
    collect() {
      this.set(bodyBudget?.held() ?? 0);
    },
  });
  let refusedSeen = 0;
  new Counter({
    name: "sluice_body_budget_refusals_total",
    help: "Requests answered 503 because their body would have gone past SLUICE_MAX_BUFFERED_BODY_BYTES",
    registers: [registry],
    collect() {
      const refused = bodyBudget?.refused() ?? 0;
      this.inc(refused - refusedSeen);
      refusedSeen = refused;
    },
  });
  const degradedBy = new Map<string, Set<string>>();
  const degraded = new Gauge({
    name: "sluice_degraded",
    help: "1 while a component runs degraded (redis: per-instance limits; database: usage queued)",
    labelNames: ["component"] as const,
    registers: [registry],
  });

  // Cells found through maps keyed by the label values themselves (no key strings built per call).
  const requestCell = memo((route: string) =>
    memo((method: string) =>
      memo((status: number) => requests.cell({ route, method, status: String(status) })),
    ),
  );
  const durationCell = memo((route: string) => duration.cell({ route }));
  const overheadCell = memo((provider: string) => overhead.cell({ provider }));
  const timeToFirstByteCell = memo((provider: string) => timeToFirstByte.cell({ provider }));
  const tokensCell = memo((provider: string) => memo((kind: string) => tokens.cell({ provider, kind })));
  const costCell = memo((provider: string) => cost.cell({ provider }));
  const limitCell = memo((limit: string) =>
    memo((decision: string) => limitDecisions.cell({ limit, decision })),
  );
  const authCell = memo((method: string) => memo((result: string) => authResults.cell({ method, result })));

  return {
    registry,
    observeRequest(route: string, method: string, status: number, seconds: number) {
      requestCell(route)(method)(status).inc();
      durationCell(route).observe(seconds);
    },
    observeOverhead: (provider: string, seconds: number) => overheadCell(provider).observe(seconds),
    observeTimeToFirstByte: (provider: string, seconds: number) =>
      timeToFirstByteCell(provider).observe(seconds),
    countTokens(provider: string, kind: "input" | "output" | "cached" | "reasoning", count: number | null) {
      if (count) tokensCell(provider)(kind).inc(count);
    },
    countCost(provider: string, usd: number | null) {
      if (usd) costCell(provider).inc(usd);
    },
    countLimitDecision: (limit: string, decision: "allowed" | "limited") => limitCell(limit)(decision).inc(),
    countAuthResult: (method: string, result: string) => authCell(method)(result).inc(),
    countDeviceCheckResult: (environment: string, result: string) =>
      deviceCheckResults.inc({ environment, result }),
    setUsageQueueDepth: (depth: number) => usageQueueDepth.set(depth),
    countUsageRowsDropped: (count: number) => usageRowsDropped.inc(count),
    countUsageRowsWritten: (count: number) => usageRowsWritten.inc(count),
    countUsageWriteFailure: () => usageWriteFailures.inc(),
    countRefusalCoalesced: (code: string) => refusalsCoalesced.inc({ code }),
    countLogLinesDropped: (count: number) => logLinesDropped.inc(count),
    countConnectionRefused: () => connectionsRefused.inc(),
    countConnectionRefusedFull: () => connectionsRefusedFull.inc(),
    /** The body budget whose bytes held and refusals the scrape reads. */
    watchBodyBudget(budget: { held(): number; refused(): number }) {
      bodyBudget = budget;
    },
    /**
     * What `source` (the health check, the usage writes, the limiter) finds of `component`: the
     * gauge is 1 while any source finds it degraded, so one that finds it fine does not hide another
     * that does (reads answering while writes fail).
     */
    setDegraded(component: string, on: boolean, source = "state") {
      let sources = degradedBy.get(component);
      if (sources === undefined) {
        sources = new Set();
        degradedBy.set(component, sources);
      }
      if (on) sources.add(source);
      else sources.delete(source);
      degraded.set({ component }, sources.size > 0 ? 1 : 0);
    },
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

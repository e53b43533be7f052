import type { UsageRecord } from "../../src/storage/usage-repository.js";

/** A complete usage row with plausible values, for tests that write rows directly. */
export const usageRow = (requestId: string, overrides: Partial<UsageRecord> = {}): UsageRecord => ({
  request_id: requestId,
  project_id: "p1",
  key_id: "k1",
  endpoint: "proxy",
  provider: "provider-a",
  model: "gpt-4o-mini",
  status: 200,
  error_code: null,
  input_tokens: 10,
  output_tokens: 5,
  cached_tokens: 2,
  reasoning_tokens: 0,
  cost_usd: 0.001,
  latency_ms: 12.5,
  ttfb_ms: 3,
  streamed: 0,
  outcome: "ok",
  auth_method: "test-key",
  client_ip: "127.0.0.1",
  created_at: "2026-11-02T10:00:00.000Z",
  requests: 1,
  provider_answered: null,
  ...overrides,
});

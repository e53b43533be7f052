/**
 * Table types shared by both engines. Column types are chosen so one set of queries works on
 * SQLite and PostgreSQL alike: booleans are 0/1 integers, timestamps ISO-8601 UTC text (they sort
 * as text), JSON is text, money is double precision USD, and token counts are 64-bit (bigint on
 * PostgreSQL, read back as numbers: see database.ts).
 */
export interface ProjectsTable {
  id: string;
  name: string;
  team_id: string | null;
  provider: string;
  model: string | null;
  test_mode: number;
  device_check_enabled: number;
  device_check_team_id: string | null;
  device_check_key_id: string | null;
  /** The .p8 private key, sealed with the master key (secret-box format). */
  device_check_private_key: string | null;
  device_check_environment: string;
  device_token_mode: string;
  /** When the DeviceCheck team id, key id, .p8 key or environment last changed; null: never since creation. */
  device_check_changed_at: string | null;
  output_schema: string | null;
  save_images_to_vault: number;
  rate_limit_per_minute: number | null;
  device_rate_limit_per_minute: number | null;
  monthly_spend_cap_usd: number | null;
  /** The proxy allow-list as JSON text (`{"provider-a": ["POST chat/completions"]}`); null: none. */
  proxy_allow_list: string | null;
  disabled: number;
  created_at: string;
  updated_at: string;
}

export interface ProviderKeysTable {
  id: string;
  project_id: string;
  provider: string;
  label: string | null;
  /** The server's share of the provider key, sealed with the master key (AAD: project + provider + key id). */
  server_share: string;
  /** SHA-256 (hex) of the client share, to reject a wrong partial key before any decrypt. */
  client_share_digest: string;
  created_at: string;
  revoked_at: string | null;
}

interface TestKeysTable {
  id: string;
  project_id: string;
  /** SHA-256 (hex) of the test key; the key itself is shown once and never stored. */
  digest: string;
  created_at: string;
}

export interface UsageRecordsTable {
  request_id: string;
  project_id: string;
  key_id: string | null;
  endpoint: string;
  provider: string | null;
  model: string | null;
  status: number;
  error_code: string | null;
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  reasoning_tokens: number | null;
  cost_usd: number | null;
  latency_ms: number;
  ttfb_ms: number | null;
  streamed: number;
  outcome: string;
  auth_method: string | null;
  client_ip: string | null;
  created_at: string;
  /**
   * How many requests the row stands for: 1, but for the row of an authenticated client's repeated
   * refusals coalesced within a minute (usage/refusal-coalescer.ts), which counts them all.
   */
  requests: number;
  /**
   * 1 when the provider answered the call with a success (2xx), null otherwise or not known
   * (migration 0008; a build before it writes none). A failed call's row without tokens says by it
   * that the provider billed the call all the same (an answer Sluice could not read), unlike a
   * refusal's: the spend cap counts it (`countsAsUnpriced`). 2: answered so, and the row's tokens
   * and cost leave out a part the provider billed of unknown usage (a structured repair's answer
   * not read, or reporting none): counted at its cost plus the estimate (decision 0057, amended).
   * Optional here: a row without it is null.
   */
  provider_answered?: number | null;
}

export interface Database {
  projects: ProjectsTable;
  provider_keys: ProviderKeysTable;
  test_keys: TestKeysTable;
  usage_records: UsageRecordsTable;
}

import type { ProjectsTable } from "../../src/storage/schema.js";

/**
 * A `projects` row as the storage layer writes it, for tests that insert projects with SQL (as an
 * earlier release stored them, or with only what the test needs): every setting at its default
 * (no Test Mode, no DeviceCheck, no output schema, no limits), created and updated `at`, with
 * `values` over them.
 */
export function projectRow(id: string, at: string, values: Partial<ProjectsTable> = {}): ProjectsTable {
  return {
    id,
    name: id,
    team_id: null,
    provider: "provider-a",
    model: null,
    test_mode: 0,
    device_check_enabled: 0,
    device_check_team_id: null,
    device_check_key_id: null,
    device_check_private_key: null,
    device_check_environment: "production",
    device_token_mode: "cached",
    device_check_changed_at: null,
    output_schema: null,
    save_images_to_vault: 0,
    rate_limit_per_minute: null,
    device_rate_limit_per_minute: null,
    monthly_spend_cap_usd: null,
    proxy_allow_list: null,
    disabled: 0,
    created_at: at,
    updated_at: at,
    ...values,
  };
}

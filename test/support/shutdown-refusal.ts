import { rmSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { expect } from "vitest";
import type { TestGateway } from "./test-gateway.js";

/** What a call the shutdown's deadline refused is told (src/deadline-refusal.ts). */
export const deadlineRefusalMessage =
  "The gateway is shutting down and stopped this call before its answer began; retry it";

/**
 * The usage rows of a gateway that has shut down, read from its SQLite file (its request ids are
 * in the order the calls came), their fields a refusal sets; removes its data dir.
 */
export function rowsAfterShutdown(sluice: TestGateway) {
  const dataDir = sluice.gateway.config.dataDir;
  const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
  try {
    return database
      .prepare(
        "select request_id, endpoint, status, outcome, error_code from usage_records order by request_id",
      )
      .all();
  } finally {
    database.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * Checks `answer` is the 503 a call the deadline refused gets: the error envelope, Retry-After and
 * the connection closed, not a connection cut without an answer (fetch failed: other side closed).
 * Returns its request id.
 */
export async function expectDeadlineRefusal(answer: Response | Error): Promise<string> {
  expect(answer).toBeInstanceOf(Response);
  const response = answer as Response;
  const requestId = String(response.headers.get("x-request-id"));
  expect(response.status).toBe(503);
  expect(response.headers.get("retry-after")).toBe("1");
  expect(response.headers.get("connection")).toBe("close");
  expect(await response.json()).toEqual({
    error: {
      code: "SERVICE_UNAVAILABLE",
      details: { retryable: true },
      message: deadlineRefusalMessage,
      requestId,
    },
  });
  return requestId;
}

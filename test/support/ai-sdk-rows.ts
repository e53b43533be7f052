import type { LanguageModelUsage } from "ai";
import { expect } from "vitest";
import { projectUsageRows, type TestGateway, type TestProject, usageRowById } from "./test-gateway.js";

/**
 * The usage rows of AI SDK calls through a gateway, for one project: a call's row from the response
 * headers the SDK exposes (Sluice's request id is `x-request-id`, or `x-sluice-request-id` when the
 * provider sent an `x-request-id` of its own), and the rows written since a set of ids was taken.
 */
export function aiSdkRows(sluice: TestGateway, project: TestProject) {
  async function rowFor(headers: Record<string, string> | undefined) {
    const requestId = headers?.["x-sluice-request-id"] ?? headers?.["x-request-id"];
    expect(requestId, "Sluice's request id in the response headers").toBeDefined();
    return usageRowById(sluice.gateway, requestId);
  }
  async function newRows(before: Set<string>) {
    return (await projectUsageRows(sluice, project)).filter((row) => !before.has(row.request_id));
  }
  /**
   * The rows written since `before`, once there are at least `count` (or 15 s have passed, on a
   * loaded machine): a row the gateway writes once it sees the client leave may come a moment after
   * the client's abort.
   */
  async function newRowsOnce(before: Set<string>, count: number, waitMs = 15_000) {
    const deadline = Date.now() + waitMs;
    for (;;) {
      const rows = await newRows(before);
      if (rows.length >= count || Date.now() > deadline) return rows;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  async function rowIds() {
    return new Set((await newRows(new Set())).map((row) => row.request_id));
  }
  return { rowFor, newRows, newRowsOnce, rowIds };
}

/** The tokens the AI SDK reported to the app, as a usage row's columns hold them. */
export function tokensOf(usage: LanguageModelUsage) {
  return {
    input: usage.inputTokens ?? null,
    output: usage.outputTokens ?? null,
    cached: usage.inputTokenDetails.cacheReadTokens ?? null,
    reasoning: usage.outputTokenDetails.reasoningTokens ?? null,
  };
}

/** A usage row's tokens, to compare with tokensOf. */
export function tokensOfRow(row: {
  input_tokens: number | null;
  output_tokens: number | null;
  cached_tokens: number | null;
  reasoning_tokens: number | null;
}) {
  return {
    input: row.input_tokens,
    output: row.output_tokens,
    cached: row.cached_tokens,
    reasoning: row.reasoning_tokens,
  };
}

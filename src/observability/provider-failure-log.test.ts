import { describe, expect, it } from "vitest";
import { GatewayError } from "../errors.js";
import { createLogger } from "./logger.js";
import { createProviderFailureLog, providerFailureFacts } from "./provider-failure-log.js";

function refused(provider = "provider-a"): GatewayError {
  const cause = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  return new GatewayError("PROVIDER_ERROR", "The provider could not be reached", { cause, provider });
}

function logged() {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("warn", { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, logger };
}

describe("provider failure log", () => {
  it("logs one line per provider and code per window, then counts what it left out", () => {
    const { lines, logger } = logged();
    let now = 0;
    const log = createProviderFailureLog(logger, { windowMs: 10_000, now: () => now });
    log(refused(), "r1", "proxy");
    log(refused(), "r2", "proxy");
    log(refused(), "r3", "proxy");
    log(refused("provider-b"), "r4", "proxy");
    now = 10_000;
    log(refused(), "r5", "proxy");
    expect(lines.map((line) => [line.provider, line.requestId, line.suppressed])).toEqual([
      ["provider-a", "r1", 0],
      ["provider-b", "r4", 0],
      ["provider-a", "r5", 2],
    ]);
    expect(lines[0]).toMatchObject({ level: "warn", code: "ECONNREFUSED", status: 502, route: "proxy" });
  });

  it("ignores an error that names no provider", () => {
    const { lines, logger } = logged();
    createProviderFailureLog(logger)(new GatewayError("PROVIDER_ERROR", "The client disconnected"), "r", "x");
    expect(lines).toEqual([]);
  });

  it("reads the innermost cause of a fetch failure, its URL query cut", () => {
    const socket = Object.assign(new Error("getaddrinfo ENOTFOUND api.example.test"), { code: "ENOTFOUND" });
    const fetchFailed = new TypeError("fetch failed to https://api.example.test/v1?key=secret-key", {
      cause: socket,
    });
    expect(providerFailureFacts("provider-c", fetchFailed)).toEqual({
      provider: "provider-c",
      code: "ENOTFOUND",
      cause: "getaddrinfo ENOTFOUND api.example.test",
    });
    expect(providerFailureFacts("provider-c", new Error("at https://h/x?key=secret-key#f"))).toEqual({
      provider: "provider-c",
      code: "Error",
      cause: "at https://h/x?[cut]",
    });
  });

  it("says the provider's status, not its error body, for an answer with an error status", () => {
    const apiError = Object.assign(new Error("Incorrect API key provided: sk-abc"), {
      statusCode: 401,
      name: "AI_APICallError",
    });
    expect(providerFailureFacts("provider-a", apiError)).toEqual({
      provider: "provider-a",
      code: "AI_APICallError",
      cause: "the provider answered 401",
      providerStatus: 401,
    });
  });
});

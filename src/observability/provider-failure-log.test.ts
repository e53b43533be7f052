import { describe, expect, it } from "vitest";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
import { GatewayError } from "../errors.js";
import { clientDisconnected } from "../http/client-watch.js";
import { createLogger } from "./logger.js";
import { createProviderFailureLog, providerFailureFacts } from "./provider-failure-log.js";

function refused(provider = "provider-a"): GatewayError {
  const cause = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  return new GatewayError("PROVIDER_ERROR", "The provider could not be reached", {
    cause,
    provider,
    details: { retryable: true },
  });
}

/** Provider A's answer with `statusCode`, as the AI SDK routes raise it. */
function answered(statusCode: number): GatewayError {
  return new GatewayError(
    "PROVIDER_ERROR",
    `The provider failed to process the request (status ${statusCode})`,
    {
      details: { retryable: statusCode >= 500 },
      cause: Object.assign(new Error("provider's words"), { statusCode, name: "AI_APICallError" }),
      provider: "provider-a",
    },
  );
}

function logged() {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("warn", { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { lines, logger };
}

describe("provider failure log", () => {
  it("logs one line per provider and code per window, and at its end how many it left out", () => {
    const { lines, logger } = logged();
    let now = 0;
    const timers: { at: number; run: () => void }[] = [];
    const log = createProviderFailureLog(logger, {
      windowMs: 10_000,
      now: () => now,
      schedule: (run, ms) => void timers.push({ at: now + ms, run }),
    });
    const passTo = (at: number) => {
      now = at;
      for (const timer of timers.splice(0).sort((a, b) => a.at - b.at))
        if (timer.at <= at) timer.run();
        else timers.push(timer);
    };
    log(refused(), "r1", "proxy");
    log(refused(), "r2", "proxy");
    log(refused(), "r3", "proxy");
    log(refused("provider-b"), "r4", "proxy");
    passTo(10_000);
    log(refused(), "r5", "proxy");
    // provider-a recovers: the window of r5 ends with nothing left out, and writes nothing more.
    passTo(30_000);
    expect(
      lines.map(({ msg, provider, requestId, suppressed }) => [msg, provider, requestId, suppressed]),
    ).toEqual([
      ["provider call failed", "provider-a", "r1", undefined],
      ["provider call failed", "provider-b", "r4", undefined],
      ["provider call failures suppressed", "provider-a", undefined, 2],
      ["provider call failed", "provider-a", "r5", undefined],
    ]);
    expect(lines[0]).toMatchObject({ level: "warn", code: "ECONNREFUSED", status: 502, route: "proxy" });
    expect(lines[2]).toMatchObject({ level: "warn", code: "ECONNREFUSED", windowMs: 10_000 });
  });

  it("writes the count left out when the provider recovers, with no failure after the window", () => {
    const { lines, logger } = logged();
    const closes: (() => void)[] = [];
    const log = createProviderFailureLog(logger, { now: () => 0, schedule: (run) => void closes.push(run) });
    for (const id of ["r1", "r2", "r3"]) log(refused(), id, "proxy");
    expect(lines).toHaveLength(1);
    for (const run of closes) run();
    expect(lines[1]).toMatchObject({
      msg: "provider call failures suppressed",
      provider: "provider-a",
      suppressed: 2,
    });
  });

  it("logs a failed dependency (the image vault) the same way, under its own name", () => {
    const { lines, logger } = logged();
    const closes: (() => void)[] = [];
    const log = createProviderFailureLog(logger, { now: () => 0, schedule: (run) => void closes.push(run) });
    const cause = Object.assign(new Error("EACCES: permission denied, mkdir '/data/vault/t1'"), {
      code: "EACCES",
    });
    const vaultDown = () =>
      new GatewayError("SERVICE_UNAVAILABLE", "The image vault could not store the generated images", {
        cause,
        dependency: "vault",
        details: { retryable: true },
      });
    for (const id of ["r1", "r2"]) log(vaultDown(), id, "/v1/image");
    log(refused(), "r3", "proxy");
    for (const run of closes) run();
    expect(lines.map(({ msg, provider, dependency }) => [msg, provider, dependency])).toEqual([
      ["vault call failed", undefined, "vault"],
      ["provider call failed", "provider-a", undefined],
      ["vault call failures suppressed", undefined, "vault"],
    ]);
    expect(lines[0]).toMatchObject({
      code: "EACCES",
      cause: "EACCES: permission denied, mkdir '/data/vault/t1'",
      status: 503,
      requestId: "r1",
    });
  });

  it("leaves a newer window be when an older window's timer runs late", () => {
    const { lines, logger } = logged();
    let now = 0;
    const closes: (() => void)[] = [];
    const log = createProviderFailureLog(logger, {
      windowMs: 10,
      now: () => now,
      schedule: (run) => void closes.push(run),
    });
    log(refused(), "r1", "proxy");
    now = 20; // the first timer has not run: this failure closes that window and opens one
    log(refused(), "r2", "proxy");
    log(refused(), "r3", "proxy");
    closes[0]?.(); // the late first timer
    log(refused(), "r4", "proxy");
    closes[1]?.();
    expect(lines.map(({ requestId, suppressed }) => requestId ?? suppressed)).toEqual(["r1", "r2", 2]);
  });

  it("writes what each window left out when more than 200 are open at once and they all close", () => {
    const { lines, logger } = logged();
    const log = createProviderFailureLog(logger, { now: () => 0, schedule: () => {} });
    const failing = (code: string) => {
      const cause = Object.assign(new Error(code), { code });
      return new GatewayError("PROVIDER_ERROR", "The provider could not be reached", {
        cause,
        provider: "provider-a",
        details: { retryable: true },
      });
    };
    for (let index = 0; index < 200; index++) {
      log(failing(`E${index}`), "r", "proxy");
      log(failing(`E${index}`), "r", "proxy"); // left out
    }
    log(failing("E200"), "r", "proxy");
    const suppressed = lines.filter((line) => line.msg === "provider call failures suppressed");
    // Before, the 200 windows were dropped with their counts unwritten.
    expect(suppressed).toHaveLength(200);
    expect(suppressed.every((line) => line.suppressed === 1)).toBe(true);
  });

  it("ignores an error that names no provider", () => {
    const { lines, logger } = logged();
    createProviderFailureLog(logger)(clientDisconnected(), "r", "x");
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

  // A validation error quotes the provider's whole answer, which the query cut reads before the
  // quote is cut: a pattern tried at every word start (or every `://`) and run to the text's end
  // was quadratic in its length (~1.5 s of the event loop for 100,000 characters of `a.://`). The
  // backtracking is inside V8's regular expressions, where only a clock sees it: answers 16 times as
  // long against each other, the same code both times, where linear reading takes about 16 times as
  // long and quadratic 256 (slowdown-at-sixteen-times.ts). The speed is the benchmark's to watch.
  it("cuts queries in a long message made to make the URL pattern backtrack, in linear time", () => {
    const messages = (size: number) => {
      const answer = "a.://".repeat(size);
      const validation = Object.assign(new Error(`Type validation failed: Value: ${answer}`), {
        name: "AI_TypeValidationError",
      });
      return { answer, validation, plain: new Error(`${"x://y ".repeat(5)}${answer}`) };
    };
    const bySize = new Map([500, 8000].map((size) => [size, messages(size)]));
    const cutAll = (size: number) => {
      const { answer, validation, plain } = bySize.get(size) ?? messages(size);
      expect(providerFailureFacts("provider-a", validation).cause).toBe(
        "Type validation failed: Value: [cut]",
      );
      expect(providerFailureFacts("provider-a", plain).cause).toBe(
        `${"x://y ".repeat(5)}${answer}`.slice(0, 300),
      );
    };
    const slowdown = slowdownAtSixteenTimes(cutAll, 500);
    expect(slowdown, `16 times the answer took ${slowdown.toFixed(1)} times as long`).toBeLessThan(64);
    expect(providerFailureFacts("provider-a", new Error("a b=https://h/x?key=k c#d e")).cause).toBe(
      "a b=https://h/x?[cut] c#d e",
    );
  });

  it("names fetch's refusal of a WHATWG bad port (FETCH_BAD_PORT), which undici gives no code", async () => {
    const { fetch } = await import("undici");
    const refused = await fetch("http://127.0.0.1:6000/v1/responses").catch((error: unknown) => error);
    expect(providerFailureFacts("provider-a", refused)).toEqual({
      provider: "provider-a",
      code: "FETCH_BAD_PORT",
      cause: "bad port",
    });
    // The AI SDK puts its own error in place of fetch's, over the same cause.
    const wrapped = Object.assign(
      new Error("Cannot connect to API: bad port", { cause: (refused as Error).cause }),
      { name: "AI_APICallError" },
    );
    expect(providerFailureFacts("provider-a", wrapped).code).toBe("FETCH_BAD_PORT");
    // Only fetch's own network error: another error that says so keeps its name.
    expect(providerFailureFacts("provider-a", new Error("bad port")).code).toBe("Error");
  });

  it("cuts the provider's text that a parse or validation error quotes (an echoed key, the user's content)", () => {
    let parseError: unknown;
    try {
      JSON.parse('{"echo": sk-proj-secret-key-0123456789}');
    } catch (error) {
      parseError = error;
    }
    const invalidAnswer = new Error("Invalid JSON response", { cause: parseError });
    expect(providerFailureFacts("provider-a", invalidAnswer)).toEqual({
      provider: "provider-a",
      code: "SyntaxError",
      cause: "Unexpected token 's', [text cut]",
    });
    const jsonParse = Object.assign(
      new Error(
        'JSON parsing failed: Text: {"echo":"sk-proj-secret-key"} oops.\nError message: Unexpected token',
      ),
      { name: "AI_JSONParseError" },
    );
    const typeValidation = Object.assign(
      new Error('Type validation failed: Value: {"echo":"sk-proj-secret-key"}'),
      { name: "AI_TypeValidationError" },
    );
    expect(providerFailureFacts("provider-a", jsonParse).cause).toBe(
      "JSON parsing failed: Text: [cut].\nError message: Unexpected token",
    );
    expect(providerFailureFacts("provider-a", typeValidation).cause).toBe(
      "Type validation failed: Value: [cut]",
    );
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

  it("keeps a window per status the provider answered, so its 401 is not left out behind its 429s", () => {
    const { lines, logger } = logged();
    const closes: (() => void)[] = [];
    const log = createProviderFailureLog(logger, { now: () => 0, schedule: (run) => void closes.push(run) });
    for (const [status, id] of [
      [429, "r1"],
      [429, "r2"],
      [401, "r3"],
      [401, "r4"],
      [429, "r5"],
    ] as const)
      log(answered(status), id, "/v1/text");
    for (const run of closes) run();
    expect(
      lines.map(({ msg, providerStatus, requestId, suppressed }) => [
        msg,
        providerStatus,
        requestId,
        suppressed,
      ]),
    ).toEqual([
      ["provider call failed", 429, "r1", undefined],
      ["provider call failed", 401, "r3", undefined],
      ["provider call failures suppressed", 429, undefined, 2],
      ["provider call failures suppressed", 401, undefined, 1],
    ]);
  });

  it("names the project of a call the provider refused, with a window per project, as its key is the project's", () => {
    const { lines, logger } = logged();
    const closes: (() => void)[] = [];
    const log = createProviderFailureLog(logger, { now: () => 0, schedule: (run) => void closes.push(run) });
    log(answered(401), "r1", "/v1/text", "prj_one");
    log(answered(401), "r2", "/v1/text", "prj_one");
    // Another project's key refused: its own line, not counted into the first project's window.
    log(answered(401), "r3", "/v1/text", "prj_two");
    // The provider's own failure is one window for every project; its line names the request's.
    log(answered(503), "r4", "/v1/text", "prj_one");
    log(answered(503), "r5", "/v1/text", "prj_two");
    log(refused(), "r6", "proxy");
    for (const run of closes) run();
    expect(
      lines.map(({ msg, providerStatus, projectId, requestId, suppressed }) => [
        msg,
        providerStatus,
        projectId,
        requestId,
        suppressed,
      ]),
    ).toEqual([
      ["provider call failed", 401, "prj_one", "r1", undefined],
      ["provider call failed", 401, "prj_two", "r3", undefined],
      ["provider call failed", 503, "prj_one", "r4", undefined],
      ["provider call failed", undefined, undefined, "r6", undefined],
      ["provider call failures suppressed", 401, "prj_one", undefined, 1],
      ["provider call failures suppressed", 503, undefined, undefined, 1],
    ]);
  });

  it("names the kind of error the provider answered, a word of its error body and never its message", () => {
    const answered = (statusCode: number, data: unknown) =>
      Object.assign(new Error("the provider's words: sk-abc"), { statusCode, data, name: "AI_APICallError" });
    const kind = (statusCode: number, data: unknown) =>
      providerFailureFacts("provider-x", answered(statusCode, data)).providerError;
    expect(
      kind(429, { error: { message: "m", type: "insufficient_quota", code: "insufficient_quota" } }),
    ).toBe("insufficient_quota");
    expect(kind(429, { error: { message: "m", type: "rate_limit_exceeded", code: null } })).toBe(
      "rate_limit_exceeded",
    );
    expect(kind(529, { type: "error", error: { type: "overloaded_error", message: "Overloaded" } })).toBe(
      "overloaded_error",
    );
    expect(kind(429, { error: { code: 429, message: "m", status: "RESOURCE_EXHAUSTED" } })).toBe(
      "RESOURCE_EXHAUSTED",
    );
    // Not a word: free text is no kind, and is never logged.
    expect(kind(500, { error: { code: "Incorrect API key sk-abc", message: "m" } })).toBeUndefined();
    expect(kind(500, { error: "boom" })).toBeUndefined();
    // Nor a key a server quotes as its code: an enumerated name has no digits, a key does.
    expect(kind(401, { error: { code: "AIzaSyD4kX9e2Qm7TzA1bC3dE5fG7hJ9kL0mN1o" } })).toBeUndefined();
    expect(kind(401, { error: { status: "k3y_0f_4_c0mp4t1bl3_s3rv3r" } })).toBeUndefined();
    expect(kind(500, undefined)).toBeUndefined();
    expect(
      JSON.stringify(providerFailureFacts("provider-x", answered(401, { error: { message: "sk-abc" } }))),
    ).not.toContain("sk-abc");
  });
});

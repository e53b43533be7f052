import { describe, expect, it } from "vitest";
import { charactersScanned } from "../../test/support/scan-work.js";
import { safeProviderPath } from "../providers/provider-adapter.js";
import type { ProviderId } from "../providers/provider-id.js";
import type { ProxyAllowListRules } from "../storage/project-repository.js";
import {
  compileProxyAllowList,
  notInProxyAllowList,
  proxyAllowListBounds,
  proxyAllowListCache,
  proxyAllowListProblems,
} from "./proxy-allow-list.js";

/** Whether `rules` let `method path` through at `provider`, the path as the proxy holds it. */
function allows(rules: ProxyAllowListRules, provider: ProviderId, method: string, path: string): boolean {
  const safe = safeProviderPath(path);
  if (safe === null) throw new Error(`the proxy refuses ${path} before any allow-list`);
  return compileProxyAllowList(rules).allows(provider, method, safe);
}

const a = (method: string, path: string, ...rules: string[]) =>
  allows({ "provider-a": rules }, "provider-a", method, path);

describe("proxy allow-list matching", () => {
  it("allows nothing of a provider the list leaves out or lists empty", () => {
    const rules = { "provider-a": ["**"], "provider-b": [] };
    expect(allows(rules, "provider-a", "POST", "chat/completions")).toBe(true);
    expect(allows(rules, "provider-b", "POST", "v1/messages")).toBe(false);
    expect(allows(rules, "provider-c", "POST", "v1beta/models/gemini-2.5-flash:generateContent")).toBe(false);
    expect(allows({}, "provider-a", "POST", "chat/completions")).toBe(false);
  });

  it("matches a literal path exactly, with its method, case-sensitively", () => {
    const rule = "POST chat/completions";
    expect(a("POST", "chat/completions", rule)).toBe(true);
    expect(a("GET", "chat/completions", rule)).toBe(false);
    expect(a("DELETE", "chat/completions", rule)).toBe(false);
    expect(a("POST", "chat/completions/chatcmpl_1", rule)).toBe(false);
    expect(a("POST", "chat/completion", rule)).toBe(false);
    expect(a("POST", "chat", rule)).toBe(false);
    expect(a("POST", "Chat/Completions", rule)).toBe(false);
  });

  it("compares methods as sent: a lower-case method matches no rule's", () => {
    expect(a("post", "chat/completions", "POST chat/completions")).toBe(false);
    expect(a("post", "chat/completions", "chat/completions")).toBe(true);
  });

  it("takes any method for a rule without one, and HEAD for a GET rule only", () => {
    for (const method of ["GET", "HEAD", "POST", "DELETE", "OPTIONS"])
      expect(a(method, "files", "files")).toBe(true);
    expect(a("HEAD", "responses/resp_1", "GET responses/*")).toBe(true);
    expect(a("HEAD", "chat/completions", "POST chat/completions")).toBe(false);
    expect(a("GET", "responses/resp_1", "HEAD responses/*")).toBe(false);
  });

  it("lets * stand for any characters of one segment, none included, never a slash", () => {
    const rule = "GET responses/*";
    expect(a("GET", "responses/resp_123", rule)).toBe(true);
    expect(a("GET", "responses/resp_123/input_items", rule)).toBe(false);
    expect(a("GET", "responses", rule)).toBe(false);
    expect(a("GET", "files", "GET files*")).toBe(true);
    expect(a("GET", "files_x", "GET files*")).toBe(true);
    expect(a("GET", "fine_tuning/jobs", "GET *")).toBe(false);
  });

  it("matches * between literal parts of a segment", () => {
    const rules = { "provider-c": ["POST models/*:generateContent"] };
    const c = (path: string) => allows(rules, "provider-c", "POST", path);
    expect(c("models/gemini-2.5-flash:generateContent")).toBe(true);
    expect(c("models/gemini-2.5-flash:streamGenerateContent")).toBe(false);
    expect(c("models/gemini-2.5-flash:generateContentX")).toBe(false);
    expect(c("models/:generateContent")).toBe(true);
    expect(c("tunedModels/x:generateContent")).toBe(false);
    expect(a("GET", "abc", "a*b*c")).toBe(true);
    expect(a("GET", "aXbYc", "a*b*c")).toBe(true);
    expect(a("GET", "acb", "a*b*c")).toBe(false);
    expect(a("GET", "abab", "*ab*ab")).toBe(true);
    expect(a("GET", "a", "a*a")).toBe(false);
    // A middle part may not overlap the last: `a*b*b` needs two b's.
    expect(a("GET", "ab", "a*b*b")).toBe(false);
    expect(a("GET", "abb", "a*b*b")).toBe(true);
  });

  // Each middle part is searched for once, from where the one before it ended: no backtracking. The
  // work is counted, not timed: the characters the matching's searches pass over, a few for each
  // character of the path at 500 characters and at 2,000 (the longest path the proxy takes), where a backtracking matcher tries every
  // place of each `a` (exponentially many) and passes the budget within its first few tries.
  it("stays linear on a segment built to make a backtracking matcher slow", () => {
    const rule = `GET ${"*a".repeat(40)}*b*`;
    for (const length of [500, 2000]) {
      const path = "a".repeat(length);
      const budget = 10 * length;
      let allowed: boolean | undefined;
      const scanned = charactersScanned(() => {
        allowed = a("GET", path, rule);
      }, budget);
      expect(allowed).toBe(false);
      expect(scanned).toBeGreaterThan(length);
      expect(scanned).toBeLessThanOrEqual(budget);
    }
  });

  it("lets a last ** segment stand for one or more segments, and ** alone for any path", () => {
    const rule = "GET files/**";
    expect(a("GET", "files/file_1", rule)).toBe(true);
    expect(a("GET", "files/file_1/content", rule)).toBe(true);
    expect(a("GET", "files", rule)).toBe(false);
    expect(a("GET", "filesx/file_1", rule)).toBe(false);
    expect(a("DELETE", "files/file_1", rule)).toBe(false);
    expect(a("PATCH", "fine_tuning/jobs/x/cancel", "**")).toBe(true);
  });

  it("matches B's and C's paths without the version segment their SDKs add, and A's as given", () => {
    const b = { "provider-b": ["POST messages"] };
    expect(allows(b, "provider-b", "POST", "v1/messages")).toBe(true);
    expect(allows(b, "provider-b", "POST", "messages")).toBe(true);
    expect(allows(b, "provider-b", "POST", "v1/messages/batches")).toBe(false);
    // Upstream that is `/v1/v1/messages`, not the messages API.
    expect(allows(b, "provider-b", "POST", "v1/v1/messages")).toBe(false);
    const c = { "provider-c": ["POST models/*:generateContent"] };
    for (const path of [
      "v1beta/models/m:generateContent",
      "v1alpha/models/m:generateContent",
      "v1/models/m:generateContent",
      "models/m:generateContent",
    ])
      expect(allows(c, "provider-c", "POST", path)).toBe(true);
    expect(allows(c, "provider-c", "POST", "v1beta/v1beta/models/m:generateContent")).toBe(false);
    expect(a("POST", "v1/chat/completions", "POST chat/completions")).toBe(false);
  });

  it("matches the path decoded, as the provider reads it", () => {
    expect(a("POST", "chat/c%6Fmpletions", "POST chat/completions")).toBe(true);
    const c = { "provider-c": ["POST models/*:generateContent"] };
    expect(allows(c, "provider-c", "POST", "v1beta/models/m%3AgenerateContent")).toBe(true);
    expect(allows(c, "provider-c", "POST", "v1beta/models/m%3astreamGenerateContent")).toBe(false);
    // The matcher decodes on its own too, should it ever be given a path the proxy did not pass.
    expect(
      compileProxyAllowList({ "provider-a": ["GET files"] }).allows("provider-a", "GET", "f%69les"),
    ).toBe(true);
  });

  it.each([
    ["a ? decoded (%3F), which the provider takes as part of the segment", "responses/resp_1%3F"],
    ["a # decoded", "responses/resp_1%23x"],
    ["a % decoded (%25), which a server decoding again reads otherwise", "responses/resp_1%2541"],
    ["a space", "responses/resp%201"],
    ["a ; (path parameters, ..;/)", "responses/..;"],
    ["a ; decoded", "responses/x%3Bfiles"],
    ["non-ASCII", "responses/r%C3%A9sum%C3%A9"],
    ["a segment of dots", "responses/..."],
  ])("lets a path holding %s match no rule, not even **", (_what, path) => {
    expect(a("GET", path, "GET responses/*", "**")).toBe(false);
  });

  it("never sees what the proxy refuses first: encoded slashes, dot segments, empty segments", () => {
    for (const path of [
      "responses/a%2Ffiles",
      "responses/%2e%2e/files",
      "responses/..",
      "chat/completions/",
      "chat//completions",
      "responses/%252e%252e",
    ])
      expect(safeProviderPath(path)).toBeNull();
    // Given such a path anyway, the matcher refuses it too.
    const list = compileProxyAllowList({ "provider-a": ["**"] });
    for (const path of ["responses/%2e%2e", "chat/completions/", "chat//completions", "responses/%zz", ".."])
      expect(list.allows("provider-a", "GET", path)).toBe(false);
  });

  it("is given the path without its query string (the proxy keeps it apart)", () => {
    expect(a("GET", "responses/resp_1", "GET responses/*")).toBe(true);
    expect(
      compileProxyAllowList({ "provider-a": ["GET responses/*"] }).allows(
        "provider-a",
        "GET",
        "responses/r?x=1",
      ),
    ).toBe(false);
  });

  it("allows less, never more, from a stored list that is damaged", () => {
    const damaged = { "provider-a": "POST chat/completions", "provider-b": [7, "POST messages", "get x"] };
    const list = compileProxyAllowList(damaged as unknown as ProxyAllowListRules);
    expect(list.allows("provider-a", "POST", "chat/completions")).toBe(false);
    expect(list.allows("provider-b", "POST", "v1/messages")).toBe(true);
    expect(list.allows("provider-b", "POST", "x")).toBe(false);
  });

  it("compiles each list once: the same rules, read again into a new object (a reload), give the same compiled list", () => {
    const compiled = proxyAllowListCache(2);
    const rules = { "provider-a": ["POST chat/completions"] };
    expect(compiled(rules)).toBe(compiled(rules));
    expect(compiled(structuredClone(rules))).toBe(compiled(rules));
    const other = { "provider-a": ["POST embeddings"] };
    expect(compiled(other)).not.toBe(compiled(rules));
    // Past its bound, the text cache forgets the list used longest ago (the record's own stays).
    const first = compiled(rules);
    compiled({ "provider-b": ["POST messages"] });
    compiled(structuredClone(other));
    expect(compiled(structuredClone(rules))).not.toBe(first);
  });

  it("names the method, the path and the provider in its 403", () => {
    const error = notInProxyAllowList("provider-b", "POST", "v1/messages/batches");
    expect(error).toMatchObject({
      code: "FORBIDDEN",
      status: 403,
      message: "This project's proxy allow-list does not include POST v1/messages/batches on provider-b",
      details: { provider: "provider-b", method: "POST", path: "v1/messages/batches" },
    });
  });
});

describe("proxy allow-list rules", () => {
  const problems = (rules: ProxyAllowListRules) => proxyAllowListProblems(rules, (path) => `list.${path}`);

  it("accepts the rules of a chat-only app on each provider", () => {
    expect(
      problems({
        "provider-a": [
          "POST chat/completions",
          "POST responses",
          "GET responses/*",
          "POST embeddings",
          "files/**",
        ],
        "provider-b": ["POST messages", "POST messages/count_tokens"],
        "provider-c": ["POST models/*:generateContent", "POST models/*:streamGenerateContent", "**"],
      }),
    ).toEqual([]);
    expect(problems({})).toEqual([]);
    expect(problems({ "provider-a": [] })).toEqual([]);
  });

  it.each([
    ["provider-a", "post chat/completions", "has a method in lower case: write POST"],
    [
      "provider-a",
      "FETCH files",
      "names a method provider-a's proxy does not take (it takes GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS)",
    ],
    ["provider-b", "GET messages/batches", "names a method provider-b's proxy does not take (it takes POST)"],
    ["provider-a", "chat/completions POST", "must be a method, one space and a path, or a path alone"],
    ["provider-a", "POST  chat/completions", "must be a method, one space and a path, or a path alone"],
    ["provider-a", "POST chat/completions ", "must be a method, one space and a path, or a path alone"],
    ["provider-a", "", "is empty"],
    ["provider-a", "POST ", "has no path after its method"],
    [
      "provider-a",
      "/chat/completions",
      "starts with /: write the path after the provider's base URL (chat/completions)",
    ],
    ["provider-a", "GET files?limit=1", "holds a query string, which rules do not match: leave it out"],
    [
      "provider-c",
      "POST models/*%3AgenerateContent",
      "holds percent-encoding: write the path decoded, as it is matched",
    ],
    [
      "provider-a",
      "GET files#x",
      "may hold only letters, digits, / and - . _ ~ ! $ & ' ( ) * + , = : @ (* as the wildcard)",
    ],
    [
      "provider-a",
      "GET files;x",
      "may hold only letters, digits, / and - . _ ~ ! $ & ' ( ) * + , = : @ (* as the wildcard)",
    ],
    [
      "provider-a",
      "GET fichiers/é",
      "may hold only letters, digits, / and - . _ ~ ! $ & ' ( ) * + , = : @ (* as the wildcard)",
    ],
    [
      "provider-a",
      "GET files\t",
      "may hold only letters, digits, / and - . _ ~ ! $ & ' ( ) * + , = : @ (* as the wildcard)",
    ],
    [
      "provider-a",
      "chat//completions",
      "has an empty segment (a leading, doubled or trailing slash), which no proxied path has",
    ],
    [
      "provider-a",
      "chat/completions/",
      "has an empty segment (a leading, doubled or trailing slash), which no proxied path has",
    ],
    ["provider-a", "files/../models", "has a segment of dots (. or ..), which no proxied path has"],
    ["provider-a", "files/**/content", "has ** other than as its last segment (files/**) or alone (**)"],
    ["provider-a", "files**", "has ** other than as its last segment (files/**) or alone (**)"],
    [
      "provider-b",
      "POST v1/messages",
      "starts with the version segment v1/: rules match the path without it (messages matches v1/messages)",
    ],
    [
      "provider-c",
      "POST v1beta/models/*:generateContent",
      "starts with the version segment v1beta/: rules match the path without it (models/*:generateContent matches v1beta/models/x:generateContent)",
    ],
    [
      "provider-c",
      "POST v1alpha/models/*:generateContent",
      "starts with the version segment v1alpha/: rules match the path without it (models/*:generateContent matches v1alpha/models/x:generateContent)",
    ],
    [
      "provider-c",
      "POST v1/models/*:generateContent",
      "starts with the version segment v1/: rules match the path without it (models/*:generateContent matches v1/models/x:generateContent)",
    ],
    [
      "provider-a",
      "POST v1/chat/completions",
      "starts with v1/: provider-a's base URL already ends in /v1, so write the path after it (chat/completions)",
    ],
    [
      "provider-a",
      `GET ${"x".repeat(proxyAllowListBounds.ruleLength)}`,
      `is longer than ${proxyAllowListBounds.ruleLength} characters`,
    ],
  ] as const)("refuses a %s rule %j: %s", (provider, rule, reason) => {
    expect(problems({ [provider]: ["POST embeddings", rule] })).toEqual([
      `list.${provider}.1: ${JSON.stringify(rule)} ${reason}`,
    ]);
  });

  it("bounds the rules of a provider, and names every refused rule of every provider", () => {
    const many = Array.from(
      { length: proxyAllowListBounds.rulesPerProvider + 1 },
      (_, index) => `GET files/f${index}`,
    );
    expect(problems({ "provider-a": many })).toEqual([
      `list.provider-a: holds ${many.length} rules; at most ${proxyAllowListBounds.rulesPerProvider}`,
    ]);
    expect(problems({ "provider-a": many.slice(1) })).toEqual([]);
    expect(problems({ "provider-a": ["get files"], "provider-c": ["GET files", "POST files"] })).toEqual([
      'list.provider-a.0: "get files" has a method in lower case: write GET',
      'list.provider-c.0: "GET files" names a method provider-c\'s proxy does not take (it takes POST)',
    ]);
  });
});

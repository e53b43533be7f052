import { describe, expect, it } from "vitest";
import { clientResponseHeaders, upstreamQuery, upstreamRequestHeaders } from "./header-policy.js";

/** A raw header list as undici hands it over: names as sent, values as latin1 bytes. */
const raw = (pairs: Array<[string, string]>): Buffer[] =>
  pairs.flatMap(([name, value]) => [Buffer.from(name, "latin1"), Buffer.from(value, "latin1")]);

describe("header policy", () => {
  it("drops the headers the client's Connection field names, which are hop-by-hop too", () => {
    const headers = upstreamRequestHeaders(
      {
        connection: "keep-alive, OpenAI-Beta, x-stainless-retry-count",
        "openai-beta": "assistants=v2",
        "x-stainless-retry-count": "0",
        "x-stainless-lang": "js",
      },
      true,
    );
    expect(headers).toEqual({ "x-stainless-lang": "js", "accept-encoding": "identity" });
  });

  it("keeps the query string byte for byte but for the provider's key parameter, however spelled", () => {
    expect(upstreamQuery("alt=sse&key=CLIENT", "key")).toBe("alt=sse");
    expect(upstreamQuery("k%65y=CLIENT&alt=json&key", "key")).toBe("alt=json");
    expect(upstreamQuery("monkey=1&keys=2&q=%E2%9C%93&bad=%E0%A4%A", "key")).toBe(
      "monkey=1&keys=2&q=%E2%9C%93&bad=%E0%A4%A",
    );
    expect(upstreamQuery("key=CLIENT", undefined)).toBe("key=CLIENT");
    expect(upstreamQuery("", "key")).toBe("");
  });

  it("forwards provider feature headers and drops credentials, cookies, hop-by-hop and Sluice headers", () => {
    const headers = upstreamRequestHeaders(
      {
        "content-type": "application/json",
        accept: "text/event-stream",
        "anthropic-beta": "prompt-caching-2024-07-31",
        "anthropic-version": "2020-01-01",
        "openai-beta": "assistants=v2",
        "x-stainless-lang": "js",
        "x-client-request-id": "trace-123",
        // The account billed is the key's, not the app's to pick.
        "openai-organization": "org-other",
        "openai-project": "proj_other",
        "x-goog-user-project": "other-project",
        authorization: "Bearer sk_sluice_x.y",
        "x-api-key": "secret",
        "x-goog-api-key": "secret",
        "x-sluice-test-key": "tk",
        "x-ai-key": "partial",
        "x-device-token": "device",
        "x-project-id": "p",
        cookie: "a=b",
        connection: "keep-alive",
        "transfer-encoding": "chunked",
        host: "sluice.local",
        "x-forwarded-for": "1.2.3.4",
        "accept-encoding": "gzip, br",
      },
      true,
    );
    expect(headers).toEqual({
      "content-type": "application/json",
      accept: "text/event-stream",
      "anthropic-beta": "prompt-caching-2024-07-31",
      "openai-beta": "assistants=v2",
      "x-stainless-lang": "js",
      "x-client-request-id": "trace-123",
      "accept-encoding": "identity",
    });
  });

  it("forwards the conditional headers and provider C's server deadline, as sent", () => {
    const conditional = {
      "if-none-match": 'W/"v1", "v2"',
      "if-modified-since": "Tue, 01 Jul 2025 10:00:00 GMT",
      "if-match": '"v3"',
      "if-unmodified-since": "Wed, 02 Jul 2025 10:00:00 GMT",
      // What @google/genai sends when `httpOptions.timeout` is set: the deadline, in seconds.
      "x-server-timeout": "30",
    };
    expect(upstreamRequestHeaders(conditional, true)).toEqual({
      ...conditional,
      "accept-encoding": "identity",
    });
  });

  it("forwards the client's cache directives, not HTTP/1.0's pragma that Node's fetch sends beside them", () => {
    expect(upstreamRequestHeaders({ "cache-control": "no-cache", pragma: "no-cache" }, true)).toEqual({
      "cache-control": "no-cache",
      "accept-encoding": "identity",
    });
  });

  it("forwards range and if-range only with a call whose answer is not metered", () => {
    const ranged = { accept: "application/binary", range: "bytes=100-", "if-range": '"file-v1"' };
    expect(upstreamRequestHeaders(ranged, false)).toEqual({ ...ranged, "accept-encoding": "identity" });
    expect(upstreamRequestHeaders(ranged, true)).toEqual({
      accept: "application/binary",
      "accept-encoding": "identity",
    });
    // Hop-by-hop when the client's Connection names them, metered or not.
    expect(upstreamRequestHeaders({ ...ranged, connection: "range, if-range" }, false)).toEqual({
      accept: "application/binary",
      "accept-encoding": "identity",
    });
  });

  it("drops the SDKs' account and billing selectors, trace context, upload and Vertex headers", () => {
    const headers = upstreamRequestHeaders(
      {
        "anthropic-workspace-id": "wrkspc_other",
        "anthropic-user-profile-id": "uprof_other",
        "anthropic-worker-id": "worker-1",
        traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        tracestate: "vendor=x",
        baggage: "user=alice",
        "x-goog-upload-protocol": "resumable",
        "x-goog-upload-command": "start",
        "x-vertex-ai-llm-request-type": "shared",
        "x-goog-api-client": "google-genai-sdk/3.3.0",
      },
      false,
    );
    expect(headers).toEqual({ "accept-encoding": "identity" });
  });

  it("passes provider response headers except hop-by-hop ones, cookies, CORS, origin statements, account ids and those named by Connection", () => {
    const head = clientResponseHeaders(
      raw([
        ["Content-Type", "text/event-stream"],
        ["x-ratelimit-remaining-requests", "99"],
        ["request-id", "req_1"],
        ["Connection", "keep-alive, X-Private"],
        ["x-private", "1"],
        ["Keep-Alive", "timeout=5"],
        ["transfer-encoding", "chunked"],
        ["set-cookie", "__cf_bm=1"],
        // The provider's origin's, not Sluice's.
        ["Strict-Transport-Security", "max-age=31536000; includeSubDomains; preload"],
        ["alt-svc", 'h3=":443"; ma=86400'],
        // The operator's account, not the app's business.
        ["openai-organization", "user-abc123"],
        ["OpenAI-Project", "proj_abc"],
        ["anthropic-organization-id", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"],
        // Without Sluice's own CORS headers too: the gateway decides who may call it.
        ["Access-Control-Allow-Origin", "https://evil.example"],
        ["access-control-expose-headers", "*"],
        ["vary", "origin"],
        ["Vary", "accept-encoding"],
        ["x-latin1", "caf\u00e9"],
      ]),
    );
    expect(head.contentType).toBe("text/event-stream");
    expect(head.headers).toEqual([
      "content-type",
      "text/event-stream",
      "x-ratelimit-remaining-requests",
      "99",
      "request-id",
      "req_1",
      "vary",
      "origin",
      "vary",
      "accept-encoding",
      "x-latin1",
      "caf\u00e9",
    ]);
  });

  it("drops the headers each of several Connection lines names: they are one list (RFC 9110 sections 5.3, 7.6.1)", () => {
    const head = clientResponseHeaders(
      raw([
        ["Connection", "X-Hop-First"],
        ["x-hop-first", "1"],
        ["connection", "keep-alive"],
        ["x-hop-last", "2"],
        ["Connection", "x-hop-last"],
        ["x-kept", "3"],
      ]),
    );
    expect(head.headers).toEqual(["x-kept", "3"]);
  });

  it("reports a transfer coding other than chunked alone, which undici leaves on the body, and never passes it on", () => {
    const coding = (...values: string[]) =>
      clientResponseHeaders(raw(values.map((value) => ["Transfer-Encoding", value]))).transferCoding;
    expect(coding()).toBe("");
    expect(coding("chunked")).toBe("");
    expect(coding(" Chunked ")).toBe("");
    expect(coding("gzip, chunked")).toBe("gzip, chunked");
    expect(coding("gzip", "chunked")).toBe("gzip, chunked");
    expect(coding("chunked, chunked")).toBe("chunked, chunked");
    expect(coding("identity")).toBe("identity");
    expect(clientResponseHeaders(raw([["transfer-encoding", "gzip, chunked"]])).headers).toEqual([]);
  });

  it("reports the provider's content-encoding (every field of it, in order) and passes it on unchanged", () => {
    expect(clientResponseHeaders(raw([["content-type", "application/json"]])).contentEncoding).toBe("");
    const head = clientResponseHeaders(
      raw([
        ["Content-Encoding", "gzip"],
        ["content-type", "application/json"],
        ["content-encoding", "br"],
      ]),
    );
    expect(head.contentEncoding).toBe("gzip, br");
    expect(head.headers).toEqual([
      "content-encoding",
      "gzip",
      "content-type",
      "application/json",
      "content-encoding",
      "br",
    ]);
  });

  it("adds Sluice's vary beside the provider's, so a cache keys the answer on the CORS origin too", () => {
    const own = { vary: "Origin", "access-control-allow-origin": "https://app.example" };
    expect(clientResponseHeaders(raw([["Vary", "Accept-Encoding"]]), own).headers).toEqual([
      "vary",
      "Accept-Encoding",
      "vary",
      "Origin",
      "access-control-allow-origin",
      "https://app.example",
    ]);
  });

  it("adds Sluice's own headers; the provider's x-request-id stays and Sluice's moves beside it", () => {
    const own = { "x-request-id": "req_sluice", ratelimit: '"project";r=9;t=60' };
    expect(clientResponseHeaders(raw([["content-type", "application/json"]]), own).headers).toEqual([
      "content-type",
      "application/json",
      "x-request-id",
      "req_sluice",
      "ratelimit",
      '"project";r=9;t=60',
    ]);
    expect(
      clientResponseHeaders(
        raw([
          ["X-Request-Id", "req_provider"],
          ["ratelimit", "provider's"],
        ]),
        own,
      ).headers,
    ).toEqual([
      "x-request-id",
      "req_provider",
      "ratelimit",
      "provider's",
      "x-sluice-request-id",
      "req_sluice",
    ]);
  });

  it("drops the provider's own x-sluice-request-id: that name holds Sluice's id alone", () => {
    const own = { "x-request-id": "req_sluice" };
    const spoofed: [string, string] = ["X-Sluice-Request-Id", "req_another_row"];
    expect(clientResponseHeaders(raw([["x-request-id", "req_provider"], spoofed]), own).headers).toEqual([
      "x-request-id",
      "req_provider",
      "x-sluice-request-id",
      "req_sluice",
    ]);
    expect(clientResponseHeaders(raw([spoofed]), own).headers).toEqual(["x-request-id", "req_sluice"]);
  });
});

describe("clientResponseHeaders against a straightforward reading, on random header lists", () => {
  /** What clientResponseHeaders gives, written plainly: every name decoded and lower-cased. */
  function reference(raw: readonly (Buffer | string)[], own: Record<string, string>, key: string) {
    const text = (value: Buffer | string) => (typeof value === "string" ? value : value.toString("latin1"));
    const dropped = new Set([
      "connection",
      "keep-alive",
      "proxy-connection",
      "transfer-encoding",
      "te",
      "trailer",
    ]);
    for (const name of [
      "upgrade",
      "proxy-authenticate",
      "set-cookie",
      "strict-transport-security",
      "alt-svc",
    ])
      dropped.add(name);
    for (const name of ["openai-organization", "openai-project", "anthropic-organization-id"])
      dropped.add(name);
    dropped.add("x-sluice-request-id");
    const pairs: [string, string][] = [];
    let contentType = "";
    const encodings: string[] = [];
    const connection: string[] = [];
    const transfer: string[] = [];
    for (let index = 0; index + 1 < raw.length; index += 2) {
      const name = text(raw[index] as Buffer | string).toLowerCase();
      const value = text(raw[index + 1] as Buffer | string);
      if (name === "connection") connection.push(value);
      // The codings are quoted in a refusal's log line: masked as a value is.
      if (name === "transfer-encoding")
        transfer.push(key === "" ? value : value.replaceAll(key, "[redacted]"));
      if (dropped.has(name) || name.startsWith("access-control-")) continue;
      if (key !== "" && name.includes(key.toLowerCase())) continue;
      const masked = key === "" ? value : value.replaceAll(key, "[redacted]");
      if (name === "content-type" && contentType === "") contentType = masked;
      else if (name === "content-encoding") {
        const codings = masked
          .split(",")
          .map((coding) => coding.trim())
          .filter((coding) => coding !== "" && coding.toLowerCase() !== "identity");
        const coding = /identity/i.test(masked) ? codings.join(", ") : masked;
        if (coding !== "") encodings.push(coding);
      }
      pairs.push([name, masked]);
    }
    const listed = connection.join(",").toLowerCase();
    const kept =
      listed === "" || listed === "keep-alive" || listed === "close"
        ? pairs
        : pairs.filter(([name]) => !listed.split(",").some((option) => option.trim() === name));
    const headers = kept.flat();
    for (const [name, value] of Object.entries(own)) {
      if (!kept.some(([provider]) => provider === name) || name === "vary") headers.push(name, value);
      else if (name === "x-request-id") headers.push("x-sluice-request-id", value);
    }
    const codings = transfer
      .join(",")
      .split(",")
      .map((coding) => coding.trim().toLowerCase())
      .filter((coding) => coding !== "");
    const transferCoding = codings.length === 1 && codings[0] === "chunked" ? "" : codings.join(", ");
    return { headers, contentType, contentEncoding: encodings.join(", "), transferCoding };
  }

  it("gives the same headers, content type and codings", () => {
    let seed = 2026;
    const random = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed / 0x7fffffff;
    };
    const pick = <T>(values: readonly T[]) => values[Math.floor(random() * values.length)] as T;
    const key = "sk-provider-key-123";
    const names = [
      "content-type",
      "content-length",
      "content-encoding",
      "transfer-encoding",
      "date",
      "connection",
      "keep-alive",
      "vary",
      "x-request-id",
      "x-sluice-request-id",
      "request-id",
      "openai-processing-ms",
      "openai-organization",
      "x-ratelimit-limit-requests",
      "x-ratelimit-reset-requests",
      "x-ratelimit-reset-tokens",
      "strict-transport-security",
      "set-cookie",
      "access-control-allow-origin",
      "access-control-expose-headers",
      "te",
      "x-custom",
      "x-fake-upstream",
      // A name that quotes the key (names are read lower-cased).
      `x-echo-${key}`,
      key.toUpperCase(),
      // Like a common name but one byte off (in a letter, in the bit case folding sets, past ASCII).
      "content-typf",
      "content\u000dtype",
      "conTent-tyPf",
      "content-typ\u00c9",
      "d\u00c4te",
      "dat",
      "dates",
      "",
    ];
    const values = [
      "application/json",
      "text/event-stream; charset=utf-8",
      "keep-alive",
      "close",
      "Keep-Alive, X-Custom",
      "x-ratelimit-limit-requests, DATE",
      "gzip",
      "identity",
      "gzip, identity, br",
      "chunked",
      "gzip, chunked",
      "Chunked",
      `Bearer ${key}`,
      `${key}${key}`,
      "",
      "caf\u00e9",
    ];
    const mixedCase = (name: string) =>
      [...name].map((letter) => (random() < 0.3 ? letter.toUpperCase() : letter)).join("");
    const ownNames = ["x-request-id", "ratelimit", "vary", "access-control-allow-origin", "content-type"];
    for (let round = 0; round < 3000; round++) {
      const pairs: [string, string][] = [];
      for (let count = Math.floor(random() * 10); count > 0; count--)
        pairs.push([random() < 0.5 ? mixedCase(pick(names)) : pick(names), pick(values)]);
      const raw = pairs.flatMap(([name, value]): (Buffer | string)[] =>
        random() < 0.9 ? [Buffer.from(name, "latin1"), Buffer.from(value, "latin1")] : [name, value],
      );
      const own: Record<string, string> = {};
      for (const name of ownNames) if (random() < 0.5) own[name] = `own-${name}`;
      const providerKey = random() < 0.7 ? key : "";
      const context = JSON.stringify({ pairs, own, providerKey });
      expect(clientResponseHeaders(raw, own, providerKey), context).toEqual(reference(raw, own, providerKey));
    }
  });
});

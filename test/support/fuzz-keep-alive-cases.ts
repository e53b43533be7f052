import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import type { Random } from "./fuzz-inputs.js";
import type { FuzzRequest } from "./keep-alive-lane.js";
import { adminToken } from "./test-gateway.js";

/**
 * The seeded requests of test/e2e/fuzz-keep-alive-storm.test.ts: every route family with odd
 * methods, paths, credentials, content types and codings (real gzip, br and deflate bodies, cut,
 * garbage, over the cap once decoded), bodies (empty, cut, deep, repeated keys, wrong types, not
 * UTF-8, over the cap, chunked, behind `Expect: 100-continue`), CORS preflights, and raw heads
 * Node's parser refuses or hands over (CONNECT). The same seed gives the same requests.
 */

export const fuzzMaxBodyBytes = 32_768;

export interface KeepAliveSecrets {
  projectId: string;
  bearer: Record<"provider-a" | "provider-b" | "provider-c", string>;
  partial: Record<string, string>;
  testKey: string;
}

const families = [
  "proxy-a",
  "proxy-a-compressed",
  "proxy-b",
  "proxy-c",
  "models",
  "structured",
  "image",
  "admin",
  "vault",
  "health",
  "metrics",
  "unknown",
  "preflight",
  "raw",
] as const;

export function generateRequest(
  random: Random,
  index: number,
  s: KeepAliveSecrets,
  port: number,
): FuzzRequest {
  const family = random.pick(families);
  const note: string[] = [family];
  const headers: Array<[string, string]> = [
    ["host", `127.0.0.1:${port}`],
    ["x-client-request-id", `fz-${index}`],
  ];
  let method = "POST";
  let target = "/";
  let body: Buffer = Buffer.alloc(0);
  let chunked = false;
  let expectContinue = false;
  let noLength = false;
  const json = (value: unknown) => Buffer.from(JSON.stringify(value));
  const auth = (provider: "provider-a" | "provider-b" | "provider-c") => {
    const choice = random.int(10);
    if (choice < 6) headers.push(["authorization", `Bearer ${s.bearer[provider]}`]);
    else if (choice === 6) {
      note.push("auth twice");
      headers.push(
        ["authorization", `Bearer ${s.bearer[provider]}`],
        ["authorization", `Bearer ${s.bearer[provider]}`],
      );
    } else if (choice === 7) {
      note.push("x-api-key + bearer");
      headers.push(["authorization", `Bearer ${s.bearer[provider]}`], ["x-api-key", s.bearer[provider]]);
    } else if (choice === 8) {
      note.push("huge auth");
      headers.push([
        "authorization",
        `Bearer ${s.bearer[provider]}${"x".repeat(random.pick([100, 5000, 15000]))}`,
      ]);
    } else note.push("no auth");
  };
  switch (family) {
    case "proxy-a": {
      auth("provider-a");
      const path = random.pick([
        "chat/completions",
        "embeddings",
        "responses",
        "files",
        "models/gpt-4.1-mini",
        "images/generations",
        "audio/speech",
        "chat/completions/",
        "chat//completions",
        "../admin/v1/projects",
        "%2e%2e/%2e%2e/health",
        "chat%2Fcompletions",
        "chat/completions%00",
      ]);
      method = random.pick(["POST", "POST", "POST", "GET", "DELETE", "post", "PUT", "HEAD"]);
      target = `/v1/provider-a/${s.projectId}/${path}`;
      body = json({
        model: "gpt-4.1-mini",
        messages: [{ role: "user", content: "Hi" }],
        stream: random.chance(0.3),
        ...(random.chance(0.3)
          ? { stream_options: { include_usage: random.pick([true, false, "x", null]) } }
          : {}),
      });
      note.push(method, path);
      break;
    }
    case "proxy-a-compressed": {
      auth("provider-a");
      method = "POST";
      target = `/v1/provider-a/${s.projectId}/${random.pick(["chat/completions", "completions", "embeddings"])}`;
      const plain = Buffer.from(
        JSON.stringify({
          model: "gpt-4.1-mini",
          messages: [{ role: "user", content: "Hi" }],
          stream: random.chance(0.3),
        }),
      );
      const kind = random.pick([
        "gzip",
        "br",
        "deflate",
        "gzip-truncated",
        "gzip-garbage",
        "br-garbage",
        "gzip-bomb",
        "br-bomb",
        "gzip-notjson",
        "gzip-trailing",
        "double-gzip",
        "gzip,br",
        "x-gzip",
        "zstd",
        "GZIP",
        "gzip-empty",
        "gzip-invalid-utf8",
      ]);
      note.push(`coding ${kind}`, target);
      const bomb = Buffer.from(
        `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"${"a".repeat(fuzzMaxBodyBytes * 40)}"}]}`,
      );
      let coding = "gzip";
      switch (kind) {
        case "gzip":
          body = gzipSync(plain);
          break;
        case "GZIP":
          body = gzipSync(plain);
          coding = "GZIP";
          break;
        case "x-gzip":
          body = gzipSync(plain);
          coding = "x-gzip";
          break;
        case "br":
          body = brotliCompressSync(plain);
          coding = "br";
          break;
        case "deflate":
          body = deflateSync(plain);
          coding = "deflate";
          break;
        case "gzip-truncated": {
          const whole = gzipSync(plain);
          body = whole.subarray(0, random.int(whole.length));
          break;
        }
        case "gzip-garbage":
          body = Buffer.from("this is not gzip at all");
          break;
        case "br-garbage":
          body = Buffer.from([0xff, 0xff, 0xff, 0x00, 0x12, 0x34]);
          coding = "br";
          break;
        case "gzip-bomb":
          body = gzipSync(bomb);
          break;
        case "br-bomb":
          body = brotliCompressSync(bomb);
          coding = "br";
          break;
        case "gzip-notjson":
          body = gzipSync(Buffer.from("{not json"));
          break;
        case "gzip-trailing":
          body = Buffer.concat([gzipSync(plain), Buffer.from("garbage after")]);
          break;
        case "double-gzip":
          body = gzipSync(gzipSync(plain));
          coding = "gzip, gzip";
          break;
        case "gzip,br":
          body = brotliCompressSync(gzipSync(plain));
          coding = "gzip, br";
          break;
        case "zstd":
          body = plain;
          coding = "zstd";
          break;
        case "gzip-empty":
          body = gzipSync(Buffer.alloc(0));
          break;
        case "gzip-invalid-utf8":
          body = gzipSync(
            Buffer.concat([
              Buffer.from('{"model":"gpt'),
              Buffer.from([0xff, 0xfe]),
              Buffer.from('","messages":[]}'),
            ]),
          );
          break;
      }
      headers.push(["content-encoding", coding]);
      if (random.chance(0.3)) chunked = true;
      break;
    }
    case "proxy-b": {
      auth("provider-b");
      method = random.pick(["POST", "POST", "GET"]);
      const path = random.pick([
        "v1/messages",
        "messages",
        "v1/messages/count_tokens",
        "v1/messages/batches",
        "v1/models",
      ]);
      target = `/v1/provider-b/${s.projectId}/${path}`;
      body = json({
        model: "claude-sonnet-4-5",
        max_tokens: 16,
        messages: [{ role: "user", content: "Hi" }],
        stream: random.chance(0.3),
      });
      note.push(method, path);
      break;
    }
    case "proxy-c": {
      auth("provider-c");
      method = random.pick(["POST", "POST", "GET"]);
      const path = random.pick([
        "v1beta/models/gemini-2.5-flash:generateContent",
        "v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        "v1beta/models/gemini-2.5-flash:countTokens",
        "v1/models/gemini-2.5-flash:generateContent",
        "v1beta/models/gemini-2.5-flash%3AgenerateContent",
        "v1beta/models",
      ]);
      target = `/v1/provider-c/${s.projectId}/${path}`;
      body = json({ contents: [{ role: "user", parts: [{ text: "Hi" }] }] });
      note.push(method, path);
      break;
    }
    case "models": {
      method = random.pick(["GET", "HEAD", "GET", "POST"]);
      const provider = random.pick(["provider-a", "provider-b", "provider-c"]);
      target = random.pick([
        `/v1/${provider}/models`,
        `/v1/${provider}/${s.projectId}/models`,
        `/v1/${provider}/models?limit=${random.pick(["-1", "0", "1e9", "abc", "2"])}`,
        `/v1/${provider}/nope/models`,
      ]);
      break;
    }
    case "structured": {
      const kind = random.pick(["text", "vision", "pdf"]);
      target = random.chance(0.5) ? `/v1/${kind}` : `/v1/${kind}/${s.projectId}`;
      if (!target.includes(s.projectId)) headers.push(["x-project-id", s.projectId]);
      auth("provider-a");
      method = random.pick(["POST", "POST", "POST", "GET", "PUT", "post"]);
      break;
    }
    case "image": {
      target = random.chance(0.5) ? "/v1/image" : `/v1/image/${s.projectId}`;
      if (!target.includes(s.projectId)) headers.push(["x-project-id", s.projectId]);
      auth("provider-a");
      method = random.pick(["POST", "POST", "GET"]);
      break;
    }
    case "admin": {
      if (random.chance(0.85)) headers.push(["authorization", `Bearer ${adminToken}`]);
      if (random.chance(0.1)) headers.push(["authorization", `Bearer ${adminToken}`]);
      const choice = random.int(6);
      if (choice === 0) {
        method = random.pick(["POST", "GET"]);
        target = "/admin/v1/projects";
      } else if (choice === 1) {
        method = random.pick(["GET", "PATCH"]);
        target = `/admin/v1/projects/${random.pick(["fz-admin", "nope", "%00", "a".repeat(70)])}`;
      } else if (choice === 2) {
        method = random.pick(["GET", "POST"]);
        target = "/admin/v1/projects/fz-admin/keys";
      } else if (choice === 3) {
        method = "GET";
        target = `/admin/v1/projects/fz-admin/usage?${random.pick(["from=2026-01-01&to=2026-02-01", "groupBy=x", "from=%FF", "limit=999999999999"])}`;
      } else if (choice === 4) {
        method = random.pick(["GET", "DELETE"]);
        target = "/admin/v1/projects/fz-admin/test-keys";
      } else {
        method = random.pick(["GET"]);
        target = `/admin/v1/${random.pick(["audit-log", "audit", "cache", "engines", "projects?limit=0", "projects?cursor=%FF"])}`;
      }
      break;
    }
    case "vault":
      method = random.pick(["GET", "HEAD"]);
      target = `/v1/vault/${random.pick(["team/generated-images/p/2026/01/01/x.png", "..%2F..%2Fetc%2Fpasswd", "x?sig=abc&exp=1", "a/b/c?exp=99999999999999999999&sig=", "%00"])}`;
      if (random.chance(0.3))
        headers.push(["range", random.pick(["bytes=0-", "bytes=-0", "bytes=5-1", "bytes=abc"])]);
      break;
    case "health":
      method = random.pick(["GET", "HEAD", "POST", "get"]);
      target = random.pick(["/health", "/health/", "/health?x=1", "/HEALTH", "//health"]);
      break;
    case "metrics":
      method = random.pick(["GET", "HEAD"]);
      target = "/metrics";
      break;
    case "unknown":
      method = random.pick(["GET", "POST", "DELETE", "OPTIONS", "TRACE", "FOO"]);
      target = random.pick([
        "/",
        "/v1",
        "/v1/",
        "/v2/text",
        "/v1/provider-d/x/models",
        "/admin",
        "/admin/v2/projects",
        "/%",
        "/%zz",
        "/\u00e9",
        "/a/../../../etc/passwd",
        `/${"a".repeat(random.pick([100, 3000, 12000]))}`,
        "*",
        "http://evil.example/health",
        "/v1/text?%00=%00",
      ]);
      break;
    case "preflight": {
      method = random.pick(["OPTIONS", "OPTIONS", "options"]);
      const base = random.pick([
        `/v1/provider-a/${s.projectId}/chat/completions`,
        "/v1/text",
        "/v1/image",
        "/health",
        "/admin/v1/projects",
        "/metrics",
        "/nowhere",
        `/v1/provider-b/${s.projectId}/v1/messages`,
      ]);
      target = base;
      headers.push(["origin", random.pick(["https://app.example", "https://evil.example", "null", ""])]);
      if (random.chance(0.8))
        headers.push([
          "access-control-request-method",
          random.pick(["POST", "GET", "DELETE", "PATCH", "FOO", ""]),
        ]);
      if (random.chance(0.6))
        headers.push([
          "access-control-request-headers",
          random.pick([
            "authorization, content-type",
            "x-api-key",
            "x-sluice-test-key",
            "*",
            `x-${"h".repeat(2000)}`,
          ]),
        ]);
      break;
    }
    case "raw": {
      const raws = [
        `CONNECT 127.0.0.1:${port} HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n\r\n`,
        `CONNECT /v1/text HTTP/1.1\r\nhost: x\r\n\r\n`,
        `${"G".repeat(random.pick([20, 300, 20000]))} /health HTTP/1.1\r\nhost: x\r\n\r\n`,
        "GET /health HTTP/1.1\r\n\r\n",
        "GET /health HTTP/1.0\r\n\r\n",
        "GET /health HTTP/2.0\r\nhost: x\r\n\r\n",
        "GET /health\r\n\r\n",
        "GET /health HTTP/1.1\r\nhost: x\r\nbad header line\r\n\r\n",
        "GET /health HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n",
        "POST /v1/text HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
        "POST /v1/text HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n0\r\n\r\n",
        "GET /health HTTP/1.1\r\nhost: x\r\nx-a: \u0000\r\n\r\n",
        "GET /he\u0000alth HTTP/1.1\r\nhost: x\r\n\r\n",
        "GET /health HTTP/1.1\nhost: x\n\n",
        "GET /health HTTP/1.1\r\nhost: x\r\n x-folded: y\r\n\r\n",
        `POST /v1/provider-a/${s.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${s.bearer["provider-a"]}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5;ext=1\r\n{"a":\r\n1\r\n1\r\n0\r\nx-trailer: y\r\n\r\n`,
        `POST /v1/text HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${s.bearer["provider-a"]}\r\nx-project-id: ${s.projectId}\r\ncontent-type: application/json\r\ncontent-length: -1\r\n\r\n`,
        `POST /v1/text HTTP/1.1\r\nhost: x\r\ncontent-length: 99999999999999999999\r\n\r\n`,
        `POST /v1/text HTTP/1.1\r\nhost: x\r\ncontent-length: 1e3\r\n\r\n`,
        "GET / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        "\r\n\r\nGET /health HTTP/1.1\r\nhost: x\r\n\r\n",
      ];
      const chosen = random.pick(raws);
      note.push(JSON.stringify(chosen.slice(0, 80)));
      return {
        index,
        family,
        note,
        method: chosen.split(" ")[0] ?? "",
        target: "",
        headers: [],
        body: Buffer.alloc(0),
        chunked: false,
        expectContinue: false,
        noLength: false,
        raw: Buffer.from(chosen, "latin1"),
      };
    }
  }
  // Bodies for families that take them.
  if (["structured", "image", "admin"].includes(family) || random.chance(0.3)) {
    const base: Record<string, unknown> =
      family === "image"
        ? { prompt: "a lighthouse", n: 1, size: "1024x1024" }
        : family === "admin"
          ? { name: "Fz", provider: "provider-a", testMode: true }
          : family === "structured"
            ? { text: "Hello" }
            : JSON.parse(
                body.length > 0 && !headers.some(([n]) => n === "content-encoding") ? body.toString() : "{}",
              );
    const mutation = random.int(16);
    const text = JSON.stringify(base);
    if (!headers.some(([n]) => n === "content-encoding")) {
      switch (mutation) {
        case 0:
          body = Buffer.alloc(0);
          note.push("empty body");
          break;
        case 1:
          body = Buffer.from(text.slice(0, random.int(text.length)));
          note.push("truncated");
          break;
        case 2:
          body = Buffer.from(`${"[".repeat(random.pick([70, 5000, 20000]))}`);
          note.push("deep");
          break;
        case 3: {
          const key = Object.keys(base)[0] ?? "a";
          body = Buffer.from(
            text.replace(
              /^\{/,
              `{"${key}":${random.pick(["1e999", "-0", "123456789012345678901234567890", "null", "[]", "{}", "true"])},`,
            ),
          );
          note.push("dup key");
          break;
        }
        case 4: {
          const key = random.pick(Object.keys(base).length ? Object.keys(base) : ["a"]);
          const value = random.pick([
            1e308,
            -1,
            "",
            [],
            {},
            null,
            true,
            "\u0000",
            "\ud800",
            "x".repeat(40000),
          ]);
          body = json({ ...base, [key]: value });
          note.push(`${key} wrong`);
          break;
        }
        case 5:
          body = Buffer.concat([
            Buffer.from(text.slice(0, 5)),
            Buffer.from([0xff, 0xc0, 0xae]),
            Buffer.from(text.slice(5)),
          ]);
          note.push("invalid utf8");
          break;
        case 6:
          body = Buffer.from(`{"a":"${"x".repeat(fuzzMaxBodyBytes)}"}`);
          note.push("over cap");
          break;
        case 7:
          note.push("expect 100-continue");
          expectContinue = true;
          body = Buffer.from(text);
          break;
        case 8:
          note.push("chunked");
          chunked = true;
          body = Buffer.from(text);
          break;
        case 9:
          note.push("chunked, no body");
          chunked = true;
          body = Buffer.alloc(0);
          break;
        case 10:
          note.push("no length");
          noLength = true;
          body = Buffer.alloc(0);
          break;
        case 11:
          note.push("expect + over cap");
          expectContinue = true;
          body = Buffer.from(`{"a":"${"x".repeat(fuzzMaxBodyBytes)}"}`);
          break;
        default:
          body = Buffer.from(text);
      }
    }
  }
  if (family !== "preflight" && family !== "health" && family !== "metrics") {
    const ct = random.int(12);
    if (ct < 7) headers.push(["content-type", "application/json"]);
    else if (ct === 7)
      headers.push([
        "content-type",
        random.pick([
          "text/plain",
          "",
          "application/json; charset=latin1",
          "application/x-www-form-urlencoded",
        ]),
      ]);
    else if (ct === 8) headers.push(["content-type", "application/json"], ["content-type", "text/plain"]);
    else if (ct === 9 && !headers.some(([n]) => n === "content-encoding")) {
      headers.push(
        ["content-type", "application/json"],
        ["content-encoding", random.pick(["gzip", "br", "identity", "bogus"])],
      );
      note.push("encoding header, plain body");
    }
  }
  if (random.chance(0.05)) headers.push(["x-huge", "v".repeat(random.pick([1000, 10000, 17000]))]);
  if (random.chance(0.05)) headers.push(["origin", "https://app.example"]);
  if (random.chance(0.03)) headers.push(["expect", "200-ok"]);
  return { index, family, note, method, target, headers, body, chunked, expectContinue, noLength };
}

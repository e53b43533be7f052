import { connect } from "node:net";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { injectedKey } from "../support/proxy-key-calls.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * A compatible server at a configured base URL that quotes the request back (a debugging echo, an
 * error that names the key it refused): the key Sluice injected must not reach a client that holds
 * only a share of it, through a header or the body, however the body's chunks cut it.
 */
describe("a provider answer that quotes the injected key back", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      request.resume();
      const key = injectedKey(request);
      if (request.url?.includes("identity")) {
        // `identity` is no coding: the body is plain and masked as any other.
        response.writeHead(401, { "content-type": "application/json", "content-encoding": "Identity" });
        response.end(JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } }));
        return;
      }
      const compress = /compressed-(gzip|br|deflate|zstd)/.exec(request.url ?? "")?.[1];
      if (compress) {
        // A server that compresses its answers though Sluice asks for identity: the key is in the
        // compressed bytes, where no byte-for-byte mask can see it, and the client decodes them.
        const text = Buffer.from(
          JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } }),
        );
        const body =
          compress === "gzip"
            ? gzipSync(text)
            : compress === "br"
              ? brotliCompressSync(text)
              : compress === "deflate"
                ? deflateSync(text)
                : text;
        response.writeHead(401, {
          "content-type": "application/json",
          "content-encoding": compress,
          "content-length": String(body.length),
        });
        response.end(body);
        return;
      }
      const cutEscaped = /\/(dotnet|url)-cut$/.exec(request.url ?? "")?.[1];
      if (cutEscaped) {
        // An error whose body ends inside the key it quotes escaped, and inside an escape (its
        // content-length ends there): `…Yt/3Hc\u00` before a `+`, `…X%2BYt%2` before a `/`.
        const body =
          cutEscaped === "dotnet"
            ? `{"error":{"message":"Incorrect API key provided: ${key.slice(0, 17).replaceAll("+", "\\u002B")}\\u00`
            : `{"error":{"retry":"https://console.example/keys?key=${encodeURIComponent(key.slice(0, 20))}%2`;
        response.writeHead(401, {
          "content-type": "application/json",
          "content-length": String(body.length),
        });
        response.end(body);
        return;
      }
      // The key as other encoders write it: a JSON string with `/` escaped (PHP's json_encode), or
      // with `+` as `\u002B` (.NET's System.Text.Json), a URL query (percent-encoded), the redirect
      // to it, and a server that names a header after the value it echoes.
      const escaped = /\/(php|dotnet|url|location|header-name)$/.exec(request.url ?? "")?.[1];
      if (escaped === "location") {
        response.writeHead(302, { location: `https://login.example/?key=${encodeURIComponent(key)}` });
        response.end();
        return;
      }
      if (escaped === "header-name") {
        response.writeHead(401, { [`x-echo-${key}`]: "1", "content-type": "application/json" });
        response.end("{}");
        return;
      }
      if (escaped) {
        const message = JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } });
        const body =
          escaped === "php"
            ? message.replaceAll("/", "\\/")
            : escaped === "dotnet"
              ? message.replaceAll("+", "\\u002B")
              : JSON.stringify({
                  error: { retry: `https://console.example/keys?key=${encodeURIComponent(key)}` },
                });
        response.writeHead(401, { "content-type": "application/json" });
        // Sent a few bytes at a time: an escaped key is cut by chunk boundaries as a plain one is.
        let at = 0;
        const next = () => {
          if (at >= body.length) return void response.end();
          response.write(body.slice(at, at + 5));
          at += 5;
          setImmediate(next);
        };
        next();
        return;
      }
      if (request.url?.endsWith("/interim-and-trailer")) {
        // Headers a client must never see either: an informational answer's, a cookie, a trailer's.
        response.writeEarlyHints({ link: `</k/${key}>; rel=preload`, "x-echo": key });
        response.writeHead(401, {
          "content-type": "text/plain",
          "set-cookie": `k=${key}`,
          trailer: "x-echo",
        });
        response.write("refused");
        response.addTrailers({ "x-echo": key });
        response.end();
        return;
      }
      if (request.url?.endsWith("/reason-phrase")) {
        // A server that names the key it refused in its status line's reason phrase (an
        // `HTTPException(reason=…)`), on an error and on a success, plain and percent-encoded.
        const success = request.url.includes("success");
        const quoted = request.url.includes("escaped") ? encodeURIComponent(key) : key;
        response.writeHead(success ? 200 : 401, `Invalid API key ${quoted}`, {
          "content-type": "application/json",
        });
        response.end("{}");
        return;
      }
      if (request.url?.endsWith("/cut-in-key")) {
        // An error whose body ends inside the key it quotes (its content-length ends there): all but
        // its last bytes would reach the client.
        const body = `{"error":{"message":"Incorrect API key provided: ${key.slice(0, -4)}`;
        response.writeHead(401, {
          "content-type": "application/json",
          "content-length": String(body.length),
        });
        response.end(body);
        return;
      }
      if (request.url?.includes("echo-success")) {
        response.writeHead(200, { "content-type": "application/json", "x-echo": key });
        response.end(JSON.stringify({ id: "chatcmpl-1", object: "chat.completion", choices: [] }));
        return;
      }
      const body = Buffer.from(JSON.stringify({ error: { message: `Incorrect API key provided: ${key}` } }));
      response.writeHead(401, {
        "content-type": "application/json",
        "content-length": String(body.length),
        "x-echo-authorization": String(request.headers.authorization ?? ""),
        "www-authenticate": `Bearer error="invalid_token", error_description="key ${key} is invalid"`,
      });
      // The key cut across three chunks, sent apart.
      const at = body.indexOf(key);
      const cuts = [at + 3, at + 9];
      response.write(body.subarray(0, cuts[0]));
      setTimeout(() => response.write(body.subarray(cuts[0], cuts[1])), 20);
      setTimeout(() => response.end(body.subarray(cuts[1])), 40);
    });
    const url = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      providerBBaseUrl: `${url}/b/v1`,
      providerCBaseUrl: `${url}/c/v1beta`,
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await upstream.close();
  });

  const calls: [ProviderId, string][] = [
    ["provider-a", "chat/completions"],
    ["provider-b", "v1/messages"],
    ["provider-c", "v1beta/models/gemini-2.5-flash:generateContent"],
  ];
  /** POSTs `{}` to the fake's `path` through provider A's proxy, with `bearer` (the project's by default). */
  const postToA = (path: string, bearer = project.bearer("provider-a"), init: RequestInit = {}) =>
    fetch(`${sluice.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
      body: "{}",
      ...init,
    });

  it.each(calls)(
    "%s: masks it in the error's headers and body, which keeps its length",
    async (provider, path) => {
      const response = await fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${project.bearer(provider)}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [] }),
      });
      const key = project.providerKeys[provider];
      const body = await response.text();
      expect(response.status).toBe(401);
      expect(JSON.stringify([...response.headers])).not.toContain(key);
      expect(response.headers.get("www-authenticate")).toBe(
        'Bearer error="invalid_token", error_description="key [redacted] is invalid"',
      );
      expect(body).toBe(
        JSON.stringify({ error: { message: `Incorrect API key provided: ${"*".repeat(key.length)}` } }),
      );
      expect(Number(response.headers.get("content-length"))).toBe(Buffer.byteLength(body));
    },
  );

  it("masks it in an error body marked content-encoding: identity", async () => {
    const response = await postToA("identity");
    expect(response.status).toBe(401);
    expect(await response.text()).not.toContain(project.providerKeys["provider-a"]);
  });

  it("masks the key's beginning that an error body ends on", async () => {
    const response = await postToA("cut-in-key");
    const key = project.providerKeys["provider-a"];
    expect(response.status).toBe(401);
    expect(await response.text()).toBe(
      `{"error":{"message":"Incorrect API key provided: ${"*".repeat(key.length - 4)}`,
    );
  });

  it("masks it in a success's headers too", async () => {
    const response = await postToA("echo-success");
    expect(response.status).toBe(200);
    expect(response.headers.get("x-echo")).toBe("[redacted]");
    expect(await response.json()).toEqual({ id: "chatcmpl-1", object: "chat.completion", choices: [] });
  });

  it.each(["gzip", "br", "deflate"])(
    "masks it in a %s-compressed error body, sent decoded",
    async (coding) => {
      const response = await postToA(`compressed-${coding}`);
      const key = project.providerKeys["provider-a"];
      // fetch decodes what the content-encoding it gets names, as every client does.
      const body = await response.text();
      expect(body).not.toContain(key);
      expect(response.status).toBe(401);
      expect(response.headers.get("content-encoding")).toBeNull();
      expect(body).toBe(
        JSON.stringify({ error: { message: `Incorrect API key provided: ${"*".repeat(key.length)}` } }),
      );
    },
  );

  describe("a key with characters encoders escape (`openssl rand -base64`)", () => {
    const base64Key = "q8+Zr/0Ab+Kd/7WmX+Yt/3Hc+Ep/9Jn+Uv/1Ls=";
    let bearer = "";

    beforeAll(async () => {
      const added = await sluice.gateway.admin.addProviderKey(project.projectId, {
        provider: "provider-a",
        apiKey: base64Key,
      });
      bearer = `${added.partialKey}.${project.testKey}`;
    });

    /** Every form of the key a client could decode: as is, JSON string escapes undone, percent-decoded. */
    function decodedForms(text: string): string[] {
      const json = text.replace(/\\u([0-9a-fA-F]{4})|\\(.)/g, (_, hex: string | undefined, char: string) =>
        hex ? String.fromCharCode(Number.parseInt(hex, 16)) : char,
      );
      return [text, json, decodeURIComponent(text), decodeURIComponent(json)];
    }

    it.each(["php", "dotnet", "url"])(
      "masks it in an error body that quotes it escaped (%s)",
      async (form) => {
        const response = await postToA(form, bearer);
        const body = await response.text();
        expect(response.status).toBe(401);
        for (const decoded of decodedForms(body)) expect(decoded).not.toContain(base64Key);
        // Still the provider's JSON, the key's bytes each replaced by `*`.
        expect(JSON.stringify(JSON.parse(body))).toMatch(/\*{40}/);
      },
    );

    it.each([
      [
        "dotnet",
        '{"error":{"message":"Incorrect API key provided: ',
        () => `${base64Key.slice(0, 17).replaceAll("+", "\\u002B")}\\u00`,
      ],
      [
        "url",
        '{"error":{"retry":"https://console.example/keys?key=',
        () => `${encodeURIComponent(base64Key.slice(0, 20))}%2`,
      ],
    ])(
      "masks the key's beginning that an error body ends on, quoted escaped (%s) and cut inside an escape",
      async (form, before, quote) => {
        const response = await postToA(`${form}-cut`, bearer);
        expect(response.status).toBe(401);
        expect(await response.text()).toBe(before + "*".repeat(quote().length));
      },
    );

    it("masks it percent-encoded in a reason phrase", async () => {
      const line = await statusLine("escaped/reason-phrase", bearer);
      expect(decodeURIComponent(line)).not.toContain(base64Key);
      expect(line).toBe("HTTP/1.1 401 Invalid API key [redacted]");
    });

    it("masks it percent-encoded in a redirect's location", async () => {
      const response = await postToA("location", bearer, { redirect: "manual" });
      expect(response.status).toBe(302);
      expect(response.headers.get("location")).toBe("https://login.example/?key=[redacted]");
    });
  });

  /** The status line provider A's proxy answers POST `path` with, read off the socket (bearer as postToA's). */
  async function statusLine(path: string, bearer = project.bearer("provider-a")): Promise<string> {
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    const closed = new Promise((resolve) => socket.on("close", resolve));
    socket.write(
      `POST /v1/provider-a/${project.projectId}/${path} HTTP/1.1\r\nhost: sluice\r\n` +
        `authorization: Bearer ${bearer}\r\ncontent-type: application/json\r\n` +
        "content-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    await closed;
    return Buffer.concat(chunks).toString("latin1").split("\r\n")[0] ?? "";
  }

  it.each([
    ["an error", "reason-phrase", 401],
    ["a success", "success/reason-phrase", 200],
  ])("masks it in the reason phrase of %s's status line", async (_name, path, status) => {
    const line = await statusLine(path);
    expect(line).not.toContain(project.providerKeys["provider-a"]);
    expect(line).toBe(`HTTP/1.1 ${status} Invalid API key [redacted]`);
  });

  it("drops a header whose name quotes the key", async () => {
    const response = await postToA("header-name");
    expect(response.status).toBe(401);
    expect(JSON.stringify([...response.headers])).not.toContain(project.providerKeys["provider-a"]);
    expect(await response.text()).toBe("{}");
  });

  it("forwards neither an informational answer nor a trailer, nor a cookie, that quote it", async () => {
    const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    const closed = new Promise((resolve) => socket.on("close", resolve));
    socket.write(
      `POST /v1/provider-a/${project.projectId}/interim-and-trailer HTTP/1.1\r\nhost: sluice\r\n` +
        `authorization: Bearer ${project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        "content-length: 2\r\nconnection: close\r\n\r\n{}",
    );
    await closed;
    const raw = Buffer.concat(chunks).toString("latin1");
    expect(raw).toMatch(/^HTTP\/1\.1 401 /);
    expect(raw).toContain("refused");
    expect(raw).not.toContain(project.providerKeys["provider-a"]);
  });

  it("answers a compressed error body in a coding it cannot read without the body", async () => {
    const response = await postToA("compressed-zstd");
    const body = Buffer.from(await response.arrayBuffer());
    expect(body.includes(project.providerKeys["provider-a"])).toBe(false);
    expect(response.status).toBe(401);
    expect(response.headers.get("content-encoding")).toBeNull();
    expect(body.length).toBe(0);
  });
});

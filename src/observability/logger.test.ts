import { randomBytes } from "node:crypto";
import { APICallError } from "ai";
import { describe, expect, it } from "vitest";
import { exitOfScript } from "../../test/support/script-exit.js";
import { mulberry32 } from "../../test/support/seeded-random.js";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
import {
  configuredSecretHeld,
  configuredSecretStartsRedaction,
  configuredSecretsRedaction,
  createLogger,
  ignoreStdioWriteErrors,
  redactConfiguredSecrets,
  redactSecrets,
  shownStart,
} from "./logger.js";

function capture(level = "info") {
  const lines: string[] = [];
  const logger = createLogger(level, {
    write: (line: string) => {
      lines.push(line);
    },
  });
  return { logger, text: () => lines.join(""), records: () => lines.map((line) => JSON.parse(line)) };
}

const secrets = {
  bearer: "Bearer sk_sluice_k1_share.tk_testkey_abc",
  apiKey: "sk-provider-a-live-0123456789",
  googKey: "AIza-provider-c-0123456789",
  anthropicKey: "sk-ant-provider-b-0123456789",
  testKey: "tk_mixedcase_secret_123",
  share: "x-ai-key-share-secret",
  deviceToken: "ZGV2aWNlLXRva2VuLXNlY3JldA==",
  deviceCheckJwt: "eyJhbGciOiJFUzI1NiIsImtpZCI6IktFWTEyMzQ1NjcifQ.eyJpc3MiOiJURUFNIn0.c2lnbmF0dXJl",
  cookie: "session=cookie-secret-value",
  pem: "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----",
};

function expectNoSecret(text: string) {
  for (const [name, secret] of Object.entries(secrets)) {
    expect(text.includes(secret), `${name} found in ${text}`).toBe(false);
  }
  expect(text).not.toContain("BEGIN PRIVATE KEY");
}

describe("log redaction", () => {
  it("redacts the password of a URL with user info wherever it is written: a field, a message, a stack", () => {
    const { logger, text, records } = capture("trace");
    const databaseUrl = "postgres://sluice:pg-pass-1234@db.internal:5432/sluice?sslmode=require";
    const redisUrl = "rediss://default:redis-pass-5678@cache.internal:6380/0";
    logger.error(
      {
        connectionString: databaseUrl,
        options: { url: redisUrl, hosts: [`${redisUrl} (primary)`] },
        err: new Error(`could not connect to ${databaseUrl}`, { cause: new Error(`lost ${redisUrl}`) }),
      },
      `connecting to ${redisUrl}`,
    );
    const written = text();
    expect(written).not.toContain("pg-pass-1234");
    expect(written).not.toContain("redis-pass-5678");
    // What the operator needs to tell which server it was stays.
    expect(records()[0]).toMatchObject({
      connectionString: "postgres://sluice:[redacted]@db.internal:5432/sluice?sslmode=require",
      msg: "connecting to rediss://default:[redacted]@cache.internal:6380/0",
    });
  });

  it("redacts credential headers whatever their letter case", () => {
    const { logger, text, records } = capture();
    logger.info(
      {
        headers: {
          Authorization: secrets.bearer,
          "X-Api-Key": secrets.anthropicKey,
          "x-GOOG-api-key": secrets.googKey,
          "X-Sluice-Test-Key": secrets.testKey,
          "X-AI-Key": secrets.share,
          "X-Device-Token": secrets.deviceToken,
          Cookie: secrets.cookie,
          "Content-Type": "application/json",
        },
        upstream: { response: { headers: { "Set-Cookie": [secrets.cookie], "X-Request-Id": "req_up" } } },
        AUTHORIZATION: secrets.bearer,
        "Proxy-Authorization": secrets.bearer,
      },
      "mixed case",
    );
    expectNoSecret(text());
    const [record] = records();
    expect(record.headers).toMatchObject({
      Authorization: "[redacted]",
      "X-Api-Key": "[redacted]",
      "Content-Type": "application/json",
    });
    expect(record.upstream.response.headers).toEqual({
      "Set-Cookie": "[redacted]",
      "X-Request-Id": "req_up",
    });
  });

  it("redacts credential fields in any spelling: camelCase, snake_case, kebab-case, upper case", () => {
    const { logger, text } = capture();
    logger.warn(
      {
        api_key: secrets.apiKey,
        API_KEY: secrets.apiKey,
        "Api-Key": secrets.apiKey,
        ProviderKey: secrets.apiKey,
        partial_key: secrets.share,
        TestKey: secrets.testKey,
        device_token: secrets.deviceToken,
        privateKeyPem: secrets.pem,
        deviceCheck: { JWT: secrets.deviceCheckJwt },
        config: {
          SecretAccessKey: secrets.apiKey,
          masterKey: secrets.apiKey,
          masterKeyPrevious: secrets.share,
          ADMIN_TOKEN: secrets.apiKey,
        },
      },
      "spellings",
    );
    expectNoSecret(text());
    // The line was written, every field in it, each redacted (not dropped: a silent logger passes the
    // check above).
    const record = JSON.parse(text()) as Record<string, unknown>;
    expect(record.msg).toBe("spellings");
    expect(text().match(/"\[redacted\]"/g)).toHaveLength(13);
  });

  it("redacts nested errors with a headers property, their causes, aggregates and the AI SDK's errors", () => {
    const { logger, text, records } = capture();
    const transport = Object.assign(new Error("connect ECONNREFUSED"), {
      code: "ECONNREFUSED",
      headers: { Authorization: secrets.bearer, "x-goog-api-key": secrets.googKey },
    });
    const wrapped = Object.assign(new Error("upstream call failed", { cause: transport }), {
      request: { method: "POST", headers: { "X-Api-Key": secrets.anthropicKey } },
    });
    const apiCall = new APICallError({
      message: "Unauthorized",
      url: "https://api.example/v1/chat/completions",
      requestBodyValues: { model: "m", headers: { Authorization: secrets.bearer } },
      statusCode: 401,
      responseHeaders: { "set-cookie": secrets.cookie, "x-request-id": "req_1" },
      responseBody: "{}",
    });
    const aggregate = new AggregateError([transport, apiCall], "every attempt failed");
    logger.error({ err: wrapped, details: { error: transport, attempts: [apiCall] } }, "request failed");
    logger.error(aggregate);
    logger.error(
      { err: { name: "DeviceCheckError", headers: { Authorization: `Bearer ${secrets.deviceCheckJwt}` } } },
      "Apple",
    );
    expectNoSecret(text());
    const [first, second] = records();
    expect(first.err).toMatchObject({
      type: "Error",
      message: "upstream call failed: connect ECONNREFUSED",
      request: { method: "POST", headers: { "X-Api-Key": "[redacted]" } },
    });
    expect(first.details.error).toMatchObject({ type: "Error", code: "ECONNREFUSED" });
    expect(first.details.attempts[0]).toMatchObject({ type: "APICallError", statusCode: 401 });
    expect(second.err.aggregateErrors).toHaveLength(2);
  });

  it("redacts a credential that follows its header name in a flat list (raw headers)", () => {
    const { logger, text, records } = capture();
    logger.info({
      rawHeaders: ["Host", "api.example", "Authorization", secrets.bearer, "X-Api-Key", secrets.apiKey],
    });
    expectNoSecret(text());
    expect(records()[0].rawHeaders).toEqual([
      "Host",
      "api.example",
      "Authorization",
      "[redacted]",
      "X-Api-Key",
      "[redacted]",
    ]);
  });

  it("redacts at any depth and in circular objects", () => {
    const { logger, text } = capture();
    let deep: Record<string, unknown> = { Authorization: secrets.bearer };
    for (let level = 0; level < 12; level++) deep = { level: deep };
    const circular: Record<string, unknown> = { headers: { "X-Api-Key": secrets.apiKey } };
    circular.self = circular;
    logger.info({ deep, circular }, "shapes");
    expectNoSecret(text());
    expect(text()).toContain("[Circular]");
  });

  it("redacts the message pino takes from an error when none is given", () => {
    const { logger, text, records } = capture();
    const databaseUrl = "postgres://sluice:pg-pass-1234@db.internal:5432/sluice";
    logger.error(new Error(`could not connect to ${databaseUrl}`));
    logger.warn({ err: new Error(`lost ${databaseUrl}`) });
    expect(text()).not.toContain("pg-pass-1234");
    expect(records().map((record) => record.msg)).toEqual([
      "could not connect to postgres://sluice:[redacted]@db.internal:5432/sluice",
      "lost postgres://sluice:[redacted]@db.internal:5432/sluice",
    ]);
  });

  it("redacts a child logger's bindings and the values a message interpolates", () => {
    const { logger, text, records } = capture();
    const child = logger.child({ headers: { authorization: secrets.bearer }, requestId: "req_1" });
    child.info("bound");
    child.child({ apiKey: secrets.apiKey }).info("bound twice");
    logger.info("sent %o with %j", { "x-api-key": secrets.anthropicKey }, { testKey: secrets.testKey });
    expectNoSecret(text());
    expect(records()[0]).toMatchObject({ requestId: "req_1", headers: { authorization: "[redacted]" } });
  });

  it("redacts credentials in a URL's query and a password holding an @, wherever a string has them", () => {
    const { logger, text, records } = capture();
    const quoted = [
      `https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key=${secrets.googKey}`,
      "postgres://sluice@db.internal/sluice?sslmode=require&password=pg-query-pass-1",
      "redis://cache.internal:6379/0?Password=redis-query-pass-2",
      "https://gw.example/v1/vault/t/p/a.png?expires=1700000000&signature=vault-signature-3",
      "https://s3.example/b/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=0123abcd-s3-signature-4",
      "postgres://sluice:p@ss-at-5@db.internal:5432/sluice",
    ];
    logger.error({ urls: quoted, err: new TypeError(`Invalid URL: ${quoted[0]}`) }, `calling ${quoted[1]}`);
    const written = text();
    expectNoSecret(written);
    for (const part of ["pg-query-pass-1", "redis-query-pass-2", "vault-signature-3", "ss-at-5"])
      expect(written).not.toContain(part);
    expect(written).not.toContain("s3-signature-4");
    // What tells the operator which server and call it was stays.
    expect(records()[0].urls).toEqual([
      "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent?alt=sse&key=[redacted]",
      "postgres://sluice@db.internal/sluice?sslmode=require&password=[redacted]",
      "redis://cache.internal:6379/0?Password=[redacted]",
      "https://gw.example/v1/vault/t/p/a.png?expires=1700000000&signature=[redacted]",
      "https://s3.example/b/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=[redacted]",
      "postgres://sluice:[redacted]@db.internal:5432/sluice",
    ]);
  });

  it("redacts the arguments of a Redis AUTH or HELLO quoted by an ioredis reply error", () => {
    const { logger, text, records } = capture();
    const refused = (name: string, args: string[]) =>
      Object.assign(new Error("WRONGPASS invalid username-password pair or user is disabled."), {
        name: "ReplyError",
        command: { name, args },
      });
    logger.warn(
      {
        err: refused("auth", ["default", "redis-auth-pass-1"]),
        hello: refused("HELLO", ["3", "AUTH", "default", "redis-hello-pass-2"]),
        other: refused("evalsha", ["0123abcd", "1", "sluice:dt:p1"]),
      },
      "ledger failed",
    );
    expect(text()).not.toContain("redis-auth-pass-1");
    expect(text()).not.toContain("redis-hello-pass-2");
    const [record] = records();
    expect(record.err.command).toEqual({ name: "auth", args: "[redacted]" });
    // Other commands keep their arguments: key names and digests, which tell what failed.
    expect(record.other.command.args).toEqual(["0123abcd", "1", "sluice:dt:p1"]);
  });

  it("redacts a value with a provider key's form wherever a string has it: a path, a message, an error", () => {
    const { logger, text, records } = capture();
    const googleKey = "AIzaSy0aB1-cD2_eF3gH4iJ5kL6mN7oP8qR9sTu";
    const openAiKey = `sk-proj-${"T3BlbkFJ0123456789abcdefghijklmnop".repeat(4)}`;
    const anthropicKey = `sk-ant-api03-${"x0Y1z2W3v4U5t6S7r8Q9".repeat(5)}AA`;
    logger.warn(
      {
        path: `/v1/provider-c/${googleKey}/models`,
        err: new Error(`Project ${openAiKey} is unknown`),
        // Names that start as a key does, but are not one.
        names: ["sk-demo-project", "task_0123456789012345678901234567890123", "prj_AIza0123"],
      },
      `calling /v1/provider-b/${anthropicKey}/v1/messages`,
    );
    const written = text();
    for (const key of [googleKey, openAiKey, anthropicKey]) expect(written).not.toContain(key.slice(4, 20));
    const [record] = records();
    expect(record.path).toBe("/v1/provider-c/[redacted]/models");
    expect(record.msg).toBe("calling /v1/provider-b/[redacted]/v1/messages");
    expect(record.names).toEqual([
      "sk-demo-project",
      "task_0123456789012345678901234567890123",
      "prj_AIza0123",
    ]);
  });

  // A client pasting a credential copied out of a JSON string or a shell brings its escapes along:
  // a key behind `\n` (`x\nsk-proj-…`, `%5Cn` as a URL writes it) or `\u0022` followed a letter or a
  // digit, and was taken for the tail of a word (`task_…`) and written whole.
  it("redacts a key's form behind an escape a client copied with it: JSON's, a shell's, percent-encoded or twice", () => {
    const { logger, text, records } = capture("debug");
    const openAiKey = `sk-proj-${"T3BlbkFJ0123456789abcdefghijklmnop".repeat(2)}`;
    const googleKey = "AIzaSy0aB1-cD2_eF3gH4iJ5kL6mN7oP8qR9sTu";
    const escapes = ["\\n", "\\t", "\\r", "\\u0022", "\\x22", "%5Cn", "%5cu0022", "%255Cn", "%2522", "%250A"];
    for (const copied of escapes)
      for (const key of [openAiKey, googleKey])
        logger.debug({ path: `/v1/provider-a/p/x${copied}${key}` }, "request");
    expect(text()).not.toContain(openAiKey.slice(8, 30));
    expect(text()).not.toContain(googleKey.slice(4, 30));
    expect(records().map((record) => record.path)).toEqual(
      escapes.flatMap((copied) => [0, 1].map(() => `/v1/provider-a/p/x${copied}[redacted]`)),
    );
    // Still not the tail of a word, nor a word behind an escape's letters.
    const names = ["task_0123456789012345678901234567890123", "\\nask_0123456789012345678901234567890"];
    logger.debug({ names }, "names");
    expect(records().at(-1).names).toEqual(names);
  });

  // A DeviceCheck token (base64 of 2 to 3 KB) pasted into a path or a query without a partial key in
  // front of it has no key's form; long runs of base64 are redacted wherever a string has them.
  it("redacts a long run of base64, as it is or percent-encoded, and leaves paths and names alone", () => {
    const { logger, text, records } = capture("debug");
    // Seeded: a token whose first characters happen to be a short lower-case word before a `/` is
    // kept that far with the path's words (redactLongBase64).
    const next = mulberry32(7);
    const token = Buffer.from(Array.from({ length: 2400 }, () => Math.floor(next() * 256))).toString(
      "base64",
    );
    const encoded = encodeURIComponent(token);
    logger.debug({ path: `/v1/provider-a/p/${token}` }, "request");
    logger.debug({ path: `/v1/provider-a/${encoded}/chat/completions` }, "request");
    logger.debug({ url: `https://x.example/check?device=${encoded}&a=1` }, `token ${token} refused`);
    const written = text();
    for (const piece of token.match(/[A-Za-z0-9]{20,}/g) ?? []) expect(written).not.toContain(piece);
    const [inPath, asId, inQuery] = records();
    expect(inPath.path).toBe("/v1/provider-a/p/[redacted]");
    expect(asId.path).toBe("/v1/provider-a/[redacted]/chat/completions");
    expect(inQuery.url).toBe("https://x.example/check?device=[redacted]&a=1");
    expect(inQuery.msg).toBe("token [redacted] refused");
    // Ordinary paths and long texts without a base64 run of 200 characters of mixed case and digits.
    const kept = [
      "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
      "/v1/provider-c/prj_0123456789abcdef/v1beta/models/gemini-2.5-pro-preview-06-05:generateContent",
      `/v1/provider-a/prj_x/v1/chat/completions/${"a".repeat(500)}`,
      `/v1/provider-a/prj_x/v1/files/${"file0123456789-".repeat(30)}`,
      `/${"abc/".repeat(100)}`,
      randomBytes(140).toString("base64"),
    ];
    logger.debug({ kept }, "kept");
    expect(records().at(-1).kept).toEqual(kept);
  });

  // A run behind a percent-escape that is no base64 (`%22` of a quoted token, `%20`, `%3D`) began
  // nowhere: the escape's hex digits ran into it, and the first of them follows a `%`. Written whole.
  it("redacts a long run of base64 behind a percent-escape, as a key's form behind one is", () => {
    const { logger, text, records } = capture("debug");
    const next = mulberry32(11);
    const token = Buffer.from(Array.from({ length: 2400 }, () => Math.floor(next() * 256))).toString(
      "base64",
    );
    const escapes = ["%22", "%20", "%3D", "%3a", "%0A", "%5Cu0022", "%2522"];
    for (const copied of escapes) logger.debug({ path: `/v1/provider-a/p/${copied}${token}` }, "request");
    const written = text();
    for (const piece of token.match(/[A-Za-z0-9]{20,}/g) ?? []) expect(written).not.toContain(piece);
    // Behind an escape of an escape (`%5Cu0022`, `%2522`), from its first escape on.
    const shown = (copied: string) => (copied.length > 3 ? copied.slice(0, 3) : copied);
    expect(records().map((record) => record.path)).toEqual(
      escapes.map((copied) => `/v1/provider-a/p/${shown(copied)}[redacted]`),
    );
  });

  // A client writes the path the access line logs (up to Node's 16 KiB of head). The URL password
  // pattern once tried a scheme at every word start and ran each to the end of the text: 16 KiB of
  // `a.` behind a `://@` cost ~100-350 ms of the event loop per line, quadratic in the length. The
  // backtracking is inside V8's regular expressions, where only a clock sees it: texts 16 times as
  // long against each other (up to 16 KiB), the same code both times, where linear reading takes
  // about 16 times as long and quadratic 256 (slowdown-at-sixteen-times.ts). The speed is the
  // benchmark's to watch.
  it("redacts a long text built to make the URL patterns backtrack in linear time", () => {
    const { logger, records } = capture("debug");
    const crafted = (size: number) => [
      `/x://@${"a.".repeat(size)}`,
      `/@://${"sk-".repeat(size)}`,
      `/a.b.c://u:${"x-".repeat(size)}`,
      `/?${"a&".repeat(size)}=@://`,
      // Runs of base64 one short of a long one (redactLongBase64), each tried once.
      `/${`${"aB1/".repeat(49)}aB-`.repeat(Math.ceil(size / 100))}`,
      // A long run of short path words that a letter in upper case ends: the words it ends with
      // were looked for from each `/` on, each search read to that letter (pathWordsAfter).
      `/A${"/a".repeat(size)}/A`,
    ];
    const paths = new Map([500, 8000].map((size) => [size, crafted(size)]));
    const unkept = createLogger("debug", { write: () => {} });
    const logAll = (size: number) => {
      for (const path of paths.get(size) ?? []) unkept.debug({ path }, "request");
    };
    const slowdown = slowdownAtSixteenTimes(logAll, 500);
    expect(slowdown, `16 times the text took ${slowdown.toFixed(1)} times as long`).toBeLessThan(64);
    // Still redacted where they hold a URL's password.
    logger.warn({ path: `/${"a.".repeat(100)}postgres://u:pw-secret-1@db/x` }, "request");
    expect(records().at(-1).path).toBe(`/${"a.".repeat(100)}postgres://u:[redacted]@db/x`);
  });

  it("redacts the secrets it is configured with, as written, percent-encoded or JSON-escaped, at every level", () => {
    const { logger, text, records } = capture("trace");
    // An admin token of a project id's length, with the characters a path or JSON would escape.
    const adminToken = 'Adm1n+tok/en="x\\y"=';
    const masterKey = "q0HqzJ3mBqf0Z3Z6wFq1nGg7yW4mZC6mGZ0y8Z0bVfQ=";
    const child = logger.child({ path: "/admin/v1" });
    redactConfiguredSecrets(logger, [adminToken, masterKey, undefined, "short"]);
    const encoded = encodeURIComponent(adminToken);
    const lowerHex = [...Buffer.from(adminToken)]
      .map((byte) => `%${byte.toString(16).padStart(2, "0")}`)
      .join("");
    const mixed = `Adm1n%2btok%2Fen=%22x\\y"%3d`;
    logger.debug(
      { path: `/v1/provider-a/${adminToken}/chat/completions`, query: `?q=${encoded}` },
      "request",
    );
    logger.trace({ paths: [`/admin/v1/${lowerHex}`, `/admin/v1/${mixed}`] }, `master ${masterKey} here`);
    logger.info("sent %o", { nested: { body: JSON.stringify({ token: adminToken, key: masterKey }) } });
    logger.error(new Error(`no route for /admin/v1/${adminToken}`));
    child.warn(`a child made before the secrets were given: ${adminToken}`);
    child.child({ bound: `/admin/v1/${adminToken}`, again: masterKey }).info("and its child");
    const written = text();
    for (const form of [
      adminToken,
      encoded,
      lowerHex,
      mixed,
      JSON.stringify(adminToken).slice(1, -1),
      masterKey,
    ])
      expect(written).not.toContain(form.slice(0, 12));
    expect(written).not.toContain("tok/en");
    expect(written).not.toContain("mBqf0Z3Z6wFq");
    const [request, trace] = records();
    expect(request.path).toBe("/v1/provider-a/[redacted]/chat/completions");
    expect(request.query).toBe("?q=[redacted]");
    expect(trace.paths).toEqual(["/admin/v1/[redacted]", "/admin/v1/[redacted]"]);
    expect(trace.msg).toBe("master [redacted] here");
    // A secret unset or too short to tell from a word is not one: "short" stays where it is.
    logger.info("a short answer");
    expect(records().at(-1).msg).toBe("a short answer");
  });

  it("redacts a configured secret of a key's form whole, not only its key-like start", () => {
    const { logger, text } = capture();
    const adminToken = `sk-${"A".repeat(30)}+/tail-of-the-token`;
    redactConfiguredSecrets(logger, [adminToken]);
    logger.info({ path: `/admin/v1/${adminToken}` }, "request");
    expect(text()).not.toContain("tail-of-the-token");
    expect(text()).toContain('"path":"/admin/v1/[redacted]"');
  });

  it("cuts a long text only once its configured secrets are redacted", () => {
    const { logger } = capture();
    const adminToken = "admin-token-0123456789-abcdef";
    redactConfiguredSecrets(logger, [adminToken]);
    const path = `/${"a".repeat(1000)}/${adminToken}/${"z".repeat(2000)}`;
    const shown = shownStart(path, 1024, configuredSecretsRedaction(logger));
    expect(shown).not.toContain("admin-token-0");
    expect(shown).toBe(`/${"a".repeat(1000)}/[redacted]/${"z".repeat(11)}… (${path.length} characters)`);
    // Another logger was given no secrets.
    expect(configuredSecretsRedaction(capture().logger)(adminToken)).toBe(adminToken);
  });

  it("tells a text that holds a configured secret, or the start of one a path cut at its /, ? or #", () => {
    const { logger } = capture();
    const held = configuredSecretHeld(logger);
    const adminToken = "admin-token/0123456789?abc";
    expect(held(adminToken)).toBe(false);
    redactConfiguredSecrets(logger, [adminToken]);
    for (const value of [
      adminToken,
      `Bearer ${adminToken}`,
      encodeURIComponent(adminToken),
      "admin-token",
      "admin-token/0123456789",
    ])
      expect(held(value), value).toBe(true);
    // A start cut elsewhere, any other text, and nothing at all are no secret.
    for (const value of ["admin-tok", "admin-token/01", "admin", "sk-demo-project", ""])
      expect(held(value), value).toBe(false);
    // Another logger was given no secrets.
    expect(configuredSecretHeld(capture().logger)(adminToken)).toBe(false);
  });

  it("tells the start of a configured secret a path cut at its /, percent-encoded as a client's URL writes it", () => {
    const { logger } = capture();
    const held = configuredSecretHeld(logger);
    // The characters a URL's path percent-encodes (WHATWG URL, so fetch): ", {, }, a space.
    const adminToken = 'ab"cd{ef} gh/0123456789?abc';
    redactConfiguredSecrets(logger, [adminToken]);
    const segment = new URL(`http://127.0.0.1/v1/provider-a/${adminToken}`).pathname.split("/")[3] ?? "";
    expect(segment).toBe("ab%22cd%7Bef%7D%20gh");
    expect(held(segment)).toBe(true);
    // Lower-case hex, and the whole start encoded, as well.
    expect(held("ab%22cd%7bef%7d%20gh")).toBe(true);
    expect(held([...Buffer.from('ab"cd{ef} gh/0123456789')].map((b) => `%${b.toString(16)}`).join(""))).toBe(
      true,
    );
    // A start cut elsewhere is none.
    expect(held("ab%22cd%7Bef")).toBe(false);
  });

  it("redacts the start of a configured secret holding a ? that a path ends with, the query having cut it", () => {
    const { logger } = capture();
    const start = configuredSecretStartsRedaction(logger);
    const adminToken = "admin-token-0123456789?abc-def";
    expect(start("/v1/p/admin-token-0123456789")).toBe("/v1/p/admin-token-0123456789");
    redactConfiguredSecrets(logger, [adminToken, "no-query-in-this-one"]);
    const lowerHex = [..."admin-token-0123456789"].map((c) => `%${c.charCodeAt(0).toString(16)}`).join("");
    for (const path of ["/v1/p/admin-token-0123456789", `/v1/p/${lowerHex}`, "/admin-token-0123456789"])
      expect(start(path), path).toBe(`${path.slice(0, path.lastIndexOf("/") + 1)}[redacted]`);
    // Only at the end, and only the whole start.
    for (const path of [
      "/v1/p/admin-token-0123456789/x",
      "/v1/p/token-0123456789-x",
      "/v1/p/no-query-in-this-one",
    ])
      expect(start(path), path).toBe(path);
  });

  it("redacts a configured secret, or a key's form, used as a field's name", () => {
    const { logger, text, records } = capture();
    const adminToken = "admin-token-0123456789-abcdef";
    redactConfiguredSecrets(logger, [adminToken]);
    // A record keyed by what a client wrote (a query's parameters, a schema's properties).
    logger.info({ query: { [adminToken]: "", page: "2" } }, "request");
    logger.child({ [`/admin/v1/${adminToken}`]: 1 }).info("bound");
    const providerKey = `sk-proj-${"A1b2".repeat(10)}`;
    logger.info({ [providerKey]: true }, "keyed");
    expect(text()).not.toContain("admin-token-0");
    expect(text()).not.toContain("A1b2A1b2");
    const [request, bound, keyed] = records();
    expect(request.query).toEqual({ "[redacted]": "", page: "2" });
    expect(bound["/admin/v1/[redacted]"]).toBe(1);
    expect(keyed["[redacted]"]).toBe(true);
  });

  it("leaves a record without secrets as it is, without copying it", () => {
    const record = { requestId: "req_1", route: "/v1/text", status: 200, nested: { tokens: 12 } };
    expect(redactSecrets(record)).toBe(record);
  });
});

describe("stdout and stderr write errors", () => {
  it("are ignored by one listener each, however many loggers are made", () => {
    const before = [process.stdout.listenerCount("error"), process.stderr.listenerCount("error")];
    for (let made = 0; made < 20; made++) ignoreStdioWriteErrors();
    const after = [process.stdout.listenerCount("error"), process.stderr.listenerCount("error")];
    expect(after[0] as number).toBeGreaterThan(0);
    expect(after[1] as number).toBeGreaterThan(0);
    expect((after[0] as number) - (before[0] as number)).toBeLessThanOrEqual(1);
    expect((after[1] as number) - (before[1] as number)).toBeLessThanOrEqual(1);
  });
});

describe("the stdout logger at exit", () => {
  // The lines held at exit were written at once while the chunk before them was still to be
  // written by libuv's thread pool, which the exit waits for: it landed after them, and an audit
  // saw "stopped" before "shutting down". A thread pool busy with something else (a DNS lookup, a
  // compression, a key derivation; here one pbkdf2 on a pool of one thread) holds that write back
  // for as long as it takes.
  it("writes the lines in the order they were logged, a write held back by a busy thread pool first", async () => {
    const script = `
      import { pbkdf2 } from "node:crypto";
      import { createStdoutLogger } from "./src/observability/logger.ts";
      const logger = createStdoutLogger("info", () => {}, new Set());
      pbkdf2("password", "salt", 200000, 64, "sha512", () => {});
      logger.info("shutting down");
      logger.info("stopped");
      process.exit(0);
    `;
    const { code, output } = await exitOfScript(script, { ...process.env, UV_THREADPOOL_SIZE: "1" });
    expect(code).toBe(0);
    const messages = output
      .split("\n")
      .filter((line) => line.startsWith("{"))
      .map((line) => (JSON.parse(line) as { msg: string }).msg);
    expect(messages).toEqual(["shutting down", "stopped"]);
  }, 30_000);
});

/**
 * Seeded malformed requests for every route of the gateway (test/e2e/fuzz-bad-inputs.test.ts). The
 * same seed gives the same requests, whatever the gateway answers, so a failing case replays.
 */

import { type RouteTemplate, routes } from "./fuzz-routes.js";
import {
  allMethods,
  badImageBodies,
  badImages,
  badPdfs,
  invalidUtf8,
  rawValues,
  storageHostileStrings,
  wrongValues,
} from "./fuzz-values.js";

export class Random {
  constructor(readonly next: () => number) {}
  int(below: number): number {
    return Math.floor(this.next() * below);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)] as T;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

/** Which statuses DESIGN.md and docs/api.md allow a route (besides the HTTP-level refusals). */
export type RouteKind =
  | "health"
  | "metrics"
  | "models"
  | "structured"
  | "image"
  | "proxy"
  | "admin"
  | "vault"
  /** A model list's path or method changed: a list still, or a proxied call now. */
  | "models-or-proxy"
  | "unknown";

export interface FuzzCase {
  index: number;
  /** What was done to the request, for the failure report. */
  mutations: string[];
  method: string;
  target: string;
  headers: Array<[string, string]>;
  body: Buffer;
  kind: RouteKind;
  /**
   * The status docs/api.md gives this request, when one mutation alone decides it (valid
   * credentials, the route's own method and path); null when several answers are right.
   */
  expected: number | null;
}

export interface FuzzSecrets {
  projectId: string;
  /** The project the admin routes may change (never the one the credentials belong to). */
  adminProjectId: string;
  bearerA: string;
  bearerB: string;
  bearerC: string;
  partialKeyA: string;
  testKey: string;
  adminToken: string;
  keyIdA: string;
}

export interface FuzzCaps {
  maxBodyBytes: number;
  maxImageBytes: number;
  maxPdfBytes: number;
}

export function generateCase(
  random: Random,
  index: number,
  secrets: FuzzSecrets,
  caps: FuzzCaps,
  port: number,
): FuzzCase {
  const route = random.pick(routes);
  const mutations: string[] = [];
  let method = random.pick(route.methods);
  let kind = route.kind;
  if (random.chance(0.15)) {
    if (kind === "models") kind = "models-or-proxy";
    method = random.pick(allMethods);
    mutations.push(`method ${JSON.stringify(method)}`);
  }
  let target = route.path(secrets);
  if (random.chance(0.25)) {
    target = mutatePath(random, target, mutations);
    if (kind === "models") kind = "models-or-proxy";
  }
  if (random.chance(0.15)) target = mutateQuery(random, target, mutations);

  const headers: Array<[string, string]> = [["host", `127.0.0.1:${port}`]];
  const untouched = mutations.length === 0;
  const credentials = addCredentials(random, route, secrets, headers, mutations);
  const validCredentials = credentials.valid;

  const base = route.body?.(secrets);
  let body: Buffer = Buffer.alloc(0);
  const sendsBody = method === "POST" || method === "PATCH";
  if (base !== undefined && (sendsBody || random.chance(0.2))) body = Buffer.from(JSON.stringify(base));
  let bodyExpected: number | null | undefined;
  if (random.chance(0.6)) {
    const mutated = mutateBody(random, route, base, body, caps, mutations);
    body = mutated.body;
    bodyExpected = mutated.expected;
  }

  let contentType: string | null = body.length > 0 || route.body ? "application/json" : null;
  let framing: "length" | "chunked" | "none" = "length";
  let headerExpected: number | null | undefined;
  let httpLevel = false;
  let beforeRouting = false;
  if (random.chance(0.3)) {
    const changed = mutateHeaders(random, route, body.length > 0, headers, mutations);
    if (changed.contentType !== undefined) contentType = changed.contentType;
    if (changed.framing) framing = changed.framing;
    headerExpected = changed.expected ?? null;
    httpLevel = changed.httpLevel === true;
    beforeRouting = changed.beforeRouting === true;
  }
  // One mutation alone, on the route's own method and path with valid credentials, decides the answer.
  let expected: number | null = null;
  // Credentials are checked first (docs/api.md): only the HTTP-level refusals come before them.
  if (untouched && !validCredentials && !httpLevel) expected = credentials.expected;
  if (untouched && validCredentials && route.auth !== "none") {
    if (bodyExpected !== undefined && headerExpected === undefined && sendsBody) expected = bodyExpected;
    // A 415 is for a body the route reads (POST, PATCH); the framing's 400 and the head's 431 for any.
    const framing = headerExpected === 400 || headerExpected === 431;
    if (headerExpected !== undefined && bodyExpected === undefined && (sendsBody || framing))
      expected = headerExpected;
  }
  if (contentType !== null) headers.push(["content-type", contentType]);
  if (framing === "chunked") headers.push(["transfer-encoding", "chunked"]);
  else if (framing === "none") {
    // The transfer-encoding mutation framed the request.
  } else if (body.length > 0 || method === "POST" || method === "PATCH")
    headers.push(["content-length", String(body.length)]);
  headers.push(["connection", "close"]);
  if (beforeRouting) {
    // Node's limit on the head is 16 KiB: a head near it may be refused (431) before Sluice reads it.
    const headBytes = Buffer.byteLength(
      `${method} ${target} HTTP/1.1\r\n${headers.map(([name, value]) => `${name}: ${value}\r\n`).join("")}`,
    );
    expected = headBytes < 15_000 && method !== "CONNECT" ? (headerExpected ?? null) : null;
  }
  return { index, mutations, method, target, headers, body, kind, expected };
}

function mutatePath(random: Random, path: string, mutations: string[]): string {
  const [plain = path, query] = path.split("?");
  const choices: Array<[string, (p: string) => string]> = [
    ["trailing slash", (p) => `${p}/`],
    ["double slash", (p) => p.replace("/v1/", "//v1/").replace("/admin/", "//admin/")],
    ["doubled inner slash", (p) => p.replace(/\/(?=[^/]*$)/, "//")],
    ["encoded slash", (p) => p.replace(/\/(?=[^/]*$)/, "%2F")],
    ["%zz", (p) => `${p}%zz`],
    ["overlong dot %C0%AE", (p) => `${p}/%C0%AE%C0%AE/x`],
    ["%FF", (p) => `${p}%FF`],
    ["%00", (p) => `${p}%00`],
    ["encoded lone surrogate", (p) => `${p}%ED%A0%80`],
    ["NUL in the project id", (p) => p.replace(/(\/(?:fuzz-app|fuzz-admin))(?=\/|$)/, "$1%00")],
    [
      "lone surrogate in the project id",
      (p) => p.replace(/(\/(?:fuzz-app|fuzz-admin))(?=\/|$)/, "$1%ED%B0%80"),
    ],
    ["dot dot", (p) => `${p}/../../health`],
    ["encoded dot dot", (p) => `${p}/%2e%2e/%2e%2e/x`],
    ["dot segment", (p) => p.replace(/\/(?=[^/]*$)/, "/./")],
    ["very long", (p) => `${p}/${"a".repeat(8000)}`],
    ["too long for the head", (p) => `${p}/${"a".repeat(20000)}`],
    ["unicode", (p) => `${p}/\u00e9\u{1F600}`],
    ["encoded unicode", (p) => `${p}/%E2%82%AC`],
    ["upper case", (p) => p.toUpperCase()],
    ["fragment", (p) => `${p}#frag`],
    ["absolute form", (p) => `http://127.0.0.1${p}`],
    ["asterisk", () => "*"],
    ["no leading slash", (p) => p.slice(1)],
    ["backslash", (p) => p.replace(/\//g, "\\")],
    ["semicolon", (p) => `${p};a=b`],
    ["space", (p) => `${p}%20`],
  ];
  const [name, change] = random.pick(choices);
  mutations.push(`path ${name}`);
  const changed = change(plain);
  return query === undefined ? changed : `${changed}?${query}`;
}

function mutateQuery(random: Random, target: string, mutations: string[]): string {
  const choices: Array<[string, string]> = [
    ["empty", ""],
    ["repeated", "a=1&a=2"],
    ["bad escape", "q=%zz"],
    ["encoded NUL", "q=%00"],
    ["unicode", "q=\u00e9"],
    ["long", `q=${"b".repeat(6000)}`],
    ["key", "key=AIzaFAKE"],
    ["limit", "limit=-1"],
    ["limit huge", "limit=99999999999999999999"],
    ["pageSize", "pageSize=abc"],
    ["pageToken", "pageToken=%FF%FE"],
    ["after_id", "after_id=&before_id=x"],
    ["groupBy", "groupBy=week"],
    ["from", "from=not-a-date"],
    ["to before from", "from=2026-02-01&to=2026-01-01"],
    ["proto", "__proto__=1&constructor=2"],
    ["only ampersands", "&&&"],
    ["only equals", "=&=="],
  ];
  const [name, query] = random.pick(choices);
  mutations.push(`query ${name}`);
  return target.includes("?") && random.chance(0.5)
    ? `${target}&${query}`
    : `${target.split("?")[0]}?${query}`;
}

function addCredentials(
  random: Random,
  route: RouteTemplate,
  s: FuzzSecrets,
  headers: Array<[string, string]>,
  mutations: string[],
): { valid: boolean; expected: number | null } {
  const valid: Array<[string, string]> =
    route.auth === "admin"
      ? [["authorization", `Bearer ${s.adminToken}`]]
      : route.auth === "app-a"
        ? [["authorization", `Bearer ${s.bearerA}`]]
        : route.auth === "app-b"
          ? [["authorization", `Bearer ${s.bearerB}`]]
          : route.auth === "app-c"
            ? [["authorization", `Bearer ${s.bearerC}`]]
            : [];
  // The structured and image routes without the project id in the path take it from x-project-id.
  if (route.auth.startsWith("app") && !route.path(s).includes(s.projectId))
    valid.push(["x-project-id", s.projectId]);
  if (!random.chance(0.3)) {
    headers.push(...valid);
    return { valid: true, expected: null };
  }
  const choices: Array<[string, Array<[string, string]>]> = [
    ["no credentials", []],
    ["admin token as x-api-key", [["x-api-key", s.adminToken]]],
    ["admin token as x-sluice-test-key", [["x-sluice-test-key", s.adminToken]]],
    ["bearer as x-ai-key", [["x-ai-key", s.bearerA]]],
    ["bearer in x-goog-api-key", [["x-goog-api-key", s.bearerA]]],
    ["test key alone as bearer", [["authorization", `Bearer ${s.testKey}`]]],
    ["partial key alone as bearer", [["authorization", `Bearer ${s.partialKeyA}`]]],
    ["bearer of provider b", [["authorization", `Bearer ${s.bearerB}`]]],
    ["basic scheme", [["authorization", `Basic ${Buffer.from(`x:${s.adminToken}`).toString("base64")}`]]],
    ["empty authorization", [["authorization", ""]]],
    ["bearer with no value", [["authorization", "Bearer "]]],
    ["lower-case scheme", [["authorization", `bearer ${valid[0]?.[1].slice(7) ?? s.bearerA}`]]],
    ["authorization twice", [...valid, ...valid]],
    [
      "authorization twice, contradicting",
      [...valid, ["authorization", "Bearer wrong.value"] as [string, string]],
    ],
    [
      "test key header with x-ai-key and x-project-id",
      [
        ["x-sluice-test-key", s.testKey],
        ["x-ai-key", s.partialKeyA],
        ["x-project-id", s.projectId],
      ],
    ],
    ["x-project-id twice", [...valid, ["x-project-id", s.projectId], ["x-project-id", "other"]]],
    ["x-project-id empty", [...valid, ["x-project-id", ""]]],
    [
      "x-device-token garbage",
      [
        ["x-device-token", "!!!not-base64!!!"],
        ["x-ai-key", s.partialKeyA],
      ],
    ],
    ["bearer with a huge token", [["authorization", `Bearer ${s.partialKeyA}.${"t".repeat(7000)}`]]],
    // Bytes above 0x7f in a header value (obs-text, RFC 9110 §5.5): read as Latin-1 by Node.
    ["authorization with non-ASCII bytes", [["authorization", `Bearer ${s.partialKeyA}.t\u00e9st\u00ff`]]],
    [
      "x-project-id with non-ASCII bytes",
      [...valid.filter(([name]) => name !== "x-project-id"), ["x-project-id", "pr\u00e9jet"]],
    ],
  ];
  const [name, chosen] = random.pick(choices);
  mutations.push(`credentials: ${name}`);
  headers.push(...chosen);
  return { valid: false, expected: credentialsStatus(route, name, route.path(s).includes(s.projectId)) };
}

/**
 * What docs/api.md and docs/auth.md answer these credentials (null: served, or undecided): 401 when
 * no method succeeds (or no project id was given), 403 for a partial key of another provider, 400
 * for a credential header or a read x-project-id sent twice.
 */
function credentialsStatus(route: RouteTemplate, name: string, idInPath: boolean): number | null {
  if (route.auth === "none") return null;
  if (name === "lower-case scheme") return null;
  if (name.startsWith("authorization twice")) return 400;
  if (route.auth === "admin") return name.startsWith("x-project-id") ? null : 401;
  if (name === "x-project-id with non-ASCII bytes") return null;
  if (name.startsWith("x-project-id")) return idInPath ? null : 400;
  const keyOfA = name === "test key header with x-ai-key and x-project-id";
  if (keyOfA) return route.auth === "app-a" ? null : 403;
  if (name === "bearer of provider b") return route.auth === "app-b" ? null : idInPath ? 403 : 401;
  if (name === "bearer in x-goog-api-key" && route.auth === "app-c") return 403;
  return 401;
}

interface HeaderChange {
  contentType?: string | null;
  /** `chunked`: the body is sent chunked; `none`: the mutation wrote the framing header itself. */
  framing?: "chunked" | "none";
  expected?: number | null;
  /** The change can make Node's parser refuse the request (400, 431) before any route sees it. */
  httpLevel?: boolean;
  /**
   * `expected` is the answer whatever the method, path, credentials and body (the request is
   * refused before routing), unless Node's parser refuses the head first (431 for its size, or
   * CONNECT, which never reaches the routes).
   */
  beforeRouting?: boolean;
}

function mutateHeaders(
  random: Random,
  route: RouteTemplate,
  hasBody: boolean,
  headers: Array<[string, string]>,
  mutations: string[],
): HeaderChange {
  // Sluice reads the JSON itself: content type, charset and coding are checked (415).
  const parsed = route.reads === "bounded" || (route.reads === "admin" && route.body !== undefined);
  const notJson = parsed || route.reads === "json-proxy" ? 415 : null;
  const notUtf8 = parsed ? 415 : null;
  // [name, value, expected status with a valid body]; undefined: served as JSON.
  const contentTypes: Array<[string, string | null, number | null | undefined]> = [
    ["none", null, notJson],
    ["text/plain", "text/plain", notJson],
    ["empty", "", notJson],
    ["charset latin1", "application/json; charset=iso-8859-1", notUtf8],
    ["charset UTF-8", "application/json; charset=UTF-8", undefined],
    ["charset quoted utf8", 'application/json;charset="utf8"', undefined],
    ["charset utf-16", "application/json; charset=utf-16", notUtf8],
    ["charset empty", "application/json; charset=", notUtf8],
    ["+json", "application/vnd.api+json", undefined],
    ["upper case", "APPLICATION/JSON", undefined],
    ["list", "application/json, text/plain", null],
    ["form", "application/x-www-form-urlencoded", notJson],
    ["multipart", "multipart/form-data; boundary=x", notJson],
    ["bare +json", "+json", notJson],
    ["parameters only", ";charset=utf-8", notJson],
    ["huge", `application/json; x=${"y".repeat(9000)}`, undefined],
  ];
  const known = (status: number | null | undefined) => (hasBody ? status : null);
  const choices: Array<[string, () => HeaderChange]> = [
    [
      "content-type",
      () => {
        const [name, value, status] = random.pick(contentTypes);
        mutations.push(`content-type ${name}`);
        return status === undefined
          ? { contentType: value }
          : { contentType: value, expected: known(status) };
      },
    ],
    [
      "content-type twice",
      () => {
        mutations.push("content-type twice, contradicting");
        headers.push(["content-type", "text/plain"]);
        return { expected: null };
      },
    ],
    [
      "content-encoding",
      () => {
        const value = random.pick([
          "gzip",
          "br",
          "deflate",
          "zstd",
          "identity",
          "gzip, identity",
          "x-unknown",
          "",
        ]);
        mutations.push(`content-encoding ${JSON.stringify(value)}`);
        headers.push(["content-encoding", value]);
        if (value === "identity") return {};
        return { expected: value === "" ? null : known(parsed ? 415 : null) };
      },
    ],
    [
      "chunked",
      () => {
        mutations.push("chunked body");
        return { framing: "chunked", expected: null };
      },
    ],
    [
      "transfer-encoding",
      () => {
        // Chunked alone (any case, spaces around it) is read; any other coding is 400 on every
        // route, before the route is chosen (RFC 9112 §6.3, docs/api.md). Sent framed as a server
        // reads it.
        const value = random.pick([
          "CHUNKED",
          " chunked",
          "gzip, chunked",
          "chunked, gzip",
          "identity",
          "gzip",
          "chunked;x=1",
        ]);
        mutations.push(`transfer-encoding ${JSON.stringify(value)}`);
        headers.push(["transfer-encoding", value]);
        if (/^\s*chunked\s*$/i.test(value)) return { framing: "none", expected: null };
        return { framing: "none", expected: 400, httpLevel: true, beforeRouting: true };
      },
    ],
    [
      "content-length twice",
      () => {
        mutations.push("content-length with transfer-encoding");
        headers.push(["transfer-encoding", "chunked"], ["content-length", "5"]);
        return { expected: 400, httpLevel: true };
      },
    ],
    [
      "huge header",
      () => {
        const size = random.pick([4000, 12000, 17000]);
        mutations.push(`huge x-fuzz header ${size}`);
        headers.push(["x-fuzz", "v".repeat(size)]);
        return { expected: size > 16384 ? 431 : null, httpLevel: true };
      },
    ],
    [
      "expect",
      () => {
        const value = random.pick(["100-continue", "200-ok", ""]);
        mutations.push(`expect ${JSON.stringify(value)}`);
        headers.push(["expect", value]);
        return { expected: null };
      },
    ],
    [
      "accept",
      () => {
        mutations.push("accept text/html");
        headers.push(["accept", "text/html"], ["accept-encoding", "gzip, br"]);
        return { expected: null };
      },
    ],
    [
      "origin",
      () => {
        mutations.push("origin with preflight headers");
        headers.push(["origin", "https://evil.example"], ["access-control-request-method", "POST"]);
        return { expected: null };
      },
    ],
  ];
  const [, apply] = random.pick(choices);
  return apply();
}

function mutateBody(
  random: Random,
  route: RouteTemplate,
  base: unknown,
  current: Buffer,
  caps: FuzzCaps,
  mutations: string[],
): { body: Buffer; expected: number | null } {
  const text = current.length > 0 ? current.toString() : JSON.stringify(base ?? {});
  // Sluice parses the body itself (a route that takes none parses one that is sent).
  const parsed = route.reads === "bounded" || route.reads === "admin";
  const bad = parsed ? 400 : null;
  const choices: Array<[string, () => { body: Buffer; expected: number | null }]> = [
    ["empty", () => ({ body: Buffer.alloc(0), expected: route.body && parsed ? 400 : null })],
    [
      "truncated",
      () => ({
        body: Buffer.from(text.slice(0, random.int(Math.max(1, text.length)))),
        expected: route.body && parsed ? 400 : null,
      }),
    ],
    [
      "wrong type",
      () => {
        const [name, value] = random.pick(wrongValues);
        const { described, path, result } = replaceSomewhere(random, base, value);
        mutations.push(`${described} := ${name}`);
        return {
          body: Buffer.from(JSON.stringify(result)),
          expected: parsed ? wrongTypeStatus(route, base, path, value) : null,
        };
      },
    ],
    [
      "raw value",
      () => {
        const [name, raw] = random.pick(rawValues);
        const marker = "\u0001RAW\u0001";
        const { described, path, result } = replaceSomewhere(random, base, marker);
        mutations.push(`${described} := raw ${name}`);
        const notJson = ["NaN", "undefined", "single quotes", "raw NUL in string"].includes(name);
        const deep = name.startsWith("deep") && route.reads === "bounded";
        const overNumber = name.endsWith("1e999") && path?.[0] !== "outputSchema" && stringAt(base, path);
        return {
          body: Buffer.from(JSON.stringify(result).replace(JSON.stringify(marker), raw)),
          expected: path === null || notJson || deep || overNumber ? bad : null,
        };
      },
    ],
    ["top-level array", () => ({ body: Buffer.from(`[${text}]`), expected: bad })],
    ["top-level string", () => ({ body: Buffer.from(JSON.stringify(text)), expected: bad })],
    ["top-level null", () => ({ body: Buffer.from("null"), expected: bad })],
    ["top-level number", () => ({ body: Buffer.from("12"), expected: bad })],
    ["deep nesting", () => ({ body: Buffer.from(`${"[".repeat(5000)}${"]".repeat(5000)}`), expected: bad })],
    ["wide", () => ({ body: Buffer.from(`{"a":[${"0,".repeat(12000)}0]}`), expected: bad })],
    [
      "__proto__ key",
      () => ({
        body: Buffer.from(text.replace(/^\{/, '{"__proto__":{"polluted":true,"text":1},')),
        expected: route.reads === "admin" ? 400 : null,
      }),
    ],
    [
      "constructor key",
      () => ({
        body: Buffer.from(text.replace(/^\{/, '{"constructor":{"prototype":{"x":1}},')),
        expected: route.reads === "admin" ? 400 : null,
      }),
    ],
    ["duplicate keys", () => ({ body: Buffer.from(duplicateFirstKey(text)), expected: null })],
    [
      "invalid UTF-8",
      () => ({ body: insertBytes(random, Buffer.from(text), random.pick(invalidUtf8)), expected: bad }),
    ],
    [
      "raw NUL byte",
      () => ({ body: insertBytes(random, Buffer.from(text), Buffer.from([0])), expected: bad }),
    ],
    [
      "BOM",
      () => ({ body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]), expected: null }),
    ],
    [
      "double BOM",
      () => ({
        body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf]), Buffer.from(text)]),
        expected: bad,
      }),
    ],
    ["UTF-16", () => ({ body: Buffer.from(`\ufeff${text}`, "utf16le"), expected: bad })],
    ["trailing garbage", () => ({ body: Buffer.from(`${text} x`), expected: bad })],
    ["two objects", () => ({ body: Buffer.from(`${text}${text}`), expected: bad })],
    ["comments", () => ({ body: Buffer.from(`/* c */${text}`), expected: bad })],
    ["just over the cap", () => ({ body: overCap(text, caps), expected: route.reads ? 413 : null })],
    [
      // What SQLite stores and PostgreSQL refuses, in a string Sluice may store (a model name, a
      // project's name): a NUL, a lone surrogate, bytes that are not UTF-8 (read as latin1 for a
      // forwarded call's row). Written as JSON escapes the body is valid JSON; raw, it is not.
      "storage-hostile string",
      () => {
        const [name, raw, valid] = random.pick(storageHostileStrings);
        const marker = "\u0001RAW\u0001";
        const { described, path, result } = replaceString(random, base, marker);
        mutations.push(`${described} := ${name}`);
        const bytes = Buffer.from(JSON.stringify(result));
        const at = bytes.indexOf(JSON.stringify(marker));
        return {
          body:
            at < 0
              ? bytes
              : Buffer.concat([
                  bytes.subarray(0, at),
                  raw,
                  bytes.subarray(at + Buffer.byteLength(JSON.stringify(marker))),
                ]),
          expected: path !== null && !valid ? bad : null,
        };
      },
    ],
  ];
  if (
    route.reads === "admin" &&
    base !== undefined &&
    typeof base === "object" &&
    "name" in (base as object)
  ) {
    // The output schema's own caps (docs/api.md, Admin API): 65,536 bytes of JSON, 64 levels deep.
    const withSchema = (schema: unknown) => () => ({
      body: Buffer.from(JSON.stringify({ ...(base as object), outputSchema: schema })),
      expected: 422,
    });
    choices.push(
      [
        "output schema just over 65536 bytes",
        withSchema({
          type: "object",
          properties: { a: { type: "string", description: "d".repeat(65_500) } },
        }),
      ],
      [
        "output schema nested 65 deep in a default",
        withSchema({
          type: "object",
          properties: { a: { type: "array", default: JSON.parse(`${"[".repeat(65)}${"]".repeat(65)}`) } },
        }),
      ],
      [
        "output schema that refers to itself",
        withSchema({ $defs: { a: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" }),
      ],
    );
  }
  if (route.reads === "bounded") {
    // A body made for another route lacks this route's field: 400 (docs/api.md: "a missing or ill-typed field").
    const made = (field: string, cases: Array<[unknown, number | null]>) => () => {
      const [value, status] = random.pick(cases);
      const body = field === "" ? value : { [field]: value };
      const own = field === "" ? route.field === "prompt" : route.field === field;
      return { body: Buffer.from(JSON.stringify(body)), expected: own ? status : 400 };
    };
    choices.push(
      ["bad image", made("image", badImages)],
      ["bad pdf", made("pdf", badPdfs)],
      ["bad image options", made("", badImageBodies)],
    );
  }
  // The structured and image routes' own bad values are chosen often: each list is long.
  const special = route.reads === "bounded" && random.chance(0.4);
  const [name, make] = special ? random.pick(choices.slice(-3)) : random.pick(choices);
  if (name !== "wrong type" && name !== "raw value") mutations.push(`body ${name}`);
  return make();
}

/** Whether `base` holds a string at `path`. */
function stringAt(base: unknown, path: string[] | null): boolean {
  if (path === null) return false;
  let node = base;
  for (const key of path) node = (node as Record<string, unknown> | undefined)?.[key];
  return typeof node === "string";
}

/**
 * A field of the wrong JSON type is 400 (docs/api.md: "a missing or ill-typed field"), as is the
 * whole body replaced by something other than an object, and an empty or blank required string of
 * the structured and image routes. Null (clears an optional field on the admin API) and the output
 * schema's inside (422, the schema's own problems) are left undecided.
 */
function wrongTypeStatus(
  route: RouteTemplate,
  base: unknown,
  path: string[] | null,
  value: unknown,
): number | null {
  if (path === null) {
    const object = typeof value === "object" && value !== null && !Array.isArray(value);
    return object ? null : 400;
  }
  if (path[0] === "outputSchema" || value === null) return null;
  // Admin text holding a NUL or an unpaired surrogate is refused: one database engine cannot store it.
  const text = route.reads === "admin" && ["name", "label"].includes(path[0] as string);
  if (text && typeof value === "string" && (value.includes("\u0000") || /[\ud800-\udfff]/u.test(value)))
    return 400;
  let original: unknown = base;
  for (const key of path) original = (original as Record<string, unknown>)[key];
  const typeOf = (v: unknown) => (Array.isArray(v) ? "array" : typeof v);
  if (typeOf(original) !== typeOf(value)) return 400;
  const required = route.reads === "bounded" && path.length === 1;
  if (
    required &&
    typeof value === "string" &&
    value.trim() === "" &&
    ["text", "image", "pdf", "prompt"].includes(path[0] as string)
  )
    return 400;
  return null;
}

function insertBytes(random: Random, text: Buffer, bytes: Buffer): Buffer {
  // Inside a string when there is one, where a parser would otherwise keep the bytes.
  const quote = text.indexOf('"', 2);
  const at = quote > 0 && random.chance(0.7) ? quote : random.int(text.length + 1);
  return Buffer.concat([text.subarray(0, at), bytes, text.subarray(at)]);
}

function duplicateFirstKey(text: string): string {
  const match = /^\{"([^"]+)":/.exec(text);
  if (!match) return `{"a":1,"a":2}`;
  return text.replace(/^\{/, `{"${match[1]}":17,`);
}

/** A JSON object just over SLUICE_MAX_BODY_BYTES (the cap of every route given these caps). */
function overCap(text: string, caps: FuzzCaps): Buffer {
  const target = caps.maxBodyBytes + 1 + (text.length % 7);
  return Buffer.from(
    text.replace(/^\{/, `{"padding":"${"p".repeat(Math.max(0, target - text.length - 13))}",`),
  );
}

/** A string of `base` (anything, when it holds none) replaced by `value`. */
function replaceString(
  random: Random,
  base: unknown,
  value: string,
): { described: string; path: string[] | null; result: unknown } {
  if (base === null || typeof base !== "object") return { described: "body", path: null, result: value };
  const copy = JSON.parse(JSON.stringify(base)) as Record<string, unknown>;
  const paths: string[][] = [];
  const walk = (node: unknown, path: string[]) => {
    if (typeof node === "string") paths.push(path);
    else if (node !== null && typeof node === "object")
      for (const [key, child] of Object.entries(node as Record<string, unknown>)) walk(child, [...path, key]);
  };
  walk(copy, []);
  if (paths.length === 0) return replaceSomewhere(random, base, value);
  // Half the time a string a usage row or a project keeps (a model name, a project's name), if any.
  const stored = paths.filter((path) => ["model", "name", "teamId", "label"].includes(path.at(-1) ?? ""));
  const path = random.pick(stored.length > 0 && random.chance(0.5) ? stored : paths);
  let node = copy as Record<string, unknown>;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, unknown>;
  node[path[path.length - 1] as string] = value;
  return { described: path.join("."), path, result: copy };
}

function replaceSomewhere(
  random: Random,
  base: unknown,
  value: unknown,
): { described: string; path: string[] | null; result: unknown } {
  if (base === null || typeof base !== "object") return { described: "body", path: null, result: value };
  const copy = JSON.parse(JSON.stringify(base)) as Record<string, unknown>;
  const paths: string[][] = [];
  const walk = (node: unknown, path: string[]) => {
    if (path.length > 0) paths.push(path);
    if (node !== null && typeof node === "object")
      for (const [key, child] of Object.entries(node as Record<string, unknown>)) walk(child, [...path, key]);
  };
  walk(copy, []);
  if (paths.length === 0 || random.chance(0.1)) return { described: "body", path: null, result: value };
  const path = random.pick(paths);
  let node = copy as Record<string, unknown>;
  for (const key of path.slice(0, -1)) node = node[key] as Record<string, unknown>;
  node[path[path.length - 1] as string] = value;
  return { described: path.join("."), path, result: copy };
}

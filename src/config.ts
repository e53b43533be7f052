import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseCorsOrigins } from "./http/cors.js";
import { minVaultRetentionDays } from "./images/vault-retention.js";
import { parseTrustedProxies } from "./net/ip-address.js";
import { isModelName, modelNameRule } from "./providers/model-name.js";
import { notAnImageModelOf } from "./usage/model-catalogue.js";
import { defaultUnpricedCallUsd } from "./usage/unpriced-call.js";
import { minRetentionDays } from "./usage/usage-retention.js";

/**
 * The configuration schema: the only place that reads the environment. Every setting has an
 * environment name, a default and a one-line doc; README.md's configuration table lists exactly
 * these (a test checks). `loadConfig` fails fast with every problem named.
 *
 * Values are read by the small parsers below, not a schema library: loading one at every start
 * took a tenth of the start-up budget (docs/decisions/0005).
 */
interface Setting<T> {
  env: string;
  parse: Parser<T>;
  default: string | undefined;
  doc: string;
}

/**
 * Reads a given value (never empty: an empty one is unset) and pushes each problem it finds onto
 * `problems`, in the order checked; what it answers is used only when it found none.
 */
type Parser<T> = (value: string, problems: string[]) => T;

/** A setting without a default is undefined when the environment does not give it. */
function setting<T>(env: string, parse: Parser<T>, defaultValue: string, doc: string): Setting<T>;
function setting<T>(
  env: string,
  parse: Parser<T>,
  defaultValue: undefined,
  doc: string,
): Setting<T | undefined>;
function setting<T>(
  env: string,
  parse: Parser<T>,
  defaultValue: string | undefined,
  doc: string,
): Setting<T> {
  return { env, parse, default: defaultValue, doc };
}

/** A rule a value must follow, and what is wrong with one that does not. */
type Rule = [follows: (value: string) => boolean, problem: string];

const matching = (pattern: RegExp, problem: string): Rule => [(value) => pattern.test(value), problem];
const atLeast = (length: number): Rule => [
  (value) => value.length >= length,
  `must be at least ${length} characters`,
];

/** Text that follows every rule; each rule it breaks is named. */
const text =
  (...rules: Rule[]): Parser<string> =>
  (value, problems) => {
    for (const [follows, problem] of rules) if (!follows(value)) problems.push(problem);
    return value;
  };
const nonEmpty = text(atLeast(1));
/**
 * An address to listen on: no host name or IP address holds a space, which getaddrinfo refused at
 * listen as `ENOTFOUND 127.0.0.1 `, as if the address itself could not be found.
 */
const listenHost = text(
  atLeast(1),
  matching(
    /^[^\s\p{Cc}]+$/u,
    "must be one host name or IP address, without a space, tab or line break, such as 127.0.0.1 or 0.0.0.0",
  ),
);

const oneOf =
  <const V extends string>(...words: V[]): Parser<V> =>
  (value, problems) => {
    if (!(words as string[]).includes(value))
      problems.push(`Invalid option: expected one of ${words.map((word) => JSON.stringify(word)).join("|")}`);
    return value as V;
  };
const bool: Parser<boolean> = (value, problems) => {
  const word = oneOf("0", "1", "true", "false")(value, problems);
  return word === "true" || word === "1";
};

/**
 * A whole number written as digits: `0x10`, `1e3` or ` 5 ` are refused rather than misread (as
 * `Number` would read them). NaN, with `problem` or the overflow named, when it is not one.
 */
function wholeNumber(value: string, problem: string, problems: string[]): number {
  if (!/^[0-9]+$/.test(value)) problems.push(problem);
  else if (!Number.isFinite(Number(value)))
    problems.push("Invalid input: expected number, received Infinity");
  else return Number(value);
  return Number.NaN;
}
/**
 * A whole number from `min` to `max`; a value too large is named once. `notDigits`: what a value
 * that is not digits is told.
 */
const integer =
  (
    min: number,
    max = Number.MAX_SAFE_INTEGER,
    notDigits = "must be a whole number written as digits, such as 10",
  ): Parser<number> =>
  (value, problems) => {
    const number = wholeNumber(value, notDigits, problems);
    if (number < min) problems.push(`must be at least ${min}`);
    else if (number > max) problems.push(`must be at most ${max}`);
    return number;
  };
/**
 * A size in whole bytes, at least `min`: `20MB` or `2e7` are refused, named with the unit and a
 * size a setting takes (the plain integer's "such as 10" is below every size's 1024).
 */
const bytes = (min: number): Parser<number> =>
  integer(
    min,
    Number.MAX_SAFE_INTEGER,
    "must be a whole number of bytes, written as digits without a unit, such as 20971520 (20 MiB)",
  );
/**
 * A time limit in whole milliseconds, written as digits: `10s` or `1e4` are refused rather than
 * misread, and so is anything above a day (Node runs a timer longer than about 24.8 days at once).
 */
const millisecondsFrom =
  (min: number, max = 86_400_000): Parser<number> =>
  (value, problems) => {
    const number = wholeNumber(value, "must be a whole number of milliseconds, such as 10000", problems);
    if (number < min) problems.push(`must be at least ${min} ms`);
    else if (number > max) problems.push(`must be at most ${max} ms${max === 86_400_000 ? " (a day)" : ""}`);
    return number;
  };
const milliseconds = millisecondsFrom(1);
/**
 * An amount in USD above 0 and at most a billion, written as digits with at most 9 decimal places
 * (costs are recorded to the billionth): `1e-3` or `.5` are refused rather than misread.
 */
const usdAmount: Parser<number> = (value, problems) => {
  if (!/^[0-9]+(\.[0-9]{1,9})?$/.test(value)) {
    problems.push("must be an amount in USD written as digits, to the billionth at the finest, such as 0.1");
    return Number.NaN;
  }
  const amount = Number(value);
  if (!(amount > 0)) problems.push("must be above 0");
  else if (amount > 1e9) problems.push("must be at most 1000000000");
  return amount;
};
/**
 * A value sent in an HTTP header (provider B's version, S3's signed credential): Node refuses a
 * line break or a control character in one, which would fail every call that sends it.
 */
const headerValue = text(
  atLeast(1),
  matching(
    /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/,
    "must be a valid HTTP header value: printable ASCII, no line break or control character, no space at either end",
  ),
);
/**
 * Why a value is no URL: written with its scheme (`postgres://`), the part after it does not parse,
 * a port past 65535 named as such; without one, the usual slip (a host and path: `api.openai.com/v1`).
 */
function whyNoUrl(value: string, example: string): string {
  const scheme = /^([a-z][a-z0-9+.-]*:\/\/)(?:[^/?#@]*@)?(?:\[[^\]]*\]|[^/?#:]*)(?::(\d+))?/i.exec(value);
  if (scheme === null) return `write it whole, its scheme included, such as ${example}`;
  const port = scheme[2];
  if (port !== undefined && Number(port) > 65535) return `its port ${port} is above 65535`;
  return `what follows ${scheme[1]} is no host (a space, or a character a host name cannot hold?)`;
}

/**
 * A URL that follows `rules`. The value kept is the one parsed: without spaces at either end, nor
 * tabs and line breaks (which the URL parser drops). One that does not parse is kept as given, for
 * the rules, which leave it to this check; it is named with `example`, a URL of the form the
 * setting takes (a host and path without their scheme, `api.openai.com/v1`, is the usual slip).
 */
const url = (example: string, ...rules: Rule[]): Parser<string> => {
  const followsRules = text(...rules);
  return (value, problems) => {
    const trimmed = value.trim();
    if (URL.canParse(trimmed)) return followsRules(trimmed.replace(/[\t\n\r]/g, ""), problems);
    problems.push(`is not a URL: ${whyNoUrl(trimmed, example)}`);
    return followsRules(value, problems);
  };
};
/** A URL of one of `schemes` (`postgres:`, say): another scheme would be misread, not refused, later. */
const schemeOf = (schemes: string[], problem: string): Rule => [
  (value) => !URL.canParse(value) || schemes.includes(new URL(value).protocol),
  problem,
];
/** An http:// or https:// URL: another scheme (or `host:port` without one) would fail every call. */
const httpScheme = schemeOf(["http:", "https:"], "must be an http:// or https:// URL");
/**
 * An http(s) URL that paths are appended to, without a query, fragment or user info, which would
 * take in or lose every path appended, or hand out credentials: `why` says what it is used for.
 */
const bareBaseUrl = (why: string, example: string): Parser<string> =>
  url(example, httpScheme, [
    isBareBaseUrl,
    `must be a base URL without a query (?), fragment (#) or user info: ${why}`,
  ]);
/**
 * `SLUICE_PUBLIC_URL`: `<base>/v1/vault/…?expires=…`; user info would be handed to every app in
 * every signed URL. A path is kept.
 */
const baseUrl = bareBaseUrl(
  "signed vault URLs, which apps receive, append their path and query to it",
  "https://sluice.example.com",
);
/**
 * A provider's base URL: its calls go to the URL's origin and path (provider-adapter.ts), so a query,
 * fragment or user info in it would be dropped without a word (an Azure-style `?api-version=`, a
 * password). Nor may it end with one of the provider's `endpoints`, which the calls append: the
 * providers' documentation gives them whole (`https://api.anthropic.com/v1/messages`), and taken as
 * the base every call went to `…/v1/messages/messages`, a 404.
 */
const upstreamBaseUrl = (example: string, endpoints: RegExp): Parser<string> => {
  const base = bareBaseUrl(
    "a provider's calls go to its origin and path only, and the rest would be dropped",
    example,
  );
  return (value, problems) => {
    const given = base(value, problems);
    if (URL.canParse(given) && endpoints.test(new URL(given).pathname.replace(/\/+$/, "")))
      problems.push(
        `must not end with an endpoint's path, which Sluice appends to it: give the base URL, such as ${example}`,
      );
    return given;
  };
};
/**
 * Apple's DeviceCheck hosts and the S3 endpoint: Apple's path would go after a query (`?x=1/v1/…`,
 * every call asking for `/`); fetch refuses a URL that holds credentials, with an error that quotes
 * it, password included; the S3 vault signs with its own credentials and would drop them, and a
 * query, without a word. The message never shows the value, its password among it.
 */
const serviceUrl = (example: string) =>
  bareBaseUrl("calls append their path to it, and credentials go in the settings made for them", example);
/**
 * Apple's DeviceCheck host: Apple's documentation gives the endpoint whole
 * (`https://api.devicecheck.apple.com/v1/validate_device_token`), and taken as the host it sent
 * every validation to `…/v1/validate_device_token/v1/validate_device_token`, a 404 (503 to every
 * device-token call). A path before it (a proxy's prefix) is kept.
 */
const deviceCheckUrl = (example: string): Parser<string> => {
  const base = serviceUrl(example);
  return (value, problems) => {
    const given = base(value, problems);
    if (URL.canParse(given) && /\/v1(?:\/validate_device_token)?\/*$/.test(new URL(given).pathname))
      problems.push(
        `must not end with /v1 or /v1/validate_device_token, which Sluice appends to it: give the host alone (such as ${example})`,
      );
    return given;
  };
};
/** Whether every one of `parts` decodes as percent-encoding (`decodeURIComponent` does not throw). */
function isPercentEncoded(...parts: string[]): boolean {
  try {
    for (const part of parts) decodeURIComponent(part);
    return true;
  } catch {
    return false;
  }
}
/** A URL with no query, fragment or user info (one that does not parse is url's to refuse). */
function isBareBaseUrl(value: string): boolean {
  if (!URL.canParse(value)) return true;
  const url = new URL(value);
  return !/[?#]/.test(value) && url.username === "" && url.password === "";
}
/**
 * A provider's default image model: a model name (it becomes part of provider C's URL) that the
 * catalogue lists as an image model of that provider, or does not list at all (catalogues lag the
 * providers' new models).
 */
const imageModelOf =
  (provider: "provider-a" | "provider-c"): Parser<string> =>
  (name, problems) => {
    if (!isModelName(name)) problems.push(modelNameRule);
    const listedBy = notAnImageModelOf(provider, name)?.listedBy;
    if (listedBy === provider)
      problems.push(
        `must be an image model of ${provider}: the catalogue lists ${name} as another kind of model`,
      );
    else if (listedBy !== undefined)
      problems.push(
        `must be an image model of ${provider}: the catalogue lists ${name} as a ${listedBy} model`,
      );
    return name;
  };
/** A list read by `parse`, which answers the list or what is wrong with the value. */
const parsedList =
  (parse: (value: string) => string[] | string): Parser<string[]> =>
  (value, problems) => {
    const parsed = parse(value);
    if (typeof parsed === "string") problems.push(parsed);
    return typeof parsed === "string" ? [] : parsed;
  };

/** The sslmode values of a DATABASE_URL that node-postgres knows (pg-connection-string). */
const postgresSslModes = ["disable", "prefer", "require", "verify-ca", "verify-full", "no-verify"];

/**
 * The longest SLUICE_DEVICE_TOKEN_TTL_SECONDS: the Redis ledger's scripts hand Redis the lifetime
 * in ms as a Lua number, which Redis writes in exponent notation (and then refuses as an expiry)
 * from 1e17 ms; a year is far below that, and longer than any app needs to trust a token.
 */
export const deviceTokenTtlMaxSeconds = 31_536_000;
/**
 * The longest SLUICE_VAULT_URL_TTL_SECONDS: a local vault URL's expiry (unix seconds) must keep to
 * the 15 digits its check takes, or every URL signed would be refused; 10 years keeps to them.
 */
export const vaultUrlTtlMaxSeconds = 315_360_000;

export const settings = {
  port: setting("PORT", integer(0, 65535), "8787", "TCP port the gateway listens on"),
  host: setting("HOST", listenHost, "127.0.0.1", "address the gateway binds to"),
  environment: setting(
    "SLUICE_ENV",
    oneOf("development", "production", "test"),
    "development",
    "`production` requires SLUICE_MASTER_KEY and refuses to generate one, refuses the README quick start's example SLUICE_ADMIN_TOKEN, turns Test Mode off (test keys are refused, no project is put in it), and warns at start when it serves plain HTTP with no SLUICE_TRUST_PROXY; `development` and `test` behave alike",
  ),
  dataDir: setting(
    "SLUICE_DATA_DIR",
    // A space at an end (an env file's trailing blank) names another directory, which the start
    // created and served an empty database from, generating a new master key outside production.
    text(
      atLeast(1),
      matching(
        /^(?!\s)[\s\S]*(?<!\s)$/,
        "must have no space, tab or line break at either end, which would make it another directory",
      ),
    ),
    "./data",
    "embedded database, generated master key, local vault; no space at either end",
  ),
  databaseUrl: setting(
    "DATABASE_URL",
    url(
      "postgres://user@host:5432/db",
      schemeOf(
        ["postgres:", "postgresql:", "socket:"],
        "must be a postgres:// or postgresql:// URL (or node-postgres's socket:/path form)",
      ),
      [
        // node-postgres reads any other sslmode (libpq's `allow`, a typo) as verify-full, without a word.
        (value) =>
          !URL.canParse(value) ||
          new URL(value).searchParams.getAll("sslmode").every((mode) => postgresSslModes.includes(mode)),
        `sslmode must be ${postgresSslModes.slice(0, -1).join(", ")} or ${postgresSslModes.at(-1)}`,
      ],
    ),
    undefined,
    "PostgreSQL URL (`postgres://`, `postgresql://`, or node-postgres's `socket:/path` form) for several instances; its `sslmode`, when given, one of node-postgres's (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`, `no-verify`); needs SLUICE_MASTER_KEY unless the data dir holds a `master.key`; a pooler such as PgBouncer may stand between, in session or transaction mode ([Several instances](#several-instances)) (unset: SQLite in the data dir)",
  ),
  databaseQueryTimeoutMs: setting(
    "SLUICE_DATABASE_QUERY_TIMEOUT_MS",
    milliseconds,
    "10000",
    "PostgreSQL: a query unanswered this long, the wait for its connection included (opening one, or a free one of the pool's), fails as an outage (503, usage rows kept queued) and its connection is closed; opening a connection waits at most 5 s of it",
  ),
  usageReportTimeoutMs: setting(
    "SLUICE_USAGE_REPORT_TIMEOUT_MS",
    milliseconds,
    "60000",
    "PostgreSQL: how long the server may work on one admin usage report before it cancels it (503 asking for a shorter range; the CLI's `usage` command too)",
  ),
  databaseStartTimeoutMs: setting(
    "SLUICE_DATABASE_START_TIMEOUT_MS",
    milliseconds,
    "60000",
    "PostgreSQL: longest time opening it may take at start and before each CLI command (connecting, waiting for the migration lock, migrating); past it the start fails naming DATABASE_URL and what it waited for (raise it for a migration that rewrites a large table)",
  ),
  redisUrl: setting(
    "REDIS_URL",
    url(
      "redis://host:6379",
      schemeOf(["redis:", "rediss:"], "must be a redis:// or rediss:// URL"),
      [
        // ioredis reads the path as the database index: `/abc` became SELECT NaN, and then keys in
        // database 0; `/1/2` became database 1.
        (value) => !URL.canParse(value) || /^(?:\/[0-9]*)?$/.test(new URL(value).pathname),
        "the path must be a database index (`/N`) or nothing",
      ],
      [
        // ioredis decodes them at start: a stray `%` failed it with a bare "URI malformed".
        (value) => !URL.canParse(value) || isPercentEncoded(new URL(value).username, new URL(value).password),
        "the user and password must be percent-encoded (a `%` written `%25`)",
      ],
    ),
    undefined,
    "Redis URL (`redis://` or `rediss://`) for shared limits and caches (unset: in-process); a user, password or database index (`/N`) Redis refuses stops the start, as does `rediss://` to a Redis without TLS",
  ),
  redisCommandTimeoutMs: setting(
    "SLUICE_REDIS_COMMAND_TIMEOUT_MS",
    millisecondsFrom(100, 10_000),
    "500",
    "Redis: a command unanswered this long fails and its connection is replaced (the limits, the authentication throttle, the DeviceCheck ledger and the spend cap's calls in flight answer as without Redis, which then rests until a write of the gateway's own succeeds, tried every 2 s, or up to 32 s apart when Redis failed again soon after taking one), so the requests in flight when Redis hangs wait this long once; raise it for a Redis far away whose round trips come near it (100 ms to 10 s)",
  ),
  redisKeyPrefix: setting(
    "SLUICE_REDIS_KEY_PREFIX",
    text(
      [(value) => value.length <= 64, "must be at most 64 characters"],
      // Redis takes any bytes, but an operator types the prefix into `redis-cli --scan --pattern` and
      // reads it in logs: it must show as it is, with no space or control character to get lost.
      matching(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces, such as `staging:`"),
    ),
    undefined,
    "prefix of every Redis key Sluice reads or writes (rate limits, failed-authentication counts, DeviceCheck ledger, the spend cap's calls in flight), put before it as given (`staging:` makes `sluice:rl:…` `staging:sluice:rl:…`): deployments sharing one Redis count apart under prefixes of their own, and the instances of one deployment need the same one; at most 64 printable ASCII characters without spaces (unset: no prefix, the keys of earlier versions)",
  ),
  adminToken: setting(
    "SLUICE_ADMIN_TOKEN",
    text(
      atLeast(16),
      // It travels as `Authorization: Bearer <token>`: a space or a non-ASCII character could never match.
      matching(/^[\x21-\x7e]+$/, "must be printable ASCII without spaces"),
    ),
    undefined,
    "bearer token for /admin/v1, at least 16 printable ASCII characters without spaces (unset: admin API off; the CLI works locally)",
  ),
  masterKey: setting(
    "SLUICE_MASTER_KEY",
    // Checked with every other setting, so a bad key is named beside them (its value never is).
    text(atLeast(1), [
      (value) => Buffer.from(value, "base64").length === 32,
      "must be 32 bytes, base64-encoded (e.g. `openssl rand -base64 32`)",
    ]),
    undefined,
    "32-byte key (base64) for secrets at rest (unset: generated into the data dir on the embedded SQLite default, development only, unless the database there already holds sealed secrets: that start is refused, writing no key)",
  ),
  masterKeyPrevious: setting(
    "SLUICE_MASTER_KEY_PREVIOUS",
    text(atLeast(1), [
      (value) => Buffer.from(value, "base64").length === 32,
      "must be 32 bytes, base64-encoded (e.g. `openssl rand -base64 32`)",
    ]),
    undefined,
    "the master key being rotated away from, during a rotation (README, Rotating the master key): secrets are sealed under SLUICE_MASTER_KEY and opened under either, until `sluice master-key reseal` has moved them all; set only beside SLUICE_MASTER_KEY (unset: no rotation under way)",
  ),
  providerABaseUrl: setting(
    "SLUICE_PROVIDER_A_BASE_URL",
    upstreamBaseUrl(
      "https://api.openai.com/v1",
      /\/(?:chat\/completions|completions|responses|embeddings|images\/(?:generations|edits))$/,
    ),
    "https://api.openai.com/v1",
    "provider A upstream base URL, without an endpoint's path (`/chat/completions`), which Sluice appends",
  ),
  providerBBaseUrl: setting(
    "SLUICE_PROVIDER_B_BASE_URL",
    upstreamBaseUrl("https://api.anthropic.com/v1", /\/messages$/),
    "https://api.anthropic.com/v1",
    "provider B upstream base URL, without an endpoint's path (`/messages`), which Sluice appends",
  ),
  providerCBaseUrl: setting(
    "SLUICE_PROVIDER_C_BASE_URL",
    upstreamBaseUrl("https://generativelanguage.googleapis.com/v1beta", /\/models(?:\/[^/]*)?$/),
    "https://generativelanguage.googleapis.com/v1beta",
    "provider C upstream base URL, without an endpoint's path (`/models/…`), which Sluice appends (its `/v1` and `/v1alpha` siblings serve `v1/...` and `v1alpha/...` paths)",
  ),
  providerAImageModel: setting(
    "SLUICE_PROVIDER_A_IMAGE_MODEL",
    imageModelOf("provider-a"),
    "gpt-image-1",
    "provider A's image model for /v1/image calls that name none and whose project's model is not one (the default is SPEC's first, which OpenAI shut down on 2026-10-23: set a current one, such as gpt-image-2.6-sunburst)",
  ),
  providerCImageModel: setting(
    "SLUICE_PROVIDER_C_IMAGE_MODEL",
    imageModelOf("provider-c"),
    "imagen-4.0-generate-001",
    "provider C's image model for /v1/image calls that name none and whose project's model is not one (the default is SPEC's standard model, which Google shut down on 2026-08-17: set a current one, such as gemini-nano-banana-2.1)",
  ),
  providerBVersion: setting(
    "SLUICE_PROVIDER_B_VERSION",
    headerValue,
    "2023-06-01",
    "provider B version header sent upstream",
  ),
  upstreamConnectTimeoutMs: setting(
    "SLUICE_UPSTREAM_CONNECT_TIMEOUT_MS",
    milliseconds,
    "10000",
    "upstream TCP/TLS connect timeout",
  ),
  upstreamHeadersTimeoutMs: setting(
    "SLUICE_UPSTREAM_HEADERS_TIMEOUT_MS",
    milliseconds,
    "600000",
    "time allowed for the upstream response headers: a buffered call to a reasoning model can take minutes, and the providers' SDKs wait 10 minutes",
  ),
  upstreamIdleTimeoutMs: setting(
    "SLUICE_UPSTREAM_IDLE_TIMEOUT_MS",
    milliseconds,
    "300000",
    "longest silence allowed between two upstream body chunks, and longest a client may leave an answer unread while Sluice waits to write to it (the stream is then cut)",
  ),
  deviceCheckProductionUrl: setting(
    "SLUICE_DEVICECHECK_PRODUCTION_URL",
    deviceCheckUrl("https://api.devicecheck.apple.com"),
    "https://api.devicecheck.apple.com",
    "Apple DeviceCheck production host, without user info, query or fragment, nor the `/v1/validate_device_token` Sluice appends",
  ),
  deviceCheckDevelopmentUrl: setting(
    "SLUICE_DEVICECHECK_DEVELOPMENT_URL",
    deviceCheckUrl("https://api.development.devicecheck.apple.com"),
    "https://api.development.devicecheck.apple.com",
    "Apple DeviceCheck development host, without user info, query or fragment, nor the `/v1/validate_device_token` Sluice appends",
  ),
  deviceCheckTimeoutMs: setting(
    "SLUICE_DEVICECHECK_TIMEOUT_MS",
    milliseconds,
    "3000",
    "timeout of one Apple validation call",
  ),
  deviceTokenTtlSeconds: setting(
    "SLUICE_DEVICE_TOKEN_TTL_SECONDS",
    integer(1, deviceTokenTtlMaxSeconds),
    "3600",
    "how long a verified device token is trusted without asking Apple again (at most 31536000, a year)",
  ),
  deviceTokenBudget: setting(
    "SLUICE_DEVICE_TOKEN_BUDGET",
    integer(1),
    "1000",
    "requests one verified device token may make within its TTL",
  ),
  maxBodyBytes: setting(
    "SLUICE_MAX_BODY_BYTES",
    bytes(1024),
    "20971520",
    "largest request body accepted (413 above); /v1/vision and /v1/pdf take what their image or PDF cap needs in base64 when that is more",
  ),
  maxImageBytes: setting(
    "SLUICE_MAX_IMAGE_BYTES",
    bytes(1024),
    "10485760",
    "largest decoded /v1/vision image (413 above)",
  ),
  maxPdfBytes: setting(
    "SLUICE_MAX_PDF_BYTES",
    bytes(1024),
    "20971520",
    "largest PDF, inline or fetched (413 above)",
  ),
  maxProviderResponseBytes: setting(
    "SLUICE_MAX_PROVIDER_RESPONSE_BYTES",
    bytes(1024),
    "134217728",
    "largest provider answer /v1/text, /v1/vision, /v1/pdf and /v1/image take (502 `PROVIDER_ERROR` above), counted as it arrives; 128 MiB holds /v1/image's largest call, 20 images in base64 of a few MiB each",
  ),
  pdfFetchTimeoutMs: setting(
    "SLUICE_PDF_FETCH_TIMEOUT_MS",
    milliseconds,
    "15000",
    "time allowed to fetch a PDF by URL",
  ),
  maxPdfFetches: setting(
    "SLUICE_MAX_PDF_FETCHES",
    integer(1),
    "8",
    "PDF fetches by URL (/v1/pdf) running at once on this instance, each holding up to SLUICE_MAX_PDF_BYTES of its PDF for up to SLUICE_PDF_FETCH_TIMEOUT_MS (160 MiB in all with the defaults); one more is answered 503 `SERVICE_UNAVAILABLE` (`Retry-After: 5`) before any lookup or connection",
  ),
  maxPdfFetchesPerProject: setting(
    "SLUICE_MAX_PDF_FETCHES_PER_PROJECT",
    integer(1),
    undefined,
    "of SLUICE_MAX_PDF_FETCHES, the fetches one project runs at once on this instance, so that a project whose PDF hosts are slow leaves the other places to the other projects; its one more is answered 429 `TOO_MANY_REQUESTS` (`Retry-After: 1`) before any lookup or connection (unset: half of SLUICE_MAX_PDF_FETCHES, rounded up, 4 of the default 8; set it to SLUICE_MAX_PDF_FETCHES where one project is the only one)",
  ),
  maxBufferedBodyBytes: setting(
    "SLUICE_MAX_BUFFERED_BODY_BYTES",
    bytes(0),
    undefined,
    "request-body bytes the proxies, /v1/text, /v1/vision, /v1/pdf and /v1/image hold in memory, all their calls together on this instance, each body counted as it arrives and held until its call ends (a PDF fetched by URL too, as its base64, as it arrives, the rest not downloaded once past it; a structured or image call holds about 6 times its body's size while it waits for the provider, half of it in V8's heap), or on the proxies until it is sent when over 64 KiB; a /v1/image call also reserves its images before its provider call, `n` times 4 bytes a pixel (their PNG in base64: 4 MiB at 1024x1024, provider A's `size` or else a megapixel), their real size once they come; a proxied JSON answer's bytes over 64 KiB that the usage meter keeps whole (up to 4 MiB) count too while there is room, and are otherwise not kept (the answer read from its ends, as one over 4 MiB, never refused); a body or image call that would go past it is answered 503 `SERVICE_UNAVAILABLE` (`Retry-After: 5`), before any of it is read when its content-length says so, but a body alone (no other call's held beside it) always fits; 0: no cap (unset: an eighth of V8's heap limit, which `--max-old-space-size` sets and Node otherwise derives from the machine's memory, e.g. 518 MiB for Node's largest default of 4144 MiB)",
  ),
  projectCacheTtlMs: setting(
    "SLUICE_PROJECT_CACHE_TTL_MS",
    millisecondsFrom(0),
    "2000",
    "how long an instance trusts its cached copy of a project or key record",
  ),
  projectCacheMaxStaleMs: setting(
    "SLUICE_PROJECT_CACHE_MAX_STALE_MS",
    milliseconds,
    "300000",
    "while the database cannot be read, how old a cached project or key record may be and still be served; past it those calls get 503, so a revocation made elsewhere is honoured within this time even then",
  ),
  usageFlushIntervalMs: setting(
    "SLUICE_USAGE_FLUSH_INTERVAL_MS",
    millisecondsFrom(10),
    "250",
    "how often queued usage rows are written",
  ),
  usageQueueMax: setting(
    "SLUICE_USAGE_QUEUE_MAX",
    integer(100),
    "100000",
    "usage rows held in memory while the database is down (oldest kept, but a call's row takes the place of refused requests' rows; overflow counted)",
  ),
  usageRetentionDays: setting(
    "SLUICE_USAGE_RETENTION_DAYS",
    integer(minRetentionDays),
    undefined,
    `days usage rows are kept: older ones are deleted hourly, in small batches (unset: kept forever); at least ${minRetentionDays}, so the current and previous calendar months (UTC), which spend caps and reports read, are always kept whole`,
  ),
  unpricedCallUsd: setting(
    "SLUICE_UNPRICED_CALL_USD",
    usdAmount,
    String(defaultUnpricedCallUsd),
    "what a project's monthly spend cap counts a call of unknown cost at, at least (a model or option the catalogue has no price for, a stream cut before its usage): the largest known cost of one call of the project this month when larger; and each call in flight at, until the month's first call of known cost (then the largest known cost); never in the usage rows or reports",
  ),
  authFailureLimit: setting(
    "SLUICE_AUTH_FAILURE_LIMIT",
    integer(1),
    "30",
    "failed authentications per client IP and project (per client IP for unknown project ids and the admin API) per minute before 429 (apps and admin API counted apart)",
  ),
  rateLimitProjectPerMinute: setting(
    "SLUICE_RATE_LIMIT_PROJECT_PER_MINUTE",
    integer(1),
    "6000",
    "default requests per minute per project (a project may set its own)",
  ),
  rateLimitDevicePerMinute: setting(
    "SLUICE_RATE_LIMIT_DEVICE_PER_MINUTE",
    integer(1),
    "120",
    "default requests per minute per device token",
  ),
  rateLimitIpPerMinute: setting(
    "SLUICE_RATE_LIMIT_IP_PER_MINUTE",
    integer(1),
    "600",
    "default requests per minute per client IP within each project",
  ),
  maxConnectionsPerIp: setting(
    "SLUICE_MAX_CONNECTIONS_PER_IP",
    integer(0),
    "1024",
    "connections one peer address may hold open at once (IPv4-mapped IPv6 counts as its IPv4 address, IPv6 with the rest of its /64); one more is answered 429 `TOO_MANY_REQUESTS` and closed (over TLS: cut before the handshake); addresses in SLUICE_TRUST_PROXY are not capped; 0: no cap",
  ),
  maxConnections: setting(
    "SLUICE_MAX_CONNECTIONS",
    integer(0),
    undefined,
    "connections all peers together may hold open at once, trusted proxies' included, so that the process keeps file descriptors for its own sockets to providers, PostgreSQL and Redis and for its files; one more is answered 503 `SERVICE_UNAVAILABLE` (`Retry-After: 5`) and closed (over TLS: cut before the handshake); 0: no cap (unset: derived at start from the process's open-file limit, the soft `Max open files` of /proc/self/limits: a reserve of a tenth of it, at least 256, is kept, and half the rest may be connections, since each may wait on a provider's socket, e.g. 29491 for 65536; 4096 where the limit cannot be read or is unlimited, as off Linux)",
  ),
  publicUrl: setting(
    "SLUICE_PUBLIC_URL",
    baseUrl,
    undefined,
    "external base URL used in signed vault URLs, a path allowed but no query, fragment or user info (unset: the address the gateway listens on, with the port it got and an IPv6 address in brackets, e.g. `http://[::1]:41234`)",
  ),
  vaultUrlTtlSeconds: setting(
    "SLUICE_VAULT_URL_TTL_SECONDS",
    integer(1, vaultUrlTtlMaxSeconds),
    "3600",
    "lifetime of a signed vault URL (at most 315360000, 10 years; 604800, 7 days, with an S3 vault); lowered, it shortens the local vault's URLs already handed out too, to this long from when each was signed (S3's keep theirs)",
  ),
  vaultTimeoutMs: setting(
    "SLUICE_VAULT_TIMEOUT_MS",
    milliseconds,
    "10000",
    "time allowed to store one generated image in the vault (503 after)",
  ),
  vaultRetentionDays: setting(
    "SLUICE_VAULT_RETENTION_DAYS",
    integer(1),
    undefined,
    "days generated images are kept in the local vault: the days (UTC) before are deleted hourly (unset: kept forever); at least the days SLUICE_VAULT_URL_TTL_SECONDS, SLUICE_VAULT_TIMEOUT_MS and a second span together (1 with their defaults), so no image is deleted while a URL to it may be valid; the S3 vault is not pruned (give its bucket a lifecycle rule)",
  ),
  vaultS3Endpoint: setting(
    "SLUICE_VAULT_S3_ENDPOINT",
    serviceUrl("https://s3.us-east-1.amazonaws.com"),
    undefined,
    "S3-compatible endpoint, without user info, query or fragment (set: vault in S3)",
  ),
  vaultS3Bucket: setting(
    "SLUICE_VAULT_S3_BUCKET",
    // It becomes a segment of every object's path (or its host): a `/` or a space (a copied name's
    // newline) is in no bucket's name, and every /v1/image call would have failed on it with a 503.
    text(
      atLeast(1),
      matching(/^[^\s/\p{Cc}]+$/u, "must be a bucket name, without a `/`, space or control character"),
    ),
    undefined,
    "S3 bucket of the vault, without a `/`, space or control character",
  ),
  vaultS3Region: setting(
    "SLUICE_VAULT_S3_REGION",
    headerValue,
    "us-east-1",
    "S3 region, the one an AWS endpoint's host names (`s3.eu-west-3.amazonaws.com`: `eu-west-3`)",
  ),
  vaultS3AccessKeyId: setting("SLUICE_VAULT_S3_ACCESS_KEY_ID", headerValue, undefined, "S3 access key id"),
  vaultS3SecretAccessKey: setting(
    "SLUICE_VAULT_S3_SECRET_ACCESS_KEY",
    // Nothing checks it at start: one read from a file with its newline (a Kubernetes secret, say)
    // signed every /v1/image call with the newline, which S3 refused (503). Never shown.
    text(
      atLeast(1),
      matching(
        /^(?!\s)[^\p{Cc}]*(?<!\s)$/u,
        "must have no space at either end and no line break or control character (a file's trailing newline?): S3 would refuse every call signed with it",
      ),
    ),
    undefined,
    "S3 secret access key, without a space at either end or a line break",
  ),
  logLevel: setting(
    "LOG_LEVEL",
    oneOf("fatal", "error", "warn", "info", "debug", "trace", "silent"),
    "info",
    "pino log level",
  ),
  tlsCert: setting("SLUICE_TLS_CERT", nonEmpty, undefined, "PEM certificate file: serve HTTPS directly"),
  tlsKey: setting("SLUICE_TLS_KEY", nonEmpty, undefined, "PEM private key file for SLUICE_TLS_CERT"),
  trustProxy: setting(
    "SLUICE_TRUST_PROXY",
    parsedList(parseTrustedProxies),
    undefined,
    "comma-separated proxy addresses or subnets (`10.0.0.0/8`) whose x-forwarded-for is believed (client IP for limits and usage)",
  ),
  corsOrigins: setting(
    "SLUICE_CORS_ORIGINS",
    parsedList(parseCorsOrigins),
    undefined,
    "origins browser apps may call /v1/… and /health from (`*` or comma-separated `https://app.example.com`; the host's case, a default port and a trailing `/` are normalised as browsers send them); unset: no CORS headers",
  ),
  metricsEnabled: setting("SLUICE_METRICS", bool, "true", "serve Prometheus metrics at /metrics"),
  metricsPort: setting(
    "SLUICE_METRICS_PORT",
    integer(0, 65535),
    undefined,
    "TCP port of a listener of its own that serves /metrics (GET and HEAD, plain HTTP) and nothing else; the gateway's port then answers /metrics 404 as any unknown path (unset: /metrics on the gateway's port)",
  ),
  metricsHost: setting(
    "SLUICE_METRICS_HOST",
    listenHost,
    "127.0.0.1",
    "address the SLUICE_METRICS_PORT listener binds to: loopback whatever HOST is, so metrics reach no other machine unless this says so (`0.0.0.0` for a scraper in another container or host)",
  ),
  shutdownDelayMs: setting(
    "SLUICE_SHUTDOWN_DELAY_MS",
    millisecondsFrom(0),
    "0",
    "time after SIGTERM (or SIGINT, SIGHUP) during which the gateway still accepts connections and serves every route, each answer closing its connection (`Connection: close`), while /health answers 503 `stopping` so a load balancer takes the instance out; SLUICE_SHUTDOWN_TIMEOUT_MS starts after it, and a second signal ends it at once and hurries the shutdown (0: stop accepting at once)",
  ),
  shutdownTimeoutMs: setting(
    "SLUICE_SHUTDOWN_TIMEOUT_MS",
    millisecondsFrom(100),
    "10000",
    "grace period for in-flight work on SIGTERM (or SIGINT, SIGHUP); the whole shutdown (usage flush and closing connections included) ends within it plus 1 s",
  ),
  configFile: setting(
    "SLUICE_CONFIG_FILE",
    nonEmpty,
    undefined,
    "JSON file of projects to seed at start-up (projects as code)",
  ),
} as const;

type Settings = typeof settings;
export type Config = { [K in keyof Settings]: Settings[K] extends Setting<infer T> ? T : never };

/** SPEC rule 4: Test Mode is for development and testing only; production accepts no test key. */
export function allowsTestMode(config: Pick<Config, "environment">): boolean {
  return config.environment !== "production";
}

/**
 * The region an AWS S3 endpoint's host names (`s3.eu-west-3.amazonaws.com`, `s3-eu-west-3…`,
 * `s3.dualstack.eu-west-3…`, `bucket.s3.eu-west-3…`, `….amazonaws.com.cn`); the global
 * `s3.amazonaws.com` names none.
 */
const awsS3EndpointRegion =
  /(?:^|\.)s3(?:-fips)?(?:[.-]dualstack)?[.-]([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$/;

/** The longest an S3 presigned URL may live (X-Amz-Expires), 7 days, as its signing key does. */
export const s3PresignMaxSeconds = 604_800;

export class ConfigError extends Error {
  override name = "ConfigError";
}

/**
 * For a production start without SLUICE_MASTER_KEY: on a data dir where a development start
 * generated one, where the key is and how to pass it (never the key itself), as a likely answer,
 * not a certain one (a rotation since leaves the old key in the file); else how to make one.
 */
function generatedKeyHint(dataDir: string | undefined): string {
  const file = join(dataDir ?? "./data", "master.key");
  return existsSync(file)
    ? ` (${file}, generated by an earlier start outside production, is most likely the key this data dir's secrets were encrypted with, unless the master key was rotated since: export SLUICE_MASTER_KEY=$(cat ${file}), and keep a copy somewhere safe)`
    : " (a 32-byte key, base64-encoded: make one with `openssl rand -base64 32`, and keep a copy somewhere safe)";
}

/**
 * Whether the gateway runs as an npm script that starts it (`npm start`, `npm run dev`, `npm run
 * sluice -- serve`), read here as the environment is read in this file alone (server.ts asks, for
 * its signals): npm then passes on to its child every SIGINT and SIGTERM it gets, and a signal
 * sent to the whole process group (a terminal's Ctrl-C, systemd's default `KillMode=control-group`)
 * reaches the gateway twice, once directly and once from npm (under `npm run dev`, also from
 * `node --watch`, which relays its own copy and npm's). npm names the script it runs in
 * `npm_lifecycle_event`; the test runner's (`npm test`) is not one of these, so the gateways the
 * tests start take each signal as it comes.
 */
export function startedByNpmScript(env: Record<string, string | undefined> = process.env): boolean {
  const script = env.npm_lifecycle_event;
  return script === "start" || script === "dev" || script === "sluice";
}

/**
 * The process warnings Node is told to leave out with `--disable-warning=CODE_OR_TYPE` (`DEP0005`,
 * `ExperimentalWarning`), each given on the command line (`execArgv`: Node's flags, before the
 * script) or in NODE_OPTIONS, as `--disable-warning=X` or `--disable-warning X` (an underscore for
 * the dash too, as Node accepts). Read here as the environment is read in this file alone (the
 * logger asks, in place of Node's printer, which honours them; Node gives no public way to ask
 * it). A Node flag, not a setting of the gateway's: it is not in the README's table.
 */
export function disabledNodeWarnings(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env.NODE_OPTIONS,
): ReadonlySet<string> {
  const disabled = new Set<string>();
  for (const args of [execArgv, nodeOptionsArgs(nodeOptions ?? "")]) {
    for (let index = 0; index < args.length; index++) {
      const [name, value] = (args[index] as string).split(/=(.*)/s, 2);
      if (name?.replaceAll("_", "-") !== "--disable-warning") continue;
      const given = value ?? args[++index];
      if (given) disabled.add(given);
    }
  }
  return disabled;
}

/**
 * NODE_OPTIONS split as Node splits it: on white space, except within double quotes, where a
 * backslash takes the next character as it is.
 */
function nodeOptionsArgs(text: string): string[] {
  const args: string[] = [];
  let current: string | undefined;
  let quoted = false;
  for (let index = 0; index < text.length; index++) {
    const char = text[index] as string;
    if (quoted && char === "\\" && index + 1 < text.length) current = (current ?? "") + text[++index];
    else if (char === '"') {
      quoted = !quoted;
      current ??= "";
    } else if (!quoted && /\s/.test(char)) {
      if (current !== undefined) args.push(current);
      current = undefined;
    } else current = (current ?? "") + char;
  }
  if (current !== undefined) args.push(current);
  return args;
}

/** A name in the environment that looks like a setting (`SLUICE_…`) but is none: see unknownSettings. */
export interface UnknownSetting {
  name: string;
  /** The setting within a few letters of it (`SLUICE_ADMIN_TOKEN` for `SLUICE_ADMN_TOKEN`), if any. */
  nearest?: string;
}

/**
 * The `SLUICE_` names set (not empty) in `env` that no setting has, sorted, each with the setting
 * nearest to it (at most 3 edits away; a setting without the prefix, `DATABASE_URL`, is compared
 * with the name less its prefix). A misspelt setting is otherwise ignored without a word, its
 * default in force (the admin API off, no limit changed): the start warns of each (decision 0032).
 */
export function unknownSettings(env: Record<string, string | undefined> = process.env): UnknownSetting[] {
  const names = Object.values(settings).map((setting) => setting.env as string);
  const known = new Set(names);
  const unknown: UnknownSetting[] = [];
  for (const name of Object.keys(env).sort()) {
    if (!name.startsWith("SLUICE_") || known.has(name) || !env[name]) continue;
    let nearest: string | undefined;
    let nearestEdits = 4;
    for (const candidate of names) {
      const most = nearestEdits - 1;
      const edits = Math.min(editsWithin(name, candidate, most), editsWithin(name.slice(7), candidate, most));
      if (edits < nearestEdits) [nearest, nearestEdits] = [candidate, edits];
    }
    unknown.push(nearest === undefined ? { name } : { name, nearest });
  }
  return unknown;
}

/**
 * The Levenshtein distance from `a` to `b` (the fewest insertions, deletions and substitutions) when
 * it is `most` or less, else `most + 1`. The start and end they share change no distance and are
 * passed over, names whose lengths differ by more are not compared, and a comparison stops at the
 * first row past `most`: an environment of 10,000 SLUICE_ names took 5.2 s before the start
 * listened, one name of 131 KB 3 s.
 */
function editsWithin(a: string, b: string, most: number): number {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let [endA, endB] = [a.length, b.length];
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) [endA, endB] = [endA - 1, endB - 1];
  if (Math.abs(endA - start - (endB - start)) > most) return most + 1;
  const [x, y] = [a.slice(start, endA), b.slice(start, endB)];
  let previous = Array.from({ length: y.length + 1 }, (_, index) => index);
  for (let i = 1; i <= x.length; i++) {
    const current = [i];
    let least = i;
    for (let j = 1; j <= y.length; j++) {
      const edits = Math.min(
        (previous[j] as number) + 1,
        (current[j - 1] as number) + 1,
        (previous[j - 1] as number) + (x[i - 1] === y[j - 1] ? 0 : 1),
      );
      current[j] = edits;
      least = Math.min(least, edits);
    }
    if (least > most) return most + 1;
    previous = current;
  }
  return Math.min(previous[y.length] as number, most + 1);
}

/** The admin token the README's quick start exports, refused in production. */
const readmeAdminToken = "change-me-to-a-long-random-string";

/** Reads every setting from `env` (default: the process environment) and validates it. */
export function loadConfig(
  env: Record<string, string | undefined> = process.env,
  overrides: Partial<Config> = {},
): Config {
  const problems: string[] = [];
  const values: Record<string, unknown> = {};
  for (const [name, { env: envName, parse, default: fallback }] of Object.entries(settings)) {
    // An empty value is an unset one: the default applies.
    const given = env[envName];
    const raw = given === undefined || given === "" ? fallback : given;
    const wrong: string[] = [];
    const value = raw === undefined ? undefined : (parse as Parser<unknown>)(raw, wrong);
    if (wrong.length === 0) values[name] = value;
    else problems.push(`${envName}: ${wrong.join("; ")}`);
  }
  const config = { ...(values as Config), ...overrides };
  // A key that was given but is invalid is named as such above, not as a missing one too.
  if (config.environment === "production" && !config.masterKey && !env.SLUICE_MASTER_KEY) {
    problems.push(
      `SLUICE_MASTER_KEY: required when SLUICE_ENV=production${generatedKeyHint(config.dataDir)}`,
    );
  }
  // The README's quick start exports it: anyone who read the README knows it (and the gateway does
  // not check Host, so a page in the admin's browser could drive a gateway on the admin's machine).
  if (config.environment === "production" && config.adminToken === readmeAdminToken) {
    problems.push(
      "SLUICE_ADMIN_TOKEN: is the README's example, which anyone who read the README knows: set a long random one (e.g. `openssl rand -base64 32`)",
    );
  }
  // The rotation needs the new key given: alone, the previous key would sit beside a generated one.
  if (config.masterKeyPrevious && !config.masterKey && !env.SLUICE_MASTER_KEY) {
    problems.push("SLUICE_MASTER_KEY_PREVIOUS: set only beside SLUICE_MASTER_KEY (the new key)");
  }
  // Compared as the bytes each decodes to, so the same key written otherwise (no padding) is caught.
  if (
    config.masterKey &&
    config.masterKeyPrevious &&
    Buffer.from(config.masterKey, "base64").equals(Buffer.from(config.masterKeyPrevious, "base64"))
  ) {
    problems.push(
      "SLUICE_MASTER_KEY_PREVIOUS: is the same key as SLUICE_MASTER_KEY, which rotates nothing: set it to the key being rotated away from, or unset it",
    );
  }
  if (Boolean(config.tlsCert) !== Boolean(config.tlsKey)) {
    problems.push("SLUICE_TLS_CERT and SLUICE_TLS_KEY: set both or neither");
  }
  if (
    config.vaultS3Endpoint &&
    !(config.vaultS3Bucket && config.vaultS3AccessKeyId && config.vaultS3SecretAccessKey)
  ) {
    problems.push(
      "SLUICE_VAULT_S3_ENDPOINT: also set SLUICE_VAULT_S3_BUCKET, SLUICE_VAULT_S3_ACCESS_KEY_ID and SLUICE_VAULT_S3_SECRET_ACCESS_KEY",
    );
  }
  // The endpoint turns the S3 vault on: the other S3 settings without it would be ignored, and the
  // images stored in each instance's local vault instead, without a word. Named, never their values.
  const s3WithoutEndpoint = [
    "SLUICE_VAULT_S3_BUCKET",
    "SLUICE_VAULT_S3_REGION",
    "SLUICE_VAULT_S3_ACCESS_KEY_ID",
    "SLUICE_VAULT_S3_SECRET_ACCESS_KEY",
  ].filter((name) => env[name]);
  if (!config.vaultS3Endpoint && !env.SLUICE_VAULT_S3_ENDPOINT && s3WithoutEndpoint.length > 0) {
    problems.push(
      `${s3WithoutEndpoint.join(", ")}: set without SLUICE_VAULT_S3_ENDPOINT, which turns the S3 vault on (unset, generated images are stored in the local vault under SLUICE_DATA_DIR)`,
    );
  }
  // SigV4 signs for the region, and AWS refuses a request signed for another than its endpoint's
  // (AuthorizationHeaderMalformed): with the default us-east-1 beside an eu-west-3 endpoint, every
  // /v1/image call was answered 503. Other stores' hosts name no region, and are not checked.
  const awsRegion =
    config.vaultS3Endpoint && URL.canParse(config.vaultS3Endpoint)
      ? awsS3EndpointRegion.exec(new URL(config.vaultS3Endpoint).hostname)?.[1]
      : undefined;
  if (awsRegion !== undefined && config.vaultS3Region !== awsRegion) {
    problems.push(
      `SLUICE_VAULT_S3_REGION: is ${config.vaultS3Region}${env.SLUICE_VAULT_S3_REGION ? "" : " (its default)"}, but SLUICE_VAULT_S3_ENDPOINT is AWS's endpoint in ${awsRegion}, which refuses every request signed for another region: set SLUICE_VAULT_S3_REGION=${awsRegion}`,
    );
  }
  if (config.vaultS3Endpoint && config.vaultUrlTtlSeconds > s3PresignMaxSeconds) {
    problems.push(
      `SLUICE_VAULT_URL_TTL_SECONDS: at most ${s3PresignMaxSeconds} (7 days) with an S3 vault, whose presigned URLs cannot live longer`,
    );
  }
  // A shorter retention would delete images whose URLs may still be valid (vault-retention.ts).
  const minVaultDays = minVaultRetentionDays(config.vaultUrlTtlSeconds, config.vaultTimeoutMs);
  if (config.vaultRetentionDays !== undefined && config.vaultRetentionDays < minVaultDays) {
    problems.push(
      `SLUICE_VAULT_RETENTION_DAYS: at least ${minVaultDays} with SLUICE_VAULT_URL_TTL_SECONDS ${config.vaultUrlTtlSeconds} and SLUICE_VAULT_TIMEOUT_MS ${config.vaultTimeoutMs}, so no image is deleted while a URL to it may be valid`,
    );
  }
  // Either would otherwise be ignored without a word: no metrics are served, or none on their port.
  if (config.metricsPort !== undefined && !config.metricsEnabled) {
    problems.push(
      "SLUICE_METRICS_PORT: set with SLUICE_METRICS=false, which serves no metrics: unset one of them",
    );
  }
  if (config.metricsPort === undefined && env.SLUICE_METRICS_HOST) {
    problems.push(
      "SLUICE_METRICS_HOST: set without SLUICE_METRICS_PORT, which it is the address of (unset, /metrics is on the gateway's own HOST and PORT)",
    );
  }
  if (problems.length > 0) throw new ConfigError(`Invalid configuration:\n  ${problems.join("\n  ")}`);
  return config;
}

import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  deviceTokenTtlMaxSeconds,
  disabledNodeWarnings,
  loadConfig,
  settings,
  vaultUrlTtlMaxSeconds,
} from "./config.js";

const problemsOf = (env: Record<string, string>): string => {
  try {
    loadConfig(env);
    return "";
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
};

describe("loadConfig", () => {
  it.each([
    "postgres://postgres@127.0.0.1:5432/test",
    "postgresql://user:secret@db.internal/sluice?sslmode=require",
    "socket:/var/run/postgresql?db=sluice",
  ])("takes the PostgreSQL URL %s", (databaseUrl) => {
    expect(loadConfig({ DATABASE_URL: databaseUrl }).databaseUrl).toBe(databaseUrl);
  });

  it.each(["mysql://root@127.0.0.1/sluice", "sqlite:./data/sluice.sqlite", "http://127.0.0.1:5432/test"])(
    "refuses the DATABASE_URL %s, which would otherwise be used as a PostgreSQL address",
    (databaseUrl) => {
      expect(problemsOf({ DATABASE_URL: databaseUrl })).toContain(
        "DATABASE_URL: must be a postgres:// or postgresql:// URL",
      );
    },
  );

  it("serves metrics on the gateway's port unless SLUICE_METRICS_PORT is set, whose listener binds to loopback by default", () => {
    const unset = loadConfig({});
    expect(unset.metricsPort).toBeUndefined();
    const set = loadConfig({ HOST: "0.0.0.0", SLUICE_METRICS_PORT: "9464" });
    expect([set.metricsPort, set.metricsHost]).toEqual([9464, "127.0.0.1"]);
    expect(loadConfig({ SLUICE_METRICS_PORT: "0", SLUICE_METRICS_HOST: "0.0.0.0" }).metricsHost).toBe(
      "0.0.0.0",
    );
  });

  it.each([
    [
      { SLUICE_METRICS: "false", SLUICE_METRICS_PORT: "9464" },
      "SLUICE_METRICS_PORT: set with SLUICE_METRICS=false, which serves no metrics: unset one of them",
    ],
    [
      { SLUICE_METRICS_HOST: "0.0.0.0" },
      "SLUICE_METRICS_HOST: set without SLUICE_METRICS_PORT, which it is the address of (unset, /metrics is on the gateway's own HOST and PORT)",
    ],
    [{ SLUICE_METRICS_PORT: "65536" }, "SLUICE_METRICS_PORT: must be at most 65535"],
  ])("refuses the metrics settings %j rather than ignore them", (env, problem) => {
    expect(problemsOf(env)).toBe(`Invalid configuration:\n  ${problem}`);
  });

  // SLUICE_VAULT_S3_ENDPOINT turns the S3 vault on: without it the other S3 settings were ignored and
  // generated images went to the local vault of each instance, without a word (an AWS user expecting
  // AWS's endpoint by default, say).
  it.each([
    [
      {
        SLUICE_VAULT_S3_BUCKET: "vault",
        SLUICE_VAULT_S3_ACCESS_KEY_ID: "id",
        SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
      },
    ],
    [{ SLUICE_VAULT_S3_REGION: "eu-west-3" }],
    [{ SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret" }],
  ])("refuses the S3 vault settings %j without SLUICE_VAULT_S3_ENDPOINT rather than ignore them", (env) => {
    const names = Object.keys(env).join(", ");
    expect(problemsOf(env)).toBe(
      `Invalid configuration:\n  ${names}: set without SLUICE_VAULT_S3_ENDPOINT, which turns the S3 vault on (unset, generated images are stored in the local vault under SLUICE_DATA_DIR)`,
    );
    expect(problemsOf(env)).not.toContain('secret"');
  });

  it("takes redis:// and rediss:// URLs and refuses others", () => {
    expect(loadConfig({ REDIS_URL: "redis://127.0.0.1:6379" }).redisUrl).toBe("redis://127.0.0.1:6379");
    expect(loadConfig({ REDIS_URL: "rediss://cache.internal:6380/2" }).redisUrl).toBe(
      "rediss://cache.internal:6380/2",
    );
    expect(problemsOf({ REDIS_URL: "http://127.0.0.1:6379" })).toContain(
      "REDIS_URL: must be a redis:// or rediss:// URL",
    );
  });

  it.each(["an admin token with spaces", "ümlaut-admin-token-0123", "tab\tseparated-admin-token"])(
    "refuses the admin token %j, which no Authorization header could ever carry",
    (token) => {
      expect(problemsOf({ SLUICE_ADMIN_TOKEN: token })).toContain(
        "SLUICE_ADMIN_TOKEN: must be printable ASCII without spaces",
      );
    },
  );

  it.each(["bogus", "allow", "REQUIRE"])(
    "refuses a DATABASE_URL whose sslmode is %s, which node-postgres would read as verify-full",
    (mode) => {
      const problems = problemsOf({
        DATABASE_URL: `postgres://u:pw-0123456789@db.test/sluice?sslmode=${mode}`,
      });
      expect(problems).toBe(
        "Invalid configuration:\n  DATABASE_URL: sslmode must be disable, prefer, require, verify-ca, verify-full or no-verify",
      );
      expect(problems).not.toContain("pw-0123456789");
    },
  );

  it.each(["disable", "prefer", "require", "verify-ca", "verify-full", "no-verify"])(
    "takes a DATABASE_URL whose sslmode is %s",
    (mode) => {
      const databaseUrl = `postgres://u@db.test/sluice?sslmode=${mode}`;
      expect(loadConfig({ DATABASE_URL: databaseUrl }).databaseUrl).toBe(databaseUrl);
    },
  );

  it("reports a value that is no URL at all once, as such, with the form it takes", () => {
    expect(problemsOf({ DATABASE_URL: "notaurl", REDIS_URL: "::" })).toBe(
      "Invalid configuration:\n  DATABASE_URL: is not a URL: write it whole, its scheme included, such as postgres://user@host:5432/db\n  REDIS_URL: is not a URL: write it whole, its scheme included, such as redis://host:6379",
    );
  });

  it("says why a URL with its scheme does not parse: a port past 65535, or a host no URL holds", () => {
    expect(problemsOf({ DATABASE_URL: "postgres://u@db.test:99999/sluice" })).toBe(
      "Invalid configuration:\n  DATABASE_URL: is not a URL: its port 99999 is above 65535",
    );
    expect(problemsOf({ REDIS_URL: "redis://cache host:6379" })).toBe(
      "Invalid configuration:\n  REDIS_URL: is not a URL: what follows redis:// is no host (a space, or a character a host name cannot hold?)",
    );
  });

  it.each([
    ["SLUICE_PROVIDER_A_BASE_URL", "api.openai.com/v1", "https://api.openai.com/v1"],
    ["SLUICE_PROVIDER_B_BASE_URL", "127.0.0.1:8080/v1", "https://api.anthropic.com/v1"],
    ["SLUICE_DEVICECHECK_PRODUCTION_URL", "api.devicecheck.apple.com", "https://api.devicecheck.apple.com"],
    ["SLUICE_PUBLIC_URL", "sluice.example.com", "https://sluice.example.com"],
    ["SLUICE_VAULT_S3_ENDPOINT", "s3.example.com", "https://s3.us-east-1.amazonaws.com"],
  ])("says why %s=%s, a URL without its scheme, is refused", (name, value, example) => {
    expect(problemsOf({ [name]: value })).toContain(
      `${name}: is not a URL: write it whole, its scheme included, such as ${example}`,
    );
  });

  it("refuses a time limit a timer cannot hold, in every millisecond setting", () => {
    for (const name of [
      "SLUICE_UPSTREAM_CONNECT_TIMEOUT_MS",
      "SLUICE_UPSTREAM_HEADERS_TIMEOUT_MS",
      "SLUICE_UPSTREAM_IDLE_TIMEOUT_MS",
      "SLUICE_DEVICECHECK_TIMEOUT_MS",
      "SLUICE_PDF_FETCH_TIMEOUT_MS",
      "SLUICE_PROJECT_CACHE_TTL_MS",
      "SLUICE_VAULT_TIMEOUT_MS",
      "SLUICE_USAGE_FLUSH_INTERVAL_MS",
      "SLUICE_SHUTDOWN_TIMEOUT_MS",
    ]) {
      // Node would run a timer of 3e9 ms after 1 ms.
      expect(() => loadConfig({ [name]: "3000000000" }), name).toThrow(
        new RegExp(`${name}: must be at most`),
      );
      expect(() => loadConfig({ [name]: "1e4" }), name).toThrow(new RegExp(name));
    }
    expect(loadConfig({ SLUICE_PROJECT_CACHE_TTL_MS: "0" }).projectCacheTtlMs).toBe(0);
    expect(() => loadConfig({ SLUICE_VAULT_TIMEOUT_MS: "0" })).toThrow(
      /SLUICE_VAULT_TIMEOUT_MS: must be at least 1/,
    );
    expect(loadConfig({}).vaultTimeoutMs).toBe(10_000);
  });

  it("takes only http:// and https:// URLs for the providers, Apple, the public URL and S3", () => {
    expect(() => loadConfig({ SLUICE_PROVIDER_A_BASE_URL: "localhost:8080/v1" })).toThrow(
      /SLUICE_PROVIDER_A_BASE_URL: must be an http:\/\/ or https:\/\/ URL/,
    );
    expect(() => loadConfig({ SLUICE_DEVICECHECK_PRODUCTION_URL: "ftp://apple.test" })).toThrow(
      /SLUICE_DEVICECHECK_PRODUCTION_URL/,
    );
    expect(loadConfig({ SLUICE_PROVIDER_C_BASE_URL: "http://127.0.0.1:9/v1beta" }).providerCBaseUrl).toBe(
      "http://127.0.0.1:9/v1beta",
    );
  });

  it.each([
    ["SLUICE_PROVIDER_B_VERSION", "2023-06-01\nx"],
    ["SLUICE_PROVIDER_B_VERSION", "2023-06-01\r"],
    ["SLUICE_PROVIDER_B_VERSION", "2023\u000006"],
    ["SLUICE_PROVIDER_B_VERSION", " 2023-06-01"],
    ["SLUICE_VAULT_S3_REGION", "us-east-1\n"],
    ["SLUICE_VAULT_S3_ACCESS_KEY_ID", "AKID\r\nx-injected: 1"],
  ])("refuses %s=%j, which could not be sent in an HTTP header", (name, value) => {
    expect(problemsOf({ [name]: value })).toContain(`${name}: must be a valid HTTP header value`);
  });

  it("takes a provider B version and S3 credentials that fit in a header", () => {
    const config = loadConfig({
      SLUICE_PROVIDER_B_VERSION: "2024-10-22",
      SLUICE_VAULT_S3_ENDPOINT: "https://s3.eu-west-3.amazonaws.com",
      SLUICE_VAULT_S3_BUCKET: "vault",
      SLUICE_VAULT_S3_REGION: "eu-west-3",
      SLUICE_VAULT_S3_ACCESS_KEY_ID: "AKIAIOSFODNN7EXAMPLE",
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
    });
    expect([config.providerBVersion, config.vaultS3Region, config.vaultS3AccessKeyId]).toEqual([
      "2024-10-22",
      "eu-west-3",
      "AKIAIOSFODNN7EXAMPLE",
    ]);
  });

  // The providers' documentation gives endpoints whole (`https://api.anthropic.com/v1/messages`):
  // taken as the base, every call went to `…/v1/messages/messages`, a 404.
  it.each([
    ["SLUICE_PROVIDER_A_BASE_URL", "https://api.openai.com/v1", "/chat/completions"],
    ["SLUICE_PROVIDER_A_BASE_URL", "https://api.openai.com/v1", "/responses/"],
    ["SLUICE_PROVIDER_A_BASE_URL", "https://api.openai.com/v1", "/images/generations"],
    ["SLUICE_PROVIDER_B_BASE_URL", "https://api.anthropic.com/v1", "/messages"],
    ["SLUICE_PROVIDER_C_BASE_URL", "https://generativelanguage.googleapis.com/v1beta", "/models"],
    [
      "SLUICE_PROVIDER_C_BASE_URL",
      "https://generativelanguage.googleapis.com/v1beta",
      "/models/gemini-2.5-flash:generateContent",
    ],
  ])("refuses %s ending with an endpoint Sluice appends (%s%s)", (name, base, endpoint) => {
    expect(problemsOf({ [name]: `${base}${endpoint}` })).toContain(
      `${name}: must not end with an endpoint's path, which Sluice appends to it: give the base URL, such as ${base}`,
    );
    expect(problemsOf({ [name]: base })).toBe("");
  });

  // Apple's documentation gives the endpoint whole (`…/v1/validate_device_token`): taken as the
  // host, every validation went to `…/v1/validate_device_token/v1/validate_device_token`, a 404.
  it("refuses a DeviceCheck URL that holds the path Sluice appends, naming the host to give", () => {
    for (const [name, host] of [
      ["SLUICE_DEVICECHECK_PRODUCTION_URL", "https://api.devicecheck.apple.com"],
      ["SLUICE_DEVICECHECK_DEVELOPMENT_URL", "https://api.development.devicecheck.apple.com"],
    ] as const) {
      for (const wrong of [
        `${host}/v1/validate_device_token`,
        `${host}/v1/validate_device_token/`,
        `${host}/v1`,
        `${host}/v1/`,
      ]) {
        expect(problemsOf({ [name]: wrong }), wrong).toContain(
          `${name}: must not end with /v1 or /v1/validate_device_token, which Sluice appends to it: give the host alone (such as ${host})`,
        );
      }
      // A path before it (a proxy's prefix) is kept.
      expect(loadConfig({ [name]: "http://127.0.0.1:8080/apple" })).toMatchObject({
        [name === "SLUICE_DEVICECHECK_PRODUCTION_URL"
          ? "deviceCheckProductionUrl"
          : "deviceCheckDevelopmentUrl"]: "http://127.0.0.1:8080/apple",
      });
    }
  });

  // getaddrinfo refused them at listen, as "ENOTFOUND 127.0.0.1 ", which reads as if the address
  // itself could not be found.
  it("refuses a HOST or SLUICE_METRICS_HOST with a space, tab or line break, naming the rule", () => {
    for (const name of ["HOST", "SLUICE_METRICS_HOST"]) {
      for (const wrong of ["127.0.0.1 ", " 0.0.0.0", "localhost\n", "::1\t", "127.0.0.1, ::1"]) {
        expect(
          problemsOf({ SLUICE_METRICS_PORT: "9100", [name]: wrong }),
          `${name}=${JSON.stringify(wrong)}`,
        ).toContain(
          `${name}: must be one host name or IP address, without a space, tab or line break, such as 127.0.0.1 or 0.0.0.0`,
        );
      }
      expect(loadConfig({ SLUICE_METRICS_PORT: "9100", [name]: "::" })).toMatchObject({
        [name === "HOST" ? "host" : "metricsHost"]: "::",
      });
    }
  });

  // SigV4 signs for the region: AWS refuses a request signed for another one than its endpoint's
  // (AuthorizationHeaderMalformed), so with the default us-east-1 beside an eu-west-3 endpoint
  // every /v1/image call was answered 503.
  it("refuses an AWS S3 endpoint of one region with SLUICE_VAULT_S3_REGION, or its default, another", () => {
    const s3 = {
      SLUICE_VAULT_S3_BUCKET: "vault",
      SLUICE_VAULT_S3_ACCESS_KEY_ID: "AKIAIOSFODNN7EXAMPLE",
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
    };
    expect(problemsOf({ ...s3, SLUICE_VAULT_S3_ENDPOINT: "https://s3.eu-west-3.amazonaws.com" })).toContain(
      "SLUICE_VAULT_S3_REGION: is us-east-1 (its default), but SLUICE_VAULT_S3_ENDPOINT is AWS's endpoint in eu-west-3, which refuses every request signed for another region: set SLUICE_VAULT_S3_REGION=eu-west-3",
    );
    for (const endpoint of [
      "https://s3-eu-west-3.amazonaws.com",
      "https://s3.dualstack.eu-west-3.amazonaws.com",
      "https://vault.s3.eu-west-3.amazonaws.com",
      "https://S3.EU-WEST-3.amazonaws.com/",
    ]) {
      expect(
        problemsOf({ ...s3, SLUICE_VAULT_S3_ENDPOINT: endpoint, SLUICE_VAULT_S3_REGION: "eu-west-1" }),
        endpoint,
      ).toContain(
        "SLUICE_VAULT_S3_REGION: is eu-west-1, but SLUICE_VAULT_S3_ENDPOINT is AWS's endpoint in eu-west-3, which refuses every request signed for another region: set SLUICE_VAULT_S3_REGION=eu-west-3",
      );
    }
    for (const [endpoint, region] of [
      ["https://s3.eu-west-3.amazonaws.com", "eu-west-3"],
      ["https://s3.us-east-1.amazonaws.com", ""],
      ["https://s3.amazonaws.com", ""],
      ["https://s3.cn-north-1.amazonaws.com.cn", "cn-north-1"],
      ["https://minio.internal:9000", "eu-west-3"],
      ["https://account.r2.cloudflarestorage.com", "auto"],
    ] as const) {
      expect(
        problemsOf({ ...s3, SLUICE_VAULT_S3_ENDPOINT: endpoint, SLUICE_VAULT_S3_REGION: region }),
        endpoint,
      ).toBe("");
    }
  });

  // A path with a space at an end (an env file's trailing blank) is another directory: the start
  // created it and served an empty database there, generating a new master key outside production.
  it("refuses a SLUICE_DATA_DIR with a space or line break at either end, which would start on a new, empty data dir", () => {
    for (const wrong of ["./data ", " ./data", "/var/lib/sluice\n", "/var/lib/sluice\t", " "]) {
      expect(problemsOf({ SLUICE_DATA_DIR: wrong }), JSON.stringify(wrong)).toContain(
        "SLUICE_DATA_DIR: must have no space, tab or line break at either end, which would make it another directory",
      );
    }
    expect(loadConfig({ SLUICE_DATA_DIR: "/srv/my data" }).dataDir).toBe("/srv/my data");
  });

  // Nothing checks them at start: a secret read from a file with its newline, or a bucket name
  // copied with a space, passed and then failed every /v1/image call (S3 refuses the signature,
  // or knows no such bucket), answered 503.
  it("refuses an S3 secret key or bucket with a space or line break that S3 would refuse every call for, never naming the key", () => {
    const secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const s3 = {
      SLUICE_VAULT_S3_ENDPOINT: "https://s3.eu-west-3.amazonaws.com",
      SLUICE_VAULT_S3_REGION: "eu-west-3",
      SLUICE_VAULT_S3_BUCKET: "vault",
      SLUICE_VAULT_S3_ACCESS_KEY_ID: "AKIAIOSFODNN7EXAMPLE",
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: secret,
    };
    for (const wrong of [
      `${secret}\n`,
      `${secret}\r\n`,
      ` ${secret}`,
      `${secret} `,
      "wJalr\nXUtn",
      "wJalr\u0000XUtn",
    ]) {
      const problems = problemsOf({ ...s3, SLUICE_VAULT_S3_SECRET_ACCESS_KEY: wrong });
      expect(problems, JSON.stringify(wrong)).toContain(
        "SLUICE_VAULT_S3_SECRET_ACCESS_KEY: must have no space at either end and no line break or control character (a file's trailing newline?): S3 would refuse every call signed with it",
      );
      expect(problems).not.toContain("wJalr");
    }
    for (const wrong of ["vault\n", " vault", "vault ", "my vault", "vault/images"]) {
      expect(problemsOf({ ...s3, SLUICE_VAULT_S3_BUCKET: wrong }), JSON.stringify(wrong)).toContain(
        "SLUICE_VAULT_S3_BUCKET: must be a bucket name, without a `/`, space or control character",
      );
    }
    // A space inside a secret (an S3-compatible store may take one) is kept as given.
    const config = loadConfig({
      ...s3,
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "min io secret",
      SLUICE_VAULT_S3_BUCKET: "my.vault-1",
    });
    expect([config.vaultS3SecretAccessKey, config.vaultS3Bucket]).toEqual(["min io secret", "my.vault-1"]);
  });

  // DESIGN.md's configuration table and its provider base URLs (which include the API version): a
  // default that drifts from them sends production traffic to the wrong host or path.
  it("defaults every setting DESIGN.md names to its value there", () => {
    const config = loadConfig({});
    expect({
      port: config.port,
      host: config.host,
      dataDir: config.dataDir,
      databaseUrl: config.databaseUrl,
      redisUrl: config.redisUrl,
      adminToken: config.adminToken,
      providerABaseUrl: config.providerABaseUrl,
      providerBBaseUrl: config.providerBBaseUrl,
      providerCBaseUrl: config.providerCBaseUrl,
      deviceCheckProductionUrl: config.deviceCheckProductionUrl,
      deviceCheckDevelopmentUrl: config.deviceCheckDevelopmentUrl,
      providerBVersion: config.providerBVersion,
      logLevel: config.logLevel,
      tlsCert: config.tlsCert,
      tlsKey: config.tlsKey,
    }).toEqual({
      port: 8787,
      host: "127.0.0.1",
      dataDir: "./data",
      databaseUrl: undefined,
      redisUrl: undefined,
      adminToken: undefined,
      providerABaseUrl: "https://api.openai.com/v1",
      providerBBaseUrl: "https://api.anthropic.com/v1",
      providerCBaseUrl: "https://generativelanguage.googleapis.com/v1beta",
      deviceCheckProductionUrl: "https://api.devicecheck.apple.com",
      deviceCheckDevelopmentUrl: "https://api.development.devicecheck.apple.com",
      providerBVersion: "2023-06-01",
      logLevel: "info",
      tlsCert: undefined,
      tlsKey: undefined,
    });
    expect(config.trustProxy ?? []).toEqual([]);
  });

  it("reads an empty value as unset: the default applies", () => {
    const config = loadConfig({ PORT: "", HOST: "", LOG_LEVEL: "" });
    expect(config).toMatchObject({ port: 8787, host: "127.0.0.1", logLevel: "info" });
  });

  it("names every problem at once", () => {
    const message = problemsOf({ DATABASE_URL: "mysql://x@y/z", SLUICE_ADMIN_TOKEN: "short token" });
    expect(message).toContain("DATABASE_URL:");
    expect(message).toContain("SLUICE_ADMIN_TOKEN: must be at least 16 characters");
  });

  // The README's quick start exports it: anyone who read the README knows it, and the gateway does
  // not check Host, so a page a browser loads could even drive a gateway on the admin's machine.
  it("refuses the README's example admin token in production, naming it, and takes it elsewhere", () => {
    const example = "change-me-to-a-long-random-string";
    const key = Buffer.alloc(32, 9).toString("base64");
    expect(readFileSync(new URL("../README.md", import.meta.url), "utf8")).toContain(
      `SLUICE_ADMIN_TOKEN=${example}`,
    );
    expect(
      problemsOf({ SLUICE_ENV: "production", SLUICE_MASTER_KEY: key, SLUICE_ADMIN_TOKEN: example }),
    ).toBe(
      "Invalid configuration:\n  SLUICE_ADMIN_TOKEN: is the README's example, which anyone who read the README knows: set a long random one (e.g. `openssl rand -base64 32`)",
    );
    expect(loadConfig({ SLUICE_ADMIN_TOKEN: example }).adminToken).toBe(example);
  });

  it("says a production master key that is given but invalid is invalid, not that it is missing", () => {
    const message = problemsOf({ SLUICE_ENV: "production", SLUICE_MASTER_KEY: "abc" });
    expect(message).toContain("SLUICE_MASTER_KEY: must be 32 bytes, base64-encoded");
    expect(message).not.toContain("required when SLUICE_ENV=production");
    expect(problemsOf({ SLUICE_ENV: "production" })).toContain(
      "SLUICE_MASTER_KEY: required when SLUICE_ENV=production",
    );
  });

  it("points a production start without a master key to the one an earlier start generated in its data dir", () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-config-"));
    try {
      const env = { SLUICE_ENV: "production", SLUICE_DATA_DIR: dataDir };
      // With no key to point to, it says how to make one.
      expect(problemsOf(env)).toBe(
        "Invalid configuration:\n  SLUICE_MASTER_KEY: required when SLUICE_ENV=production (a 32-byte key, base64-encoded: " +
          "make one with `openssl rand -base64 32`, and keep a copy somewhere safe)",
      );
      const key = Buffer.alloc(32, 9).toString("base64");
      writeFileSync(join(dataDir, "master.key"), key);
      const message = problemsOf(env);
      expect(message).toContain(`export SLUICE_MASTER_KEY=$(cat ${join(dataDir, "master.key")})`);
      // Not told for certain: a rotation since leaves the old key in the file, as it leaves the
      // file itself (README, "Rotating the master key").
      expect(message).toContain("most likely the key this data dir's secrets were encrypted with");
      expect(message).toContain("unless the master key was rotated since");
      expect(message).not.toContain(key);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it("names a master key that is not 32 bytes of base64 beside the other problems, never its value", () => {
    const message = problemsOf({ SLUICE_MASTER_KEY: "abc-secret-ish", PORT: "x" });
    expect(message).toContain("PORT:");
    expect(message).toContain("SLUICE_MASTER_KEY: must be 32 bytes, base64-encoded");
    expect(message).not.toContain("abc-secret-ish");
    const key = Buffer.alloc(32, 7).toString("base64");
    expect(loadConfig({ SLUICE_MASTER_KEY: key }).masterKey).toBe(key);
  });

  it("reads SLUICE_MASTER_KEY_PREVIOUS as a second master key, only beside SLUICE_MASTER_KEY, never naming its value", () => {
    const [key, previous] = [Buffer.alloc(32, 7).toString("base64"), Buffer.alloc(32, 9).toString("base64")];
    expect(
      loadConfig({ SLUICE_MASTER_KEY: key, SLUICE_MASTER_KEY_PREVIOUS: previous }).masterKeyPrevious,
    ).toBe(previous);
    expect(loadConfig({ SLUICE_MASTER_KEY: key }).masterKeyPrevious).toBeUndefined();
    const wrong = problemsOf({ SLUICE_MASTER_KEY: key, SLUICE_MASTER_KEY_PREVIOUS: "old-secret-ish" });
    expect(wrong).toContain("SLUICE_MASTER_KEY_PREVIOUS: must be 32 bytes, base64-encoded");
    expect(wrong).not.toContain("old-secret-ish");
    // Without the new key, the previous one would be the only one given: nothing would be rotated.
    expect(problemsOf({ SLUICE_MASTER_KEY_PREVIOUS: previous })).toContain(
      "SLUICE_MASTER_KEY_PREVIOUS: set only beside SLUICE_MASTER_KEY (the new key)",
    );
    expect(problemsOf({ SLUICE_MASTER_KEY_PREVIOUS: previous })).not.toContain(previous);
    // The same key twice (also written otherwise: base64 without its padding) rotates nothing, and
    // the start's "every secret opens under SLUICE_MASTER_KEY: remove it" would claim a reseal ran.
    for (const same of [key, key.replace(/=+$/, "")]) {
      const twice = problemsOf({ SLUICE_MASTER_KEY: key, SLUICE_MASTER_KEY_PREVIOUS: same });
      expect(twice).toContain(
        "SLUICE_MASTER_KEY_PREVIOUS: is the same key as SLUICE_MASTER_KEY, which rotates nothing: set it to the key being rotated away from, or unset it",
      );
      expect(twice).not.toContain(key.slice(0, 12));
    }
  });

  it("reads SLUICE_TRUST_PROXY as addresses and subnets and refuses anything that would trust nothing", () => {
    expect(loadConfig({ SLUICE_TRUST_PROXY: "10.0.0.1, 10.0.0.0/8,2001:db8::/32" }).trustProxy).toEqual([
      "10.0.0.1",
      "10.0.0.0/8",
      "2001:db8::/32",
    ]);
    expect(loadConfig({}).trustProxy).toBeUndefined();
    for (const wrong of ["proxy.internal", "10.0.0.0/33", "10.0.0.0/x", "proxy.internal/8", "10.0.0.0/"]) {
      expect(() => loadConfig({ SLUICE_TRUST_PROXY: wrong }), wrong).toThrow(/SLUICE_TRUST_PROXY/);
    }
  });

  it("reads SLUICE_CORS_ORIGINS as `*` or a list of origins and refuses anything else", () => {
    expect(
      loadConfig({ SLUICE_CORS_ORIGINS: "https://app.example.com, http://localhost:5173" }).corsOrigins,
    ).toEqual(["https://app.example.com", "http://localhost:5173"]);
    expect(loadConfig({ SLUICE_CORS_ORIGINS: "*" }).corsOrigins).toEqual(["*"]);
    expect(loadConfig({}).corsOrigins).toBeUndefined();
    for (const wrong of [
      "app.example.com",
      "ftp://files.example.com",
      "https://app.example.com/path",
      " , ",
    ]) {
      expect(() => loadConfig({ SLUICE_CORS_ORIGINS: wrong }), wrong).toThrow(ConfigError);
      expect(() => loadConfig({ SLUICE_CORS_ORIGINS: wrong }), wrong).toThrow(/SLUICE_CORS_ORIGINS/);
    }
  });

  it.each([
    ["http://x/path?q=1"],
    ["https://gateway.example.com/?"],
    ["https://gateway.example.com#vault"],
    ["https://admin:secret@gateway.example.com/"],
    ["https://token@gateway.example.com/"],
  ])(
    "refuses SLUICE_PUBLIC_URL %j, whose query or fragment would take in the signed vault URLs' paths and whose user info would reach every app",
    (value) => {
      expect(problemsOf({ SLUICE_PUBLIC_URL: value })).toBe(
        "Invalid configuration:\n  SLUICE_PUBLIC_URL: must be a base URL without a query (?), fragment (#) or user info: " +
          "signed vault URLs, which apps receive, append their path and query to it",
      );
      expect(problemsOf({ SLUICE_PUBLIC_URL: value })).not.toContain("secret");
    },
  );

  it.each([
    ["SLUICE_PROVIDER_A_BASE_URL", "https://example.openai.azure.com/openai/v1?api-version=preview"],
    ["SLUICE_PROVIDER_B_BASE_URL", "https://api.anthropic.com/v1#x"],
    ["SLUICE_PROVIDER_C_BASE_URL", "https://user:secret@proxy.example.com/v1beta"],
  ])("refuses %s %j, whose query, fragment or user info the calls would drop", (name, value) => {
    expect(problemsOf({ [name]: value })).toBe(
      `Invalid configuration:\n  ${name}: must be a base URL without a query (?), fragment (#) or user info: ` +
        "a provider's calls go to its origin and path only, and the rest would be dropped",
    );
    expect(problemsOf({ [name]: value })).not.toContain("secret");
  });

  it("takes SLUICE_PUBLIC_URL with a path, which signed vault URLs keep", () => {
    expect(loadConfig({ SLUICE_PUBLIC_URL: "https://example.com/sluice/" }).publicUrl).toBe(
      "https://example.com/sluice/",
    );
  });

  it("takes a CORS origin in any form naming it, as the browser serializes it in Origin", () => {
    // A browser's Origin has a lower-case scheme and host and no default port or trailing slash.
    expect(
      loadConfig({
        SLUICE_CORS_ORIGINS:
          "https://App.Example.com, https://app.example.com:443, HTTP://Localhost:5173/, http://a.example:80, https://Bücher.example",
      }).corsOrigins,
    ).toEqual([
      "https://app.example.com",
      "http://localhost:5173",
      "http://a.example",
      "https://xn--bcher-kva.example",
    ]);
  });

  it.each([
    ["https://app.example.com/path", "https://app.example.com"],
    ["https://App.example.com:8443/?q=1", "https://app.example.com:8443"],
    ["https://app.example.com#top", "https://app.example.com"],
    ["https://user@app.example.com", "https://app.example.com"],
  ])("refuses the CORS origin %j, saying to write it as %s", (wrong, origin) => {
    expect(problemsOf({ SLUICE_CORS_ORIGINS: wrong })).toBe(
      `Invalid configuration:\n  SLUICE_CORS_ORIGINS: ${JSON.stringify(wrong)} is not an origin (scheme, host and port only, no path): write it as ${origin}`,
    );
  });

  it("reads SLUICE_REDIS_COMMAND_TIMEOUT_MS, 500 ms by default, from 100 ms to 10 s", () => {
    expect(loadConfig({}).redisCommandTimeoutMs).toBe(500);
    expect(loadConfig({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "2000" }).redisCommandTimeoutMs).toBe(2000);
    expect(loadConfig({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "100" }).redisCommandTimeoutMs).toBe(100);
    expect(loadConfig({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "10000" }).redisCommandTimeoutMs).toBe(10_000);
    expect(problemsOf({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "99" })).toBe(
      "Invalid configuration:\n  SLUICE_REDIS_COMMAND_TIMEOUT_MS: must be at least 100 ms",
    );
    expect(problemsOf({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "10001" })).toBe(
      "Invalid configuration:\n  SLUICE_REDIS_COMMAND_TIMEOUT_MS: must be at most 10000 ms",
    );
    expect(problemsOf({ SLUICE_REDIS_COMMAND_TIMEOUT_MS: "1s" })).toBe(
      "Invalid configuration:\n  SLUICE_REDIS_COMMAND_TIMEOUT_MS: must be a whole number of milliseconds, such as 10000",
    );
  });

  it("reads the PostgreSQL query and usage report timeouts, 10 s and 60 s by default", () => {
    expect(loadConfig({})).toMatchObject({ databaseQueryTimeoutMs: 10_000, usageReportTimeoutMs: 60_000 });
    expect(
      loadConfig({ SLUICE_DATABASE_QUERY_TIMEOUT_MS: "2500", SLUICE_USAGE_REPORT_TIMEOUT_MS: "300000" }),
    ).toMatchObject({ databaseQueryTimeoutMs: 2500, usageReportTimeoutMs: 300_000 });
  });

  it.each([
    ["0", "must be at least 1 ms"],
    ["-5", "must be a whole number of milliseconds, such as 10000"],
    ["2.5", "must be a whole number of milliseconds, such as 10000"],
    ["10s", "must be a whole number of milliseconds, such as 10000"],
    ["1e4", "must be a whole number of milliseconds, such as 10000"],
    ["0x10", "must be a whole number of milliseconds, such as 10000"],
    ["86400001", "must be at most 86400000 ms (a day)"],
  ])("refuses the database timeout %j at start, saying why", (value, reason) => {
    expect(
      problemsOf({ SLUICE_DATABASE_QUERY_TIMEOUT_MS: value, SLUICE_USAGE_REPORT_TIMEOUT_MS: value }),
    ).toBe(
      `Invalid configuration:\n  SLUICE_DATABASE_QUERY_TIMEOUT_MS: ${reason}\n  SLUICE_USAGE_REPORT_TIMEOUT_MS: ${reason}`,
    );
  });

  it.each([
    ["0x10", "must be a whole number written as digits, such as 10"],
    ["1e3", "must be a whole number written as digits, such as 10"],
    [" 5 ", "must be a whole number written as digits, such as 10"],
    ["-1", "must be a whole number written as digits, such as 10"],
    ["65536", "must be at most 65535"],
  ])("refuses PORT %j at start rather than misread it, saying why once", (value, reason) => {
    expect(problemsOf({ PORT: value })).toBe(`Invalid configuration:\n  PORT: ${reason}`);
  });

  // A size with a unit (`20MB`, as other software takes it) is told the unit and a size the setting
  // takes: "such as 10" named neither, and 10 is below every size's 1024.
  it.each([
    "SLUICE_MAX_BODY_BYTES",
    "SLUICE_MAX_IMAGE_BYTES",
    "SLUICE_MAX_PDF_BYTES",
    "SLUICE_MAX_PROVIDER_RESPONSE_BYTES",
    "SLUICE_MAX_BUFFERED_BODY_BYTES",
  ])("refuses %s given with a unit, naming bytes and a size written as it takes one", (name) => {
    for (const value of ["20MB", "20 MiB", "2e7"])
      expect(problemsOf({ [name]: value })).toBe(
        `Invalid configuration:\n  ${name}: must be a whole number of bytes, written as digits without a unit, such as 20971520 (20 MiB)`,
      );
  });

  it("reads SLUICE_MAX_CONNECTIONS_PER_IP as a whole number, 1024 by default and 0 for no cap", () => {
    expect(loadConfig({}).maxConnectionsPerIp).toBe(1024);
    expect(loadConfig({ SLUICE_MAX_CONNECTIONS_PER_IP: "0" }).maxConnectionsPerIp).toBe(0);
    expect(loadConfig({ SLUICE_MAX_CONNECTIONS_PER_IP: "3" }).maxConnectionsPerIp).toBe(3);
    for (const wrong of ["-1", "1e3", "ten"])
      expect(problemsOf({ SLUICE_MAX_CONNECTIONS_PER_IP: wrong })).toContain(
        "SLUICE_MAX_CONNECTIONS_PER_IP: must be a whole number",
      );
  });

  it("reads SLUICE_MAX_CONNECTIONS as a whole number, unset (derived at start) by default and 0 for no cap", () => {
    expect(loadConfig({}).maxConnections).toBeUndefined();
    expect(loadConfig({ SLUICE_MAX_CONNECTIONS: "" }).maxConnections).toBeUndefined();
    expect(loadConfig({ SLUICE_MAX_CONNECTIONS: "0" }).maxConnections).toBe(0);
    expect(loadConfig({ SLUICE_MAX_CONNECTIONS: "5000" }).maxConnections).toBe(5000);
    for (const wrong of ["-1", "1e3", "ten"])
      expect(problemsOf({ SLUICE_MAX_CONNECTIONS: wrong })).toContain(
        "SLUICE_MAX_CONNECTIONS: must be a whole number",
      );
  });

  it("names a whole number too large for an integer setting once", () => {
    expect(problemsOf({ SLUICE_DEVICE_TOKEN_BUDGET: "9999999999999999" })).toBe(
      `Invalid configuration:\n  SLUICE_DEVICE_TOKEN_BUDGET: must be at most ${Number.MAX_SAFE_INTEGER}`,
    );
    expect(loadConfig({ PORT: "8080" }).port).toBe(8080);
  });

  it("refuses a REDIS_URL whose path is not a database index, which ioredis would misread", () => {
    expect(problemsOf({ REDIS_URL: "redis://127.0.0.1:6379/abc" })).toContain(
      "REDIS_URL: the path must be a database index (`/N`) or nothing",
    );
    expect(problemsOf({ REDIS_URL: "redis://127.0.0.1:6379/1/2" })).toContain("REDIS_URL: the path must be");
    expect(loadConfig({ REDIS_URL: "redis://127.0.0.1:6379/" }).redisUrl).toBe("redis://127.0.0.1:6379/");
  });

  it("refuses a REDIS_URL whose user or password is not valid percent-encoding, naming it and not the password", () => {
    const problems = problemsOf({ REDIS_URL: "redis://:pass%zzWord-0123456789@127.0.0.1:6379/0" });
    expect(problems).toContain(
      "REDIS_URL: the user and password must be percent-encoded (a `%` written `%25`)",
    );
    expect(problems).not.toContain("Word-0123456789");
    expect(problemsOf({ REDIS_URL: "redis://us%E0er:x@127.0.0.1:6379" })).toContain(
      "REDIS_URL: the user and",
    );
    expect(loadConfig({ REDIS_URL: "redis://:p%25ss%40w@127.0.0.1:6379" }).redisUrl).toBe(
      "redis://:p%25ss%40w@127.0.0.1:6379",
    );
  });

  it("reads SLUICE_REDIS_KEY_PREFIX as given, unset by default so the keys stay those of earlier versions", () => {
    expect(loadConfig({}).redisKeyPrefix).toBeUndefined();
    expect(loadConfig({ SLUICE_REDIS_KEY_PREFIX: "" }).redisKeyPrefix).toBeUndefined();
    expect(loadConfig({ SLUICE_REDIS_KEY_PREFIX: "staging:" }).redisKeyPrefix).toBe("staging:");
    expect(loadConfig({ SLUICE_REDIS_KEY_PREFIX: "{tenant-a}/" }).redisKeyPrefix).toBe("{tenant-a}/");
    expect(loadConfig({ SLUICE_REDIS_KEY_PREFIX: "p".repeat(64) }).redisKeyPrefix).toBe("p".repeat(64));
  });

  it.each(["staging one:", " staging:", "staging:\n", "tab\tprefix", "préfixe:"])(
    "refuses the Redis key prefix %j, naming SLUICE_REDIS_KEY_PREFIX",
    (prefix) => {
      expect(problemsOf({ SLUICE_REDIS_KEY_PREFIX: prefix })).toBe(
        "Invalid configuration:\n  SLUICE_REDIS_KEY_PREFIX: must be printable ASCII without spaces, such as `staging:`",
      );
    },
  );

  it("refuses a Redis key prefix longer than 64 characters", () => {
    expect(problemsOf({ SLUICE_REDIS_KEY_PREFIX: "p".repeat(65) })).toBe(
      "Invalid configuration:\n  SLUICE_REDIS_KEY_PREFIX: must be at most 64 characters",
    );
  });

  it("refuses a lifetime in seconds too long for what carries it, naming the setting and its bound", () => {
    // 1e15 s: the expiry of a local vault URL no longer fits the 15 digits its check takes, so every
    // URL signed would answer 403. 1e14 s: Redis refuses the device token ledger's lifetime in ms.
    expect(problemsOf({ SLUICE_VAULT_URL_TTL_SECONDS: "1000000000000000" })).toBe(
      "Invalid configuration:\n  SLUICE_VAULT_URL_TTL_SECONDS: must be at most 315360000",
    );
    expect(problemsOf({ SLUICE_DEVICE_TOKEN_TTL_SECONDS: "100000000000000" })).toBe(
      "Invalid configuration:\n  SLUICE_DEVICE_TOKEN_TTL_SECONDS: must be at most 31536000",
    );
    expect(problemsOf({ SLUICE_VAULT_URL_TTL_SECONDS: "315360001" })).toContain("must be at most 315360000");
    expect(problemsOf({ SLUICE_DEVICE_TOKEN_TTL_SECONDS: "31536001" })).toContain("must be at most 31536000");
    const longest = loadConfig({
      SLUICE_VAULT_URL_TTL_SECONDS: String(vaultUrlTtlMaxSeconds),
      SLUICE_DEVICE_TOKEN_TTL_SECONDS: String(deviceTokenTtlMaxSeconds),
    });
    expect([longest.vaultUrlTtlSeconds, longest.deviceTokenTtlSeconds]).toEqual([315_360_000, 31_536_000]);
  });

  it.each([
    "SLUICE_DEVICECHECK_PRODUCTION_URL",
    "SLUICE_DEVICECHECK_DEVELOPMENT_URL",
    "SLUICE_VAULT_S3_ENDPOINT",
  ])("refuses user info, a query or a fragment in %s, naming the setting and never the password", (name) => {
    const refusal = `${name}: must be a base URL without a query (?), fragment (#) or user info`;
    const problems = problemsOf({ [name]: "https://user:pass-0123456789@host.test" });
    expect(problems).toContain(refusal);
    expect(problems).not.toContain("pass-0123456789");
    // Apple's path went after the query (`https://host/?x=1/v1/validate_device_token`), so every
    // DeviceCheck call asked for `/`; the S3 vault dropped them without a word.
    for (const value of [
      "https://user@host.test",
      "https://host.test/?region=eu",
      "https://host.test#v1",
      "https://host.test?",
    ])
      expect(problemsOf({ [name]: value })).toContain(refusal);
    expect(problemsOf({ [name]: "https://host.test/base" })).not.toContain(`${name}: must`);
  });

  it("caps SLUICE_VAULT_URL_TTL_SECONDS at S3's seven days with an S3 vault, and only then", () => {
    const s3 = {
      SLUICE_VAULT_S3_ENDPOINT: "http://127.0.0.1:9000",
      SLUICE_VAULT_S3_BUCKET: "vault",
      SLUICE_VAULT_S3_ACCESS_KEY_ID: "id",
      SLUICE_VAULT_S3_SECRET_ACCESS_KEY: "secret",
    };
    expect(loadConfig({ ...s3, SLUICE_VAULT_URL_TTL_SECONDS: "604800" }).vaultUrlTtlSeconds).toBe(604_800);
    expect(() => loadConfig({ ...s3, SLUICE_VAULT_URL_TTL_SECONDS: "604801" })).toThrow(
      /SLUICE_VAULT_URL_TTL_SECONDS: at most 604800/,
    );
    expect(loadConfig({ SLUICE_VAULT_URL_TTL_SECONDS: "2592000" }).vaultUrlTtlSeconds).toBe(2_592_000);
  });

  it("takes SLUICE_UNPRICED_CALL_USD as an amount above 0, to the billionth at the finest", () => {
    expect(loadConfig({}).unpricedCallUsd).toBe(0.1);
    expect(loadConfig({ SLUICE_UNPRICED_CALL_USD: "2.5" }).unpricedCallUsd).toBe(2.5);
    expect(loadConfig({ SLUICE_UNPRICED_CALL_USD: "0.000000001" }).unpricedCallUsd).toBe(1e-9);
    expect(loadConfig({ SLUICE_UNPRICED_CALL_USD: "1000000000" }).unpricedCallUsd).toBe(1e9);
    // 0 would count calls of unknown cost at nothing before the month's first known cost.
    expect(problemsOf({ SLUICE_UNPRICED_CALL_USD: "0" })).toContain(
      "SLUICE_UNPRICED_CALL_USD: must be above 0",
    );
    expect(problemsOf({ SLUICE_UNPRICED_CALL_USD: "1000000000.5" })).toContain("must be at most 1000000000");
    for (const value of ["1e-3", ".5", "-1", "0.0000000001", "1,5", " 1"])
      expect(problemsOf({ SLUICE_UNPRICED_CALL_USD: value }), value).toContain("must be an amount in USD");
  });

  it("refuses a SLUICE_VAULT_RETENTION_DAYS shorter than a vault URL may live, and only then", () => {
    expect(loadConfig({}).vaultRetentionDays).toBeUndefined();
    expect(loadConfig({ SLUICE_VAULT_RETENTION_DAYS: "1" }).vaultRetentionDays).toBe(1);
    expect(problemsOf({ SLUICE_VAULT_RETENTION_DAYS: "0" })).toContain(
      "SLUICE_VAULT_RETENTION_DAYS: must be",
    );
    // A day of URL lifetime, with the vault's time-out and the second its expiry rounds up, spans two.
    const dayTtl = { SLUICE_VAULT_URL_TTL_SECONDS: "86400" };
    expect(problemsOf({ ...dayTtl, SLUICE_VAULT_RETENTION_DAYS: "1" })).toBe(
      "Invalid configuration:\n  SLUICE_VAULT_RETENTION_DAYS: at least 2 with SLUICE_VAULT_URL_TTL_SECONDS 86400 and SLUICE_VAULT_TIMEOUT_MS 10000, so no image is deleted while a URL to it may be valid",
    );
    expect(loadConfig({ ...dayTtl, SLUICE_VAULT_RETENTION_DAYS: "2" }).vaultRetentionDays).toBe(2);
  });

  it("names every number setting whose range is not its kind's in the README's list of the values each setting takes", () => {
    const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
    const start = readme.indexOf("The values each setting takes:");
    const list = readme.slice(start, readme.indexOf("\n\n", readme.indexOf("\n- ", start)));
    const bullets = list.split("\n- ").slice(1);
    // The smallest and largest value loadConfig takes, found by bisection on its "at least" and
    // "at most" problems.
    const refuses = (name: string, value: number, bound: "least" | "most") =>
      problemsOf({ [name]: String(value) }).includes(`must be at ${bound}`);
    const rangeOf = (name: string): [number, number] => {
      let low = 0;
      let high = Number.MAX_SAFE_INTEGER;
      while (low < high) {
        const middle = low + Math.floor((high - low) / 2);
        if (refuses(name, middle, "least")) low = middle + 1;
        else high = middle;
      }
      const min = low;
      high = Number.MAX_SAFE_INTEGER;
      while (low < high) {
        const middle = low + Math.ceil((high - low) / 2);
        if (refuses(name, middle, "most")) high = middle - 1;
        else low = middle;
      }
      return [min, low];
    };
    const misdescribed: string[] = [];
    for (const { env } of Object.values(settings)) {
      if (!problemsOf({ [env]: "x" }).includes("must be a whole number")) continue;
      const [min, max] = rangeOf(env);
      // The README's rule for each kind: times from 1 ms to a day, anything else from 1 up.
      const [kindMin, kindMax] = env.endsWith("_MS") ? [1, 86_400_000] : [1, Number.MAX_SAFE_INTEGER];
      if (min === kindMin && max === kindMax) continue;
      const bullet = bullets.find((text) => text.includes(`\`${env}\``)) ?? "";
      const says = (value: number) => new RegExp(`\\b${value}\\b`).test(bullet);
      if (!says(min) || (max !== Number.MAX_SAFE_INTEGER && !says(max)))
        misdescribed.push(`${env} (${min} to ${max === Number.MAX_SAFE_INTEGER ? "any" : max})`);
    }
    expect(misdescribed).toEqual([]);
  });
});

describe("the warnings Node is told to leave out", () => {
  it("are read from Node's flags and NODE_OPTIONS, in each form Node takes", () => {
    const execArgv = [
      "--import",
      "tsx",
      "--disable-warning=DEP0005",
      "--disable_warning",
      "ExperimentalWarning",
    ];
    const nodeOptions =
      ' --max-old-space-size=512  --disable-warning "DEP 1\\"x"\t--disable-warning=DEP0040 ';
    expect([...disabledNodeWarnings(execArgv, nodeOptions)].sort()).toEqual(
      ['DEP 1"x', "DEP0005", "DEP0040", "ExperimentalWarning"].sort(),
    );
  });

  it("are none without the flag, whatever else is given", () => {
    expect(
      disabledNodeWarnings(["--no-deprecation", "-e", "x"], "--trace-warnings --disable-warnings=X"),
    ).toEqual(new Set());
    expect(disabledNodeWarnings([], undefined)).toEqual(new Set());
  });
});

import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../../test/fakes/fake-apple.js";
import {
  createDeviceCheckClient,
  type DeviceCheckClientOptions,
  type DeviceCheckEnvironment,
  decodedDeviceToken,
  isWellFormedDeviceToken,
} from "./device-check-client.js";
import { deviceCheckJwtMaxAgeMs } from "./device-check-jwt.js";
import { deviceTokenDigest } from "./device-token-cache.js";

const teamId = "TEAM123456";
const keyId = "KEY1234567";
const keys = generateAppleKeyPair();
const validToken = randomBytes(1200).toString("base64");
const unknownToken = randomBytes(1200).toString("base64");
const timeoutMs = 400;

let production: FakeApple;
let development: FakeApple;
const dispatcher = new Agent({ keepAliveTimeout: 1000 });

beforeAll(async () => {
  const publicKeys = new Map([[keyId, { teamId, publicKeyPem: keys.publicKeyPem }]]);
  production = await startFakeApple({ label: "production", publicKeys, validTokens: [validToken] });
  development = await startFakeApple({ label: "development", publicKeys, validTokens: [validToken] });
});

afterAll(async () => {
  await Promise.all([production.close(), development.close()]);
  await dispatcher.close();
});

afterEach(() => {
  for (const fake of [production, development]) {
    fake.fail(null);
    fake.calls.length = 0;
  }
});

function client(overrides: Partial<DeviceCheckClientOptions> = {}) {
  return createDeviceCheckClient({
    productionUrl: production.url,
    developmentUrl: development.url,
    timeoutMs,
    dispatcher,
    ...overrides,
  });
}

function input(environment: DeviceCheckEnvironment, deviceToken: string, privateKeyPem = keys.privateKeyPem) {
  return { environment, teamId, keyId, privateKeyPem, deviceToken };
}

describe.each(["production", "development"] as const)("validating on the %s host", (environment) => {
  const fake = () => (environment === "production" ? production : development);
  const other = () => (environment === "production" ? development : production);

  it("is valid when Apple answers 200, after one call to that host only", async () => {
    const ids = ["4f0c7a52-3c1e-4b8e-9a51-0d3c2f1e6b7a"];
    const now = Date.now();
    const verdict = await client({ clock: () => now, generateId: () => ids[0]! }).validate(
      input(environment, validToken),
    );
    expect(verdict).toEqual({ kind: "valid" });
    expect(other().calls).toHaveLength(0);
    const [call] = fake().calls;
    expect(call).toMatchObject({
      label: environment,
      method: "POST",
      path: "/v1/validate_device_token",
      jwtHeader: { alg: "ES256", kid: keyId },
      tokenDigest: deviceTokenDigest(validToken),
      transactionId: ids[0],
      timestamp: now,
      status: 200,
    });
    expect(call?.jwtClaims).toEqual({ iss: teamId, iat: Math.floor(now / 1000) });
  });

  it("is invalid when Apple answers 400 for an unknown token", async () => {
    const verdict = await client().validate(input(environment, unknownToken));
    expect(verdict).toEqual({ kind: "invalid", reason: "rejected-by-apple" });
    expect(fake().calls[0]?.status).toBe(400);
  });

  it("is unavailable, never valid, when Apple cannot verify our JWT (wrong key)", async () => {
    const wrong = generateAppleKeyPair();
    const verdict = await client().validate(input(environment, validToken, wrong.privateKeyPem));
    expect(verdict).toEqual({
      kind: "unavailable",
      reason: "misconfigured",
      status: 401,
      retryAfterSeconds: 5,
    });
  });

  it("is unavailable, blaming our credentials, when Apple forbids our key (403)", async () => {
    fake().fail({ kind: "status", status: 403, body: "Forbidden" }, 1);
    expect(await client().validate(input(environment, validToken))).toEqual({
      kind: "unavailable",
      reason: "misconfigured",
      status: 403,
      retryAfterSeconds: 5,
    });
  });

  it("is unavailable when Apple fails with 500, and honours Apple's Retry-After on 429", async () => {
    fake().fail({ kind: "status", status: 500 }, 1);
    expect(await client().validate(input(environment, validToken))).toEqual({
      kind: "unavailable",
      reason: "apple-error",
      status: 500,
      retryAfterSeconds: 5,
    });
    fake().fail({ kind: "status", status: 429, retryAfter: "30" }, 1);
    expect(await client().validate(input(environment, validToken))).toMatchObject({
      kind: "unavailable",
      status: 429,
      retryAfterSeconds: 30,
    });
  });

  it("asks Apple nothing for a key Apple answered 429 until its Retry-After has passed", async () => {
    const sluice = client();
    fake().fail({ kind: "status", status: 429, retryAfter: "1" }, 1);
    expect(await sluice.validate(input(environment, validToken))).toMatchObject({ status: 429 });
    // Before, each junk token asked Apple again, keeping the project's key throttled.
    expect(await sluice.validate(input(environment, validToken))).toEqual({
      kind: "unavailable",
      reason: "resting",
      retryAfterSeconds: 1,
    });
    expect(fake().calls).toHaveLength(1);
    await new Promise((resolve) => setTimeout(resolve, 1100));
    expect(await sluice.validate(input(environment, validToken))).toEqual({ kind: "valid" });
    expect(fake().calls).toHaveLength(2);
  });

  it("is unavailable within the timeout when Apple hangs", async () => {
    fake().fail({ kind: "hang" });
    const started = performance.now();
    const verdict = await client().validate(input(environment, validToken));
    const elapsed = performance.now() - started;
    expect(verdict).toEqual({ kind: "unavailable", reason: "timeout", retryAfterSeconds: 5 });
    expect(elapsed).toBeGreaterThanOrEqual(timeoutMs - 50);
    expect(elapsed).toBeLessThan(timeoutMs + 1000);
  });

  // The gateway's close aborts the Apple calls still on their way (their callers were refused at the
  // shutdown's deadline): the request is aborted on the wire, and the verdict says so at once.
  it("aborts the call when the caller's signal is aborted: unavailable, reason aborted", async () => {
    fake().fail({ kind: "hang" });
    const closing = new AbortController();
    const verdict = client({ timeoutMs: 10_000 }).validate(input(environment, validToken), closing.signal);
    await vi.waitFor(() => expect(fake().calls).toHaveLength(1));
    closing.abort();
    expect(await verdict).toEqual({ kind: "unavailable", reason: "aborted", retryAfterSeconds: 5 });
    await vi.waitFor(() => expect(fake().calls[0]?.aborted).toBe(true));
  });

  it("asks Apple nothing once the caller's signal is aborted", async () => {
    const closing = new AbortController();
    closing.abort();
    const verdict = await client().validate(input(environment, validToken), closing.signal);
    expect(verdict).toEqual({ kind: "unavailable", reason: "aborted", retryAfterSeconds: 5 });
    expect(fake().calls).toHaveLength(0);
  });

  it("is unavailable when Apple closes the connection without answering", async () => {
    fake().fail({ kind: "close" });
    const verdict = await client().validate(input(environment, validToken));
    expect(verdict).toEqual({ kind: "unavailable", reason: "network", retryAfterSeconds: 5 });
  });
});

describe("failures before or around the call", () => {
  it("is unavailable when the connection is refused", async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const verdict = await client({ productionUrl: `http://127.0.0.1:${port}` }).validate(
      input("production", validToken),
    );
    expect(verdict).toEqual({ kind: "unavailable", reason: "network", retryAfterSeconds: 5 });
  });

  it("is unavailable, with no call, when the project's key is not a valid .p8", async () => {
    const verdict = await client().validate(
      input("production", validToken, "-----BEGIN PRIVATE KEY-----\nxx"),
    );
    expect(verdict).toEqual({ kind: "unavailable", reason: "misconfigured", retryAfterSeconds: 5 });
    expect(production.calls).toHaveLength(0);
  });

  it("is unavailable when the response body is larger than allowed", async () => {
    production.fail({ kind: "status", status: 200, body: "x".repeat(5000) }, 1);
    const verdict = await client({ maxResponseBytes: 1024 }).validate(input("production", validToken));
    expect(verdict).toMatchObject({ kind: "unavailable", reason: "apple-error", status: 200 });
  });

  it.each([200, 400])(
    "blames our JWT, never the device token, when Apple answers %i that the authorization token is bad",
    async (status) => {
      const sluice = client();
      production.fail({ kind: "status", status, body: "Missing or badly formatted authorization token" }, 1);
      expect(await sluice.validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "misconfigured",
        status,
        retryAfterSeconds: 5,
      });
      // The JWT is minted anew, and the next call, which Apple answers as usual, passes.
      expect(await sluice.validate(input("production", validToken))).toEqual({ kind: "valid" });
      expect(production.calls.map((call) => call.status)).toEqual([status, 200]);
    },
  );

  it("does not blame the device token when Apple refuses our request's time stamp or transaction id", async () => {
    for (const body of [
      "Missing or incorrectly formatted time stamp",
      "Missing or incorrectly formatted transaction id",
    ]) {
      production.fail({ kind: "status", status: 400, body }, 1);
      expect(await client().validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "apple-error",
        status: 400,
        retryAfterSeconds: 5,
      });
    }
  });

  it("is invalid when Apple answers 400 that the device token payload is bad, or with no reason", async () => {
    for (const body of ["Missing or incorrectly formatted device token payload", ""]) {
      production.fail({ kind: "status", status: 400, body }, 1);
      expect(await client().validate(input("production", validToken))).toEqual({
        kind: "invalid",
        reason: "rejected-by-apple",
      });
    }
  });

  it("is invalid, never valid, when Apple answers 200 that the device token payload is bad", async () => {
    production.fail(
      { kind: "status", status: 200, body: "Missing or incorrectly formatted device token payload" },
      1,
    );
    expect(await client().validate(input("production", validToken))).toEqual({
      kind: "invalid",
      reason: "rejected-by-apple",
    });
  });

  it.each([
    ["an HTML page (a captive portal, a wrong host)", "<html><body>Welcome</body></html>"],
    ["JSON", '{"status":"error"}'],
    ["a reason naming nothing", "Service temporarily degraded"],
    ["a lower-case ok (a health check's or a stub's answer to any request)", "ok"],
    ["Ok", "Ok"],
    ["OK within white space", " \r\n\tOK \n"],
    ["white space beyond one line end", "\n\n"],
  ])(
    "is unavailable, never valid, when a 200 holds a body that is not Apple's answer: %s",
    async (_name, body) => {
      production.fail({ kind: "status", status: 200, body }, 1);
      expect(await client().validate(input("production", unknownToken))).toEqual({
        kind: "unavailable",
        reason: "apple-error",
        status: 200,
        retryAfterSeconds: 5,
      });
    },
  );

  it("is valid when a 200 holds no body or Apple's status text, with one line end at most", async () => {
    for (const body of ["", "\r\n", "\n", "OK", "OK\n", "OK\r\n"]) {
      production.fail({ kind: "status", status: 200, body }, 1);
      expect(await client().validate(input("production", unknownToken))).toEqual({ kind: "valid" });
    }
  });

  // The body is read up to 16 KiB, from Apple or whatever answers at its address (a proxy, a captive
  // portal). A pattern with two runs of white space around an optional `OK` tried every split of a
  // long run before refusing the byte after it: ~0.4 s of the event loop for 16 KiB.
  it("reads a 200 of 16 KiB of white space and one other byte in linear time, as no answer of Apple's", async () => {
    const sluice = client();
    // A first call opens the connection and mints the JWT, which the timed calls reuse.
    production.fail({ kind: "status", status: 200, body: "OK\n" }, 1);
    expect(await sluice.validate(input("production", unknownToken))).toEqual({ kind: "valid" });
    const bodies = [`${" ".repeat(16 * 1024 - 1)}x`, `${"\r\n".repeat(8 * 1024 - 2)}OK!`];
    let elapsed = 0;
    for (const body of bodies) {
      production.fail({ kind: "status", status: 200, body }, 1);
      const started = performance.now();
      const verdict = await sluice.validate(input("production", unknownToken));
      elapsed += performance.now() - started;
      expect(verdict).toMatchObject({ kind: "unavailable", reason: "apple-error", status: 200 });
    }
    // Far above two local round trips and a linear reading (~20 ms), below the quadratic one's ~0.9 s.
    expect(elapsed).toBeLessThan(400);
  });

  it.each([
    [
      400,
      "an HTML page (a proxy's, a wrong host's)",
      "<!DOCTYPE html><html><body>400 Bad Request</body></html>",
    ],
    [400, "JSON", '{"error":"bad_request"}'],
    [400, "a JSON list", '  ["device token"]'],
    [400, "an HTML page that names the device token", "<html><body>Invalid device token</body></html>"],
    [200, "an HTML page that names the device token", "<html><body>Invalid device token</body></html>"],
    [200, "an HTML page that names the authorization token", "<p>Missing authorization token</p>"],
  ])(
    "is unavailable, not the device token's fault, when a %i holds a body that is no reason of Apple's: %s",
    async (status, _name, body) => {
      production.fail({ kind: "status", status, body }, 1);
      expect(await client().validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "apple-error",
        status,
        retryAfterSeconds: 5,
      });
    },
  );

  it("is invalid when Apple answers 400 with a plain-text reason that names nothing", async () => {
    production.fail({ kind: "status", status: 400, body: "Bad Request" }, 1);
    expect(await client().validate(input("production", validToken))).toEqual({
      kind: "invalid",
      reason: "rejected-by-apple",
    });
  });

  describe("Apple's Retry-After", () => {
    // Whole seconds, so the HTTP dates below (which have no finer part) are exact.
    const now = Math.floor(Date.now() / 1000) * 1000;
    const inTwoMinutes = new Date(now + 120_000);
    const weekday = inTwoMinutes.toLocaleDateString("en-US", { weekday: "long", timeZone: "UTC" });
    const [, day, month, year, time] = /^\w+, (\d\d) (\w+) (\d{4}) (\S+) GMT$/.exec(
      inTwoMinutes.toUTCString(),
    ) as unknown as string[];
    const sixtyYearsOn = String((inTwoMinutes.getUTCFullYear() + 60) % 100).padStart(2, "0");

    it.each([
      ["seconds", "120"],
      ["an HTTP date (IMF-fixdate)", inTwoMinutes.toUTCString()],
      [
        "an HTTP date in the obsolete RFC 850 form",
        `${weekday}, ${day}-${month}-${year?.slice(2)} ${time} GMT`,
      ],
      [
        "an HTTP date in the obsolete asctime form",
        `${weekday.slice(0, 3)} ${month} ${String(Number(day)).padStart(2, " ")} ${time} ${year}`,
      ],
    ])("is read as %s, and the key rests that long", async (_form, retryAfter) => {
      const sluice = client({ clock: () => now });
      production.fail({ kind: "status", status: 429, retryAfter }, 1);
      expect(await sluice.validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "apple-error",
        status: 429,
        retryAfterSeconds: 120,
      });
      expect(await sluice.validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "resting",
        retryAfterSeconds: 120,
      });
      expect(production.calls).toHaveLength(1);
    });

    it.each([
      ["a date in the past: the least wait", new Date(now - 3_600_000).toUTCString(), 1],
      ["now: the least wait", new Date(now).toUTCString(), 1],
      ["zero seconds: the least wait", "0", 1],
      ["a date a year ahead: at most an hour", new Date(now + 365 * 86_400_000).toUTCString(), 3600],
      [
        "a two-digit year over 50 years ahead: the last century's, past",
        `Sunday, 06-Nov-${sixtyYearsOn} 08:49:37 GMT`,
        1,
      ],
      ["a year of five digits: the default", "Fri, 31 Dec 99999 23:59:59 GMT", 5],
      ["seconds past an hour: at most an hour", "86400", 3600],
      ["a date that does not exist: the default", "Sat, 31 Feb 2026 07:28:00 GMT", 5],
      ["a date in another zone: the default", inTwoMinutes.toUTCString().replace("GMT", "PST"), 5],
      ["a fraction: the default", "1.5", 5],
      ["words: the default", "in a while", 5],
    ])("is bounded: %s", async (_case, retryAfter, seconds) => {
      production.fail({ kind: "status", status: 429, retryAfter }, 1);
      expect(await client({ clock: () => now }).validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "apple-error",
        status: 429,
        retryAfterSeconds: seconds,
      });
    });

    it("rests the key no longer than Apple asked when the clock is stepped back, and says so", async () => {
      let time = now;
      const sluice = client({ clock: () => time });
      production.fail({ kind: "status", status: 429, retryAfter: "120" }, 1);
      expect(await sluice.validate(input("production", validToken))).toMatchObject({
        retryAfterSeconds: 120,
      });
      // The host's clock is stepped back ten minutes (NTP, a VM resumed): the rest's end, a moment
      // on that clock, lies twelve minutes ahead, but Apple asked for two.
      time = now - 600_000;
      expect(await sluice.validate(input("production", validToken))).toEqual({
        kind: "unavailable",
        reason: "resting",
        retryAfterSeconds: 120,
      });
      time += 120_000;
      expect(await sluice.validate(input("production", validToken))).toEqual({ kind: "valid" });
      expect(production.calls).toHaveLength(2);
    });

    it("is read on a 503 too, without resting the key", async () => {
      const sluice = client({ clock: () => now });
      production.fail({ kind: "status", status: 503, retryAfter: inTwoMinutes.toUTCString() }, 1);
      expect(await sluice.validate(input("production", validToken))).toMatchObject({
        status: 503,
        retryAfterSeconds: 120,
      });
      production.fail({ kind: "status", status: 500 }, 1);
      expect(await sluice.validate(input("production", validToken))).toMatchObject({ status: 500 });
      expect(production.calls).toHaveLength(2);
    });
  });

  it.each([
    ["empty", ""],
    ["base64url alphabet", "ab-_cd"],
    ["whitespace", "abcd efgh"],
    ["bad padding", "abc=="],
    ["impossible length", "abcde"],
    ["too long", "A".repeat(8192)],
  ])("is invalid without any call for a malformed token (%s)", async (_name, token) => {
    const verdict = await client().validate(input("production", token));
    expect(verdict).toEqual({ kind: "invalid", reason: "malformed-token" });
    expect(production.calls).toHaveLength(0);
  });

  it("re-mints the JWT after Apple refused it, so a fixed key works on the next call", async () => {
    const sluice = client();
    const rotated = generateAppleKeyPair();
    const rotatedKeyId = "KEY7777777";
    const credentials = {
      environment: "production" as const,
      teamId,
      keyId: rotatedKeyId,
      deviceToken: validToken,
    };
    expect(await sluice.validate({ ...credentials, privateKeyPem: rotated.privateKeyPem })).toMatchObject({
      reason: "misconfigured",
    });
    production.registerKey(rotatedKeyId, { teamId, publicKeyPem: rotated.publicKeyPem });
    expect(await sluice.validate({ ...credentials, privateKeyPem: rotated.privateKeyPem })).toEqual({
      kind: "valid",
    });
  });

  it("reuses one JWT across calls while it is young", async () => {
    let now = Date.now() - 20 * 60 * 1000;
    const sluice = client({ clock: () => now });
    await sluice.validate(input("production", validToken));
    now += 10 * 60 * 1000;
    await sluice.validate(input("production", unknownToken));
    const [first, second] = production.calls;
    expect(second?.jwtClaims).toEqual(first?.jwtClaims);
    expect(second?.timestamp).toBe(now);
  });
});

describe("the DeviceCheck JWT over time", () => {
  it("is reused up to 40 minutes, renewed from then, and renewed after hours idle, within Apple's hour", async () => {
    let now = Date.UTC(2026, 10, 30, 23, 59, 59, 999);
    // Apple, on the same clock: it refuses an iat over an hour old or in the future.
    const apple = await startFakeApple({
      publicKeys: new Map([[keyId, { teamId, publicKeyPem: keys.publicKeyPem }]]),
      validTokens: [validToken],
      clock: () => now,
    });
    try {
      const sluice = client({ productionUrl: apple.url, clock: () => now });
      const start = now;
      const iats = async (at: number) => {
        now = at;
        expect(await sluice.validate(input("production", validToken))).toEqual({ kind: "valid" });
        return apple.calls.at(-1)?.jwtClaims?.iat;
      };
      const first = await iats(start);
      // Minted at a second's last millisecond: iat is that second, 999 ms older than the mint.
      expect(first).toBe(Math.floor(start / 1000));
      expect(await iats(start + deviceCheckJwtMaxAgeMs - 1)).toBe(first);
      const renewed = await iats(start + deviceCheckJwtMaxAgeMs);
      expect(renewed).toBe(Math.floor((start + deviceCheckJwtMaxAgeMs) / 1000));
      // Idle five hours: the token held is far past Apple's hour, and a new one is minted.
      const later = start + deviceCheckJwtMaxAgeMs + 5 * 3_600_000;
      expect(await iats(later)).toBe(Math.floor(later / 1000));
      expect(apple.calls.map((call) => call.status)).toEqual([200, 200, 200, 200]);
    } finally {
      await apple.close();
    }
  });
});

describe("isWellFormedDeviceToken", () => {
  it.each(["QQ==", "QUI=", "QUJD", "QQ", "QUI", "ab+/"])("accepts %j", (token) => {
    expect(isWellFormedDeviceToken(token)).toBe(true);
  });

  it.each(["", "Q", "Q===", "QQ=", "QQ==QQ==", "ab\ncd"])("rejects %j", (token) => {
    expect(isWellFormedDeviceToken(token)).toBe(false);
  });

  it("accepts up to 8 KiB and rejects from 8 KiB on", () => {
    expect(isWellFormedDeviceToken("A".repeat(8188))).toBe(true);
    expect(isWellFormedDeviceToken("A".repeat(8192))).toBe(false);
  });
});

describe("decodedDeviceToken", () => {
  /** A small deterministic generator (xorshift), so a failure names a case that can be run again. */
  function generator(seed: number) {
    let state = seed;
    return (below: number) => {
      state ^= state << 13;
      state ^= state >>> 17;
      state ^= state << 5;
      return (state >>> 0) % below;
    };
  }
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  // What Node's decoder reads besides the alphabet: padding, the URL-safe pair, whitespace it
  // skips, other ASCII it skips, Latin-1 and characters past 0xFF (whose low byte is an alphabet
  // character: Node reads a UTF-16 string's code units by their low byte).
  const others = [
    "=",
    "-",
    "_",
    " ",
    "\t",
    "\n",
    "!",
    ".",
    "\u0000",
    "\u007f",
    "é",
    "\u00ff",
    "\u0141",
    "\u0155",
    "\u2603",
  ];

  it("accepts exactly the tokens isWellFormedDeviceToken accepts, and decodes them as Buffer.from does", () => {
    const next = generator(20261129);
    const sizes = { accepted: 0, refused: 0 };
    for (let attempt = 0; attempt < 20_000; attempt++) {
      const length = 1 + next(40);
      // Half of them drawn from the alphabet alone, half with one character in eight from the others.
      const mixed = next(2) === 0;
      let token = "";
      for (let index = 0; index < length; index++)
        token +=
          mixed && next(8) === 0 ? (others[next(others.length)] ?? "") : alphabet[next(alphabet.length)];
      // Padding, of every count, at the end of a quarter of them.
      if (next(4) === 0) token += "=".repeat(next(4));
      const expected = isWellFormedDeviceToken(token);
      const decoded = decodedDeviceToken(token);
      expect(decoded !== null, JSON.stringify(token)).toBe(expected);
      if (decoded) expect(decoded.equals(Buffer.from(token, "base64"))).toBe(true);
      sizes[expected ? "accepted" : "refused"] += 1;
    }
    // Both answers were given often enough for the comparison to mean something.
    expect(Math.min(sizes.accepted, sizes.refused)).toBeGreaterThan(2_000);
  });

  it.each([
    ["QQ==", true],
    ["QR==", true],
    ["QUJD", true],
    ["QUJDQU", true],
    ["QUJDQ", false],
    ["QUJ-", false],
    ["QUJ_", false],
    ["QU JD", false],
    ["QUJDQUJD QUJ", false],
    ["QUJ\u0144", false],
    ["QU=D", false],
    ["Q===", false],
    ["QQ==QQ==", false],
    ["", false],
  ])("reads %j as well-formed: %s", (token, wellFormed) => {
    expect(isWellFormedDeviceToken(token)).toBe(wellFormed);
    expect(decodedDeviceToken(token) !== null).toBe(wellFormed);
  });

  it("keeps the length limit: up to 8 KiB", () => {
    expect(decodedDeviceToken("A".repeat(8188))?.length).toBe(6141);
    expect(decodedDeviceToken("A".repeat(8192))).toBeNull();
  });

  it("gives the bytes the digest is taken of: the same entry for a token with or without padding", () => {
    const token = randomBytes(100).toString("base64");
    expect(token.endsWith("=")).toBe(true);
    const unpadded = token.replace(/=+$/, "");
    expect(decodedDeviceToken(unpadded)?.equals(decodedDeviceToken(token) ?? Buffer.alloc(0))).toBe(true);
    expect(deviceTokenDigest(token)).toBe(deviceTokenDigest(unpadded));
  });
});

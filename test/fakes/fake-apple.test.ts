import { randomBytes } from "node:crypto";
import { request } from "undici";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { mintDeviceCheckJwt } from "../../src/auth/device-check-jwt.js";
import { deviceTokenDigest } from "../../src/auth/device-token-cache.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "./fake-apple.js";

const teamId = "TEAM123456";
const keyId = "KEY1234567";
const keys = generateAppleKeyPair();
const validToken = randomBytes(300).toString("base64");
const credentials = { teamId, keyId, privateKeyPem: keys.privateKeyPem };
let apple: FakeApple;

beforeAll(async () => {
  apple = await startFakeApple({ label: "development", validTokens: [validToken] });
  apple.registerKey(keyId, { teamId, publicKeyPem: keys.publicKeyPem });
});

afterAll(() => apple.close());

afterEach(() => {
  apple.fail(null);
  apple.calls.length = 0;
});

async function post(
  jwt: string | null,
  body: unknown = { device_token: validToken, transaction_id: "t-1", timestamp: Date.now() },
) {
  const response = await request(`${apple.url}/v1/validate_device_token`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(jwt === null ? {} : { authorization: `Bearer ${jwt}` }),
    },
    body: JSON.stringify(body),
  });
  return { status: response.statusCode, text: await response.body.text(), headers: response.headers };
}

describe("fake Apple DeviceCheck", () => {
  it("answers 200 for a registered token with a good JWT and records the call without the token", async () => {
    const now = Date.now();
    expect(await post(mintDeviceCheckJwt(credentials, now))).toMatchObject({ status: 200, text: "" });
    expect(apple.calls).toEqual([
      {
        label: "development",
        method: "POST",
        path: "/v1/validate_device_token",
        jwtHeader: { alg: "ES256", kid: keyId },
        jwtClaims: { iss: teamId, iat: Math.floor(now / 1000) },
        tokenDigest: deviceTokenDigest(validToken),
        transactionId: "t-1",
        timestamp: expect.any(Number),
        status: 200,
        aborted: false,
      },
    ]);
    expect(JSON.stringify(apple.calls)).not.toContain(validToken);
  });

  it("answers 400 with Apple's message for an unknown token", async () => {
    const body = {
      device_token: randomBytes(300).toString("base64"),
      transaction_id: "t-2",
      timestamp: Date.now(),
    };
    expect(await post(mintDeviceCheckJwt(credentials, Date.now()), body)).toMatchObject({
      status: 400,
      text: "Missing or incorrectly formatted device token payload",
    });
  });

  it.each([
    ["no Authorization header", () => null],
    [
      "a JWT signed with another key",
      () =>
        mintDeviceCheckJwt(
          { ...credentials, privateKeyPem: generateAppleKeyPair().privateKeyPem },
          Date.now(),
        ),
    ],
    ["an unknown key id", () => mintDeviceCheckJwt({ ...credentials, keyId: "KEY0000000" }, Date.now())],
    [
      "another team as issuer",
      () => mintDeviceCheckJwt({ ...credentials, teamId: "TEAM000000" }, Date.now()),
    ],
    ["an iat older than an hour", () => mintDeviceCheckJwt(credentials, Date.now() - 61 * 60 * 1000)],
    ["an iat in the future", () => mintDeviceCheckJwt(credentials, Date.now() + 5 * 60 * 1000)],
    [
      "a tampered claim",
      () => {
        const [header, , signature] = mintDeviceCheckJwt(credentials, Date.now()).split(".");
        const claims = Buffer.from(
          JSON.stringify({ iss: teamId, iat: Math.floor(Date.now() / 1000) - 1 }),
        ).toString("base64url");
        return `${header}.${claims}.${signature}`;
      },
    ],
  ])("answers 401 for %s", async (_name, jwt) => {
    expect(await post(jwt())).toEqual(
      expect.objectContaining({ status: 401, text: "Unable to verify authorization token" }),
    );
  });

  it.each([
    ["a missing device token", { transaction_id: "t", timestamp: Date.now() }],
    [
      "a timestamp in seconds",
      { device_token: validToken, transaction_id: "t", timestamp: Math.floor(Date.now() / 1000) },
    ],
    ["a missing transaction id", { device_token: validToken, timestamp: Date.now() }],
  ])("answers 400 for %s", async (_name, body) => {
    expect((await post(mintDeviceCheckJwt(credentials, Date.now()), body)).status).toBe(400);
  });

  it("fails as programmed, the given number of times, then answers normally", async () => {
    const jwt = mintDeviceCheckJwt(credentials, Date.now());
    apple.fail({ kind: "status", status: 503, body: "down", retryAfter: "7" }, 1);
    const failed = await post(jwt);
    expect(failed).toMatchObject({ status: 503, text: "down" });
    expect(failed.headers["retry-after"]).toBe("7");
    expect((await post(jwt)).status).toBe(200);
    expect(apple.calls.map((call) => call.status)).toEqual([503, 200]);
  });

  it("closes the socket when told to, which is no abort of the client's", async () => {
    apple.fail({ kind: "close" });
    await expect(post(mintDeviceCheckJwt(credentials, Date.now()))).rejects.toThrow();
    expect(apple.calls[0]).toMatchObject({ status: null, aborted: false });
  });

  it("records a call its client aborted before the answer", async () => {
    apple.fail({ kind: "hang" });
    const controller = new AbortController();
    const pending = request(`${apple.url}/v1/validate_device_token`, {
      method: "POST",
      body: "{}",
      signal: controller.signal,
    });
    await vi.waitFor(() => expect(apple.calls).toHaveLength(1));
    expect(apple.calls[0]?.aborted).toBe(false);
    controller.abort();
    await expect(pending).rejects.toThrow();
    await vi.waitFor(() => expect(apple.calls[0]?.aborted).toBe(true));
  });

  it("hangs when told to, until the fake closes", async () => {
    const hanging = await startFakeApple();
    hanging.fail({ kind: "hang" });
    const pending = request(`${hanging.url}/v1/validate_device_token`, { method: "POST", body: "{}" });
    await expect(
      Promise.race([pending.then(() => "answered"), new Promise((r) => setTimeout(r, 200, "hung"))]),
    ).resolves.toBe("hung");
    await hanging.close();
    await expect(pending).rejects.toThrow();
  });

  it("gives two instances their own address and label", async () => {
    const production = await startFakeApple({ label: "production" });
    try {
      expect(production.url).not.toBe(apple.url);
      expect(production.label).toBe("production");
    } finally {
      await production.close();
    }
  });
});

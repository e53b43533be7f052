import { randomBytes } from "node:crypto";
import { createServer, type Server, type ServerResponse } from "node:http";
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from "node:net";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { redisAvailable, redisTestSpace } from "../support/services.js";
import {
  createDeviceCheckProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * The failed-authentication throttle with the token ledger in Redis, against requests sent at once
 * from one address (an app's users behind a carrier's NAT, a load test from one host). A device
 * token this instance verified is no attempt that may fail: more than the limit of such requests in
 * flight at once are all admitted, while a burst of tokens not verified here is still held to the
 * limit, and so is a verified token that must be asked of Apple again.
 *
 * Between the gateway and Redis sits a gate that holds what the gateway sends until the test has
 * seen each request either answered or waiting at its ledger lookup; Apple here holds its answers
 * the same way. No request is still on its way when the gate opens, whatever the machine's speed.
 */
const limit = 5;
const burst = 4 * limit;

/** A TCP proxy to the local Redis whose client-to-Redis direction can be held and released. */
async function startRedisGate() {
  let holding = false;
  let heldText = "";
  const held: Array<[Socket, Buffer]> = [];
  const sockets = new Set<Socket>();
  const server = createTcpServer((client) => {
    const upstream = connect(6379, "127.0.0.1");
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => socket.destroy());
    }
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    client.on("data", (chunk: Buffer) => {
      if (!holding) upstream.write(chunk);
      else {
        held.push([upstream, chunk]);
        heldText += chunk.toString("latin1");
      }
    });
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hold() {
      holding = true;
      heldText = "";
    },
    /** The token ledger's lookups held: each names its entry's `…:verified` key once. */
    heldLedgerLookups: () => heldText.split(":verified\r\n").length - 1,
    release() {
      holding = false;
      for (const [upstream, chunk] of held.splice(0)) upstream.write(chunk);
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

let apple: Server;
let appleUrl: string;
/** Tokens (as sent, base64) Apple answers 200 for; any other gets 400. */
const validTokens = new Set<string>();
let holdApple = false;
let appleCalls = 0;
const heldAnswers: Array<() => void> = [];

function answerApple(): void {
  for (const answer of heldAnswers.splice(0)) answer();
}

const space = redisTestSpace("device-token-burst");
let upstream: FakeUpstream;
let gate: Awaited<ReturnType<typeof startRedisGate>>;
let sluice: TestGateway;
let project: TestProject;
let keyPrefix: string;

beforeAll(async () => {
  apple = createServer((req, res: ServerResponse) => {
    appleCalls++;
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    req.on("end", () => {
      const token = (JSON.parse(body) as { device_token?: string }).device_token ?? "";
      const answer = () => {
        if (validTokens.has(token)) res.writeHead(200).end();
        else res.writeHead(400).end("Missing or incorrectly formatted device token payload");
      };
      if (holdApple) heldAnswers.push(answer);
      else answer();
    });
  });
  await new Promise<void>((resolve) => apple.listen(0, "127.0.0.1", resolve));
  appleUrl = `http://127.0.0.1:${(apple.address() as AddressInfo).port}`;
  if (!redisAvailable) return;
  upstream = await startFakeUpstream();
  gate = await startRedisGate();
  keyPrefix = `${space.nextPrefix()}:`;
  sluice = await startTestGateway({
    providerABaseUrl: `${upstream.url}/a/v1`,
    deviceCheckProductionUrl: appleUrl,
    redisUrl: gate.url,
    redisKeyPrefix: keyPrefix,
    // The gate holds commands while a burst arrives: no timeout may rest Redis meanwhile.
    redisCommandTimeoutMs: 30_000,
    // Apple holds its answers too, as long.
    deviceCheckTimeoutMs: 30_000,
    authFailureLimit: limit,
    // Failures are counted in the shared Redis: addresses of this test's own keep them apart.
    trustProxy: ["127.0.0.1"],
  });
  project = await createDeviceCheckProject(sluice.gateway, generateAppleKeyPair().privateKeyPem, "cached");
});

afterAll(async () => {
  await sluice?.close();
  await gate?.close();
  await upstream?.close();
  await space.cleanup();
  apple.closeAllConnections();
  await new Promise((resolve) => apple.close(resolve));
});

const freshAddress = () => `2001:db8:${randomBytes(2).toString("hex")}:${randomBytes(2).toString("hex")}::1`;
const newToken = (name: string) =>
  Buffer.from(`device-token-${name}-${randomBytes(8).toString("hex")}`).toString("base64");

/** How a request carries its credentials: `Bearer <partial>.<token>`, or the legacy headers. */
type Form = "bearer" | "x-device-token";

function credentials(deviceToken: string, form: Form): Record<string, string> {
  const partialKey = project.partialKeys["provider-a"] as string;
  return form === "bearer"
    ? { authorization: `Bearer ${partialKey}.${deviceToken}` }
    : { "x-ai-key": partialKey, "x-device-token": deviceToken };
}

async function call(
  deviceToken: string,
  address: string,
  agent?: Agent,
  form: Form = "bearer",
): Promise<number> {
  const response = await request(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
    method: "POST",
    ...(agent ? { dispatcher: agent } : {}),
    headers: {
      ...credentials(deviceToken, form),
      "content-type": "application/json",
      "x-forwarded-for": address,
    },
    body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
  });
  await response.body.dump();
  return response.statusCode;
}

/** Waits for `condition`, for at most 10 s (a missing request then shows in the test's own checks). */
async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
}

/** `burst` requests with the tokens `tokenOf` gives, sent at once from `address`: their statuses. */
function sendBurst(address: string, tokenOf: (index: number) => string, form: Form = "bearer") {
  const agent = new Agent({ connections: 2 * burst });
  const statuses: number[] = [];
  const done = Promise.all(
    Array.from({ length: burst }, async (_, index) => {
      statuses.push(await call(tokenOf(index), address, agent, form));
    }),
  ).finally(() => agent.close());
  return { statuses, done };
}

const count = (statuses: number[], status: number) => statuses.filter((value) => value === status).length;

describe.skipIf(!redisAvailable)(
  "DeviceCheck requests sent at once from one address, ledger in Redis",
  () => {
    it.each<Form>(["bearer", "x-device-token"])(
      "with a token this instance verified (%s): all admitted, more than the throttle's limit in flight",
      async (form) => {
        const address = freshAddress();
        const token = newToken("verified");
        validTokens.add(token);
        expect(await call(token, address, undefined, form)).toBe(200);

        gate.hold();
        const sent = sendBurst(address, () => token, form);
        try {
          await until(() => sent.statuses.length + gate.heldLedgerLookups() >= burst);
          expect({ answered: sent.statuses, ledgerLookups: gate.heldLedgerLookups() }).toEqual({
            answered: [],
            ledgerLookups: burst,
          });
        } finally {
          gate.release();
          await sent.done;
        }
        expect(sent.statuses).toEqual(Array(burst).fill(200));
      },
    );

    it("with tokens not verified: at most the limit reach Apple, the rest are refused 429 before it", async () => {
      const address = freshAddress();
      // The partial key was rebuilt and a token verified for it: only the junk tokens are unknown.
      const token = newToken("known");
      validTokens.add(token);
      expect(await call(token, address)).toBe(200);
      appleCalls = 0;
      holdApple = true;
      const sent = sendBurst(address, (index) => newToken(`junk-${index}`));
      try {
        await until(() => sent.statuses.length + heldAnswers.length >= burst);
      } finally {
        holdApple = false;
        answerApple();
        await sent.done;
      }
      expect(appleCalls).toBe(limit);
      expect({ 401: count(sent.statuses, 401), 429: count(sent.statuses, 429) }).toEqual({
        401: limit,
        429: burst - limit,
      });
      // The failures were counted: the verified token waits out the window too, as before.
      expect(await call(token, address)).toBe(429);
    });

    it("with a verified token whose ledger entry is gone: only the limit wait for Apple, the rest get 429", async () => {
      const address = freshAddress();
      const token = newToken("forgotten");
      validTokens.add(token);
      expect(await call(token, address)).toBe(200);
      const redis = await space.readyClient();
      const entries = await redis.keys(`${keyPrefix}sluice:device-token:*`);
      expect(entries.length).toBeGreaterThan(0);
      await redis.del(...entries);

      appleCalls = 0;
      holdApple = true;
      const sent = sendBurst(address, () => token);
      try {
        // One Apple call, shared by the requests that hold a slot; the others are refused at once.
        await until(() => heldAnswers.length === 1 && sent.statuses.length >= burst - limit);
      } finally {
        holdApple = false;
        answerApple();
        await sent.done;
      }
      expect(appleCalls).toBe(1);
      expect({ 200: count(sent.statuses, 200), 429: count(sent.statuses, 429) }).toEqual({
        200: limit,
        429: burst - limit,
      });
    });
  },
);

describe.skipIf(!redisAvailable)("a token passed here that used up its budget, ledger in Redis", () => {
  let small: TestGateway | undefined;
  afterAll(() => small?.close());

  it("is refused 401 (the first refusal without a slot, the later ones with one), each refusal counted: after the limit the address gets 429", async () => {
    small = await startTestGateway({
      providerABaseUrl: `${upstream.url}/a/v1`,
      deviceCheckProductionUrl: appleUrl,
      redisUrl: gate.url,
      redisKeyPrefix: `${space.nextPrefix()}:`,
      authFailureLimit: limit,
      deviceTokenBudget: 2,
      trustProxy: ["127.0.0.1"],
    });
    const own = await createDeviceCheckProject(small.gateway, generateAppleKeyPair().privateKeyPem, "cached");
    const address = freshAddress();
    const token = newToken("budget");
    validTokens.add(token);
    const send = async () => {
      const response = await request(
        `${(small as TestGateway).url}/v1/provider-a/${own.projectId}/chat/completions`,
        {
          method: "POST",
          headers: {
            authorization: `Bearer ${own.partialKeys["provider-a"]}.${token}`,
            "content-type": "application/json",
            "x-forwarded-for": address,
          },
          body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
        },
      );
      const body = await response.body.text();
      return response.statusCode === 401 ? `401 ${JSON.parse(body).error.message}` : response.statusCode;
    };
    appleCalls = 0;
    const answers = [];
    for (let index = 0; index < 3 + limit; index++) answers.push(await send());
    const exhausted =
      "401 No authentication method succeeded: the device token was refused: this device token has used up its request budget; get a new one";
    expect(answers).toEqual([200, 200, ...Array(limit).fill(exhausted), 429]);
    expect(appleCalls).toBe(1);
  });
});

import { createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, request } from "undici";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../fakes/fake-apple.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * The failed-authentication throttle against a burst: requests sent at once all pass the check on
 * arrival before the first has failed, so the attempts still undecided must count too. Apple here
 * holds every answer until the test has seen each request either answered by the gateway or
 * waiting at Apple: no request is still on its way, whatever the machine's speed.
 */
let apple: Server;
let appleUrl: string;
let appleStatus = 400;
/** Whether Apple holds its answers until `answerApple`; otherwise it answers at once. */
let holdApple = true;
let appleCalls = 0;
const held: ServerResponse[] = [];

function answerApple(): void {
  for (const response of held.splice(0)) {
    response.writeHead(appleStatus, appleStatus === 429 ? { "retry-after": "1" } : {});
    response.end(appleStatus === 400 ? "Missing or incorrectly formatted device token payload" : "");
  }
}

beforeAll(async () => {
  apple = createServer((req, res) => {
    appleCalls++;
    req.resume();
    req.on("end", () => {
      held.push(res);
      if (!holdApple) answerApple();
    });
  });
  await new Promise<void>((resolve) => apple.listen(0, "127.0.0.1", resolve));
  appleUrl = `http://127.0.0.1:${(apple.address() as AddressInfo).port}`;
});
afterAll(async () => {
  apple.closeAllConnections();
  await new Promise((resolve) => apple.close(resolve));
});

const limit = 5;

async function deviceCheckGateway() {
  const sluice = await startTestGateway({ deviceCheckProductionUrl: appleUrl, authFailureLimit: limit });
  const keys = generateAppleKeyPair();
  const project = await createTestProject(sluice.gateway, {
    testMode: false,
    deviceCheck: {
      enabled: true,
      teamId: "TEAM123456",
      keyId: "KEY1234567",
      privateKey: keys.privateKeyPem,
      environment: "production",
    },
  });
  return { sluice, partialKey: project.partialKeys["provider-a"], projectId: project.projectId };
}

const junkToken = (index: number) => Buffer.from(`junk-device-token-${index}`).toString("base64");

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe("junk device tokens sent at once from one address", () => {
  let sluice: TestGateway;
  afterAll(() => sluice?.close());

  it("cost at most the throttle's limit of Apple calls; the rest are refused with 429 before Apple", async () => {
    appleStatus = 400;
    holdApple = true;
    const fixture = await deviceCheckGateway();
    sluice = fixture.sluice;
    const agent = new Agent({ connections: 100 });
    const burst = 50;
    const statuses: number[] = [];
    const retryAfters: string[] = [];
    const requests = Array.from({ length: burst }, async (_, index) => {
      const response = await request(`${sluice.url}/v1/provider-a/${fixture.projectId}/chat/completions`, {
        method: "POST",
        dispatcher: agent,
        headers: {
          authorization: `Bearer ${fixture.partialKey}.${junkToken(index)}`,
          "content-type": "application/json",
        },
        body: "{}",
      });
      await response.body.dump();
      statuses.push(response.statusCode);
      if (response.statusCode === 429) retryAfters.push(String(response.headers["retry-after"]));
    });
    try {
      await until(() => statuses.length + held.length === burst);
      const appleCalls = held.length;
      answerApple();
      await Promise.all(requests);
      expect(appleCalls).toBeLessThanOrEqual(limit);
      expect(statuses.filter((status) => status === 401)).toHaveLength(appleCalls);
      expect(statuses.filter((status) => status === 429)).toHaveLength(burst - appleCalls);
      expect(retryAfters.every((value) => Number(value) >= 1)).toBe(true);
    } finally {
      await agent.close();
    }
    // The failures were counted once decided: the next token waits out the window, without Apple.
    const next = await proxiedChat(
      sluice.url,
      { projectId: fixture.projectId, bearer: `${fixture.partialKey}.${junkToken(999)}` },
      { body: "{}" },
    );
    expect(next.status).toBe(429);
    expect(held).toHaveLength(0);
  });
});

describe("junk device tokens while Apple fails (500)", () => {
  let sluice: TestGateway;
  afterAll(() => sluice?.close());

  it("count against the throttle: after the limit the caller gets 429 without an Apple call", async () => {
    appleStatus = 500;
    holdApple = false;
    const fixture = await deviceCheckGateway();
    sluice = fixture.sluice;
    appleCalls = 0;
    const statuses: number[] = [];
    for (let index = 0; index < 3 * limit; index++) {
      const response = await proxiedChat(
        sluice.url,
        { projectId: fixture.projectId, bearer: `${fixture.partialKey}.${junkToken(1000 + index)}` },
        { body: "{}" },
      );
      await response.arrayBuffer();
      statuses.push(response.status);
    }
    expect(appleCalls).toBe(limit);
    expect(statuses.slice(0, limit)).toEqual(Array(limit).fill(503));
    expect(statuses.slice(limit)).toEqual(Array(2 * limit).fill(429));
  });
});

describe("junk device tokens once Apple answered the project's key 429", () => {
  let sluice: TestGateway;
  afterAll(() => sluice?.close());

  it("ask Apple nothing more until its Retry-After: 503 with the time left, and no Apple call", async () => {
    appleStatus = 429;
    holdApple = false;
    const fixture = await deviceCheckGateway();
    sluice = fixture.sluice;
    appleCalls = 0;
    const answers: Array<[number, string | null]> = [];
    for (let index = 0; index < 2 * limit; index++) {
      const response = await proxiedChat(
        sluice.url,
        { projectId: fixture.projectId, bearer: `${fixture.partialKey}.${junkToken(2000 + index)}` },
        { body: "{}" },
      );
      await response.arrayBuffer();
      answers.push([response.status, response.headers.get("retry-after")]);
    }
    expect(appleCalls).toBe(1);
    expect(answers.every(([status, retryAfter]) => status === 503 && Number(retryAfter) >= 1)).toBe(true);
  });
});

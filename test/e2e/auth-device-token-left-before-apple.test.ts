import { randomBytes } from "node:crypto";
import { once } from "node:events";
import { connect, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { heldRedisReplies } from "../support/held-redis-replies.js";
import { redisAvailable, redisUrl } from "../support/services.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const madeUpToken = () => Buffer.from(`made-up-${randomBytes(12).toString("hex")}`).toString("base64");
const failureLimit = 3;

/**
 * A client that sends a request with a made-up device token and leaves before Sluice's call to
 * Apple has started (here while its token's ledger lookup waits for Redis, held at a proxy) is
 * asked nothing of Apple: no one is left to answer. Its row is written as before (499, aborted,
 * cost 0) and it counts as a failed authentication as before, so a connect-send-leave flood costs
 * no Apple call and is still held to SLUICE_AUTH_FAILURE_LIMIT per address and project. Before,
 * each such request still made its Apple call.
 */
describe.skipIf(!redisAvailable)("a device token whose client left before its Apple call", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  let held: Awaited<ReturnType<typeof heldRedisReplies>>;
  let sluice: TestGateway;
  let project: TestProject;
  const keys = generateAppleKeyPair();
  /** The server's side of each connection, in the order they came. */
  const accepted: Socket[] = [];

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
    held = await heldRedisReplies(redisUrl);
    sluice = await startTestGateway({
      providerABaseUrl: `${fake.url}/a/v1`,
      deviceCheckProductionUrl: apple.url,
      redisUrl: held.url,
      redisCommandTimeoutMs: 5000,
      trustProxy: ["127.0.0.1"],
      authFailureLimit: failureLimit,
    });
    sluice.server.on("connection", (socket: Socket) => accepted.push(socket));
    project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "cached");
  });
  afterAll(async () => {
    await sluice.close();
    await held.close();
    await apple.close();
    await fake.close();
  });

  /** The raw request of a proxied chat call with `deviceToken`, from `ip`. */
  function requestText(deviceToken: string, ip: string): string {
    const body = JSON.stringify({ model: "gpt-4o-mini", messages: [] });
    return [
      `POST /v1/provider-a/${project.projectId}/chat/completions HTTP/1.1`,
      "Host: 127.0.0.1",
      `Authorization: Bearer ${project.partialKeys["provider-a"]}.${deviceToken}`,
      "Content-Type: application/json",
      `X-Forwarded-For: ${ip}`,
      `Content-Length: ${Buffer.byteLength(body)}`,
      "",
      body,
    ].join("\r\n");
  }

  /**
   * Sends a request and leaves while Sluice waits for Redis (its replies held), before anything was
   * asked of Apple; lets Redis answer only once Sluice's side of the connection has closed.
   */
  async function sendAndLeave(deviceToken: string, ip: string): Promise<void> {
    held.hold();
    const port = Number(new URL(sluice.url).port);
    const client = connect(port, "127.0.0.1");
    client.on("error", () => {});
    await once(client, "connect");
    client.write(requestText(deviceToken, ip));
    await held.replied();
    const serverSide = accepted.at(-1) as Socket;
    client.destroy();
    if (!serverSide.destroyed) await once(serverSide, "close");
    held.pass();
  }

  /** The project's usage rows from `ip`, once `count` of them are written. */
  async function rowsFrom(ip: string, count: number) {
    for (;;) {
      await sluice.gateway.flushUsage();
      const rows = await sluice.gateway.database.db
        .selectFrom("usage_records")
        .select(["status", "outcome", "cost_usd", "auth_method", "key_id", "error_code"])
        .where("project_id", "=", project.projectId)
        .where("client_ip", "=", ip)
        .execute();
      if (rows.length >= count) return rows;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it("asks Apple nothing, writes its row, and holds a flood of them to the throttle's limit", async () => {
    const ip = `198.51.100.${randomBytes(1)[0]}`;
    const appleCalls = apple.calls.length;
    for (let index = 0; index < failureLimit; index++) await sendAndLeave(madeUpToken(), ip);
    const rows = await rowsFrom(ip, failureLimit);
    expect(rows).toEqual(
      Array(failureLimit).fill({
        status: 499,
        outcome: "aborted",
        cost_usd: 0,
        auth_method: "bearer-device-check",
        key_id: null,
        error_code: null,
      }),
    );
    expect(apple.calls.length).toBe(appleCalls);
    expect(fake.requests).toEqual([]);

    // Each counted as a failed authentication: the address is held back for the project, with no
    // row and no Apple call, as after as many refused tokens.
    const throttled = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.partialKeys["provider-a"]}.${madeUpToken()}`,
        "content-type": "application/json",
        "x-forwarded-for": ip,
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });
    await throttled.arrayBuffer();
    expect(throttled.status).toBe(429);
    expect(apple.calls.length).toBe(appleCalls);
    expect(await rowsFrom(ip, failureLimit)).toHaveLength(failureLimit);
  });

  it("still asks Apple for a client that stays", async () => {
    const ip = `203.0.113.${randomBytes(1)[0]}`;
    const deviceToken = madeUpToken();
    apple.registerValidToken(deviceToken);
    const appleCalls = apple.calls.length;
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.partialKeys["provider-a"]}.${deviceToken}`,
        "content-type": "application/json",
        "x-forwarded-for": ip,
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
    });
    await response.arrayBuffer();
    expect(response.status).toBe(200);
    expect(apple.calls.length).toBe(appleCalls + 1);
  });
});

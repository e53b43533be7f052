import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from "vitest";
import { shutDown } from "../../src/server.js";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../fakes/fake-apple.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { rowsAfterShutdown } from "../support/shutdown-refusal.js";
import {
  appleKeyId,
  appleTeamId,
  createDeviceCheckProject,
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

const calls = [
  { endpoint: "text", path: "/v1/text", body: { text: "hello" } },
  { endpoint: "image", path: "/v1/image", body: { prompt: "a cat" } },
  {
    endpoint: "proxy",
    path: "/v1/provider-a",
    suffix: "/chat/completions",
    body: { model: "gpt-4o-mini", messages: [] },
  },
];

/** Sends a call on a socket of its own, which the test destroys (the client leaving). */
function send(sluice: TestGateway, call: (typeof calls)[number], projectId: string, bearer: string) {
  const body = JSON.stringify(call.body);
  const socket = connect(Number(new URL(sluice.url).port), "127.0.0.1");
  socket.on("error", () => {});
  socket.write(
    `POST ${call.path}/${projectId}${call.suffix ?? ""} HTTP/1.1\r\nhost: x\r\n` +
      `authorization: Bearer ${bearer}\r\ncontent-type: application/json\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  return socket;
}

/** The shutdown dropped no row (it logs and counts those it drops). */
function expectNoRowDropped(sluice: TestGateway): void {
  expect(logLinesOf(sluice).filter((line) => /usage rows .*dropped/.test(String(line.msg)))).toEqual([]);
}

/**
 * A call whose client left is no longer a connection the shutdown's drain waits for or refuses at
 * its deadline: its row must still be written before the usage writer closes. With its provider
 * already called, the client's leaving aborts that call and the row (499) is written at once. Still
 * being admitted (Apple asked about its device token), the row was written only once that wait
 * ended: after the close, which had not waited for it, so it was dropped ("usage rows not written
 * before shutdown: dropped"), the request in no row at all.
 */
describe("the shutdown after a client left its call", () => {
  let fake: FakeUpstream;
  let apple: FakeApple;
  const keys = generateAppleKeyPair();

  beforeAll(async () => {
    fake = await startFakeUpstream();
    apple = await startFakeApple({ label: "production" });
    apple.registerKey(appleKeyId, { teamId: appleTeamId, publicKeyPem: keys.publicKeyPem });
  });
  afterEach(() => {
    apple.delay(0);
    fake.setLatencyMs(0);
    fake.clear();
  });
  afterAll(async () => {
    await apple.close();
    await fake.close();
  });

  it.each(calls.filter((call) => call.endpoint !== "proxy"))(
    "keeps the row of a $path call that left while its provider was asked",
    async (call) => {
      const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, shutdownTimeoutMs: 400 });
      const project = await createTestProject(sluice.gateway, { outputSchema: schema });
      // The provider answers long after the shutdown's deadline and margin.
      fake.setLatencyMs(5000);
      const socket = send(sluice, call, project.projectId, project.bearer("provider-a"));
      await vi.waitFor(() => expect(fake.requests).toHaveLength(1), { timeout: 5000 });
      socket.destroy();
      await shutDown(sluice.server, sluice.gateway);
      expect(fake.requests[0]?.aborted).toBe(true);
      expectNoRowDropped(sluice);
      expect(rowsAfterShutdown(sluice)).toEqual([
        expect.objectContaining({ endpoint: call.endpoint, status: 499, outcome: "aborted" }),
      ]);
    },
  );

  it.each(calls)(
    "keeps the row of a $endpoint call that left while Apple was asked about its device token",
    async (call) => {
      const sluice = await startTestGateway({
        providerABaseUrl: `${fake.url}/a/v1`,
        deviceCheckProductionUrl: apple.url,
        deviceCheckTimeoutMs: 5000,
        shutdownTimeoutMs: 400,
      });
      const project = await createDeviceCheckProject(sluice.gateway, keys.privateKeyPem, "single-use", {
        outputSchema: schema,
      });
      const deviceToken = Buffer.from(`leaving-${randomBytes(12).toString("hex")}`).toString("base64");
      apple.registerValidToken(deviceToken);
      // Apple answers long after the shutdown's deadline and margin.
      apple.delay(3000);
      const asked = apple.calls.length;
      const socket = send(
        sluice,
        call,
        project.projectId,
        `${project.partialKeys["provider-a"]}.${deviceToken}`,
      );
      await vi.waitFor(() => expect(apple.calls.length).toBe(asked + 1), { timeout: 5000 });
      socket.destroy();
      // The gateway has seen the client go (its access line), and its drain has nothing to wait for.
      await vi.waitFor(
        () =>
          expect(logLinesOf(sluice)).toContainEqual(expect.objectContaining({ msg: "request", status: 499 })),
        { timeout: 5000 },
      );
      const started = performance.now();
      await shutDown(sluice.server, sluice.gateway);
      // Within the shutdown's deadline and margin, not held until Apple answers.
      expect(performance.now() - started).toBeLessThan(400 + 1000 + 500);
      expectNoRowDropped(sluice);
      expect(rowsAfterShutdown(sluice)).toEqual([
        expect.objectContaining({ endpoint: call.endpoint, status: 499, outcome: "aborted" }),
      ]);
      // Nothing reached the provider, then or once Apple's wait ended.
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(fake.requests).toEqual([]);
    },
  );
});

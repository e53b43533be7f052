import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { afterFirstChunk, proxiedChat } from "../support/proxied-chat.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

const streams = 20;

/** Opens `streams` streamed calls and reads each to its end (or its cut) in the background. */
async function openStreams(gateway: SpawnedGateway) {
  const project = await gateway.createProject();
  const opened = await Promise.all(
    Array.from({ length: streams }, async () => {
      const response = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [], stream: true },
      });
      const { rest: read } = await afterFirstChunk(response);
      return { requestId: String(response.headers.get("x-request-id")), read };
    }),
  );
  return {
    requestIds: opened.map((stream) => stream.requestId),
    outcomes: () => Promise.all(opened.map((stream) => stream.read)),
  };
}

/**
 * Signals and crashes during the shutdown of `npm start`: a repeated SIGTERM or SIGINT hurries the
 * shutdown instead of killing the process (Node's default once `process.once` had removed the
 * handler), and a bug that throws outside any request runs the same shutdown; either way every
 * call in flight gets its usage row.
 */
describe("signals and crashes during the shutdown", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    fake.hangStreamsAfter(null);
    fake.setSseDelayMs(0);
    await fake.close();
  });

  it.each([
    ["SIGTERM", "SIGTERM"],
    ["SIGTERM", "SIGINT"],
  ] as const)(
    "a second signal (%s, then %s) cuts the streams still open at once and writes all their rows",
    async (first, second) => {
      fake.hangStreamsAfter(1);
      const gateway = await spawnGateway({
        env: { SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`, SLUICE_SHUTDOWN_TIMEOUT_MS: "10000" },
      });
      try {
        const open = await openStreams(gateway);
        gateway.child.kill(first);
        // The second signal must find the shutdown begun: sent with the first, before the process
        // ran, it would be merged into it (a pending signal is not queued twice). Waited for by the
        // line the first writes, where a fixed wait could end first on a loaded machine.
        await vi.waitFor(
          () => expect(gateway.output()).toContain(`"signal":"${first}","msg":"shutting down`),
          { timeout: 10_000, interval: 10 },
        );
        const hurriedAt = performance.now();
        gateway.child.kill(second);
        const exit = await gateway.exit;
        // Long before the 10 s deadline: the hanging streams were cut at the second signal (within
        // the margin, ~1 s, when the machine is idle; half the deadline is what no load stretches).
        expect(performance.now() - hurriedAt).toBeLessThan(10_000 / 2);
        expect(exit).toEqual({ code: 0, signal: null });
        expect(await open.outcomes()).toEqual(Array(streams).fill("cut"));
        expect(gateway.usageRequestIds()).toEqual(expect.arrayContaining(open.requestIds));
        expect(gateway.output()).toContain(
          `"signal":"${second}","msg":"signal repeated: cutting what is still open, writing the usage rows, exiting"`,
        );
        expect(gateway.output()).toContain(
          `"connections":${streams},"msg":"shutdown hurried: connections cut"`,
        );
        expect(gateway.output()).toContain('"msg":"stopped"');
      } finally {
        fake.hangStreamsAfter(null);
        await gateway.remove();
      }
    },
    40_000,
  );

  it.each([
    ["an uncaught exception", "SIGUSR2"],
    ["an unhandled rejection", "SIGWINCH"],
  ] as const)(
    "after %s the calls in flight finish, every row is written, and the process exits with 1",
    async (_name, trigger) => {
      fake.setSseDelayMs(100);
      const gateway = await spawnGateway({
        env: { SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`, SLUICE_SHUTDOWN_TIMEOUT_MS: "10000" },
        imports: ["./test/support/crash-on-signal.ts"],
      });
      try {
        const open = await openStreams(gateway);
        gateway.child.kill(trigger);
        const exit = await gateway.exit;
        expect(exit).toEqual({ code: 1, signal: null });
        expect(await open.outcomes()).toEqual(Array(streams).fill("whole"));
        expect(gateway.usageRequestIds()).toEqual(expect.arrayContaining(open.requestIds));
        expect(gateway.output()).toContain('"level":"fatal"');
        expect(gateway.output()).toContain('"msg":"uncaught error: shutting down"');
        expect(gateway.output()).toContain('"msg":"stopped"');
      } finally {
        fake.setSseDelayMs(0);
        await gateway.remove();
      }
    },
    40_000,
  );

  it("SIGHUP (a terminal that closed, a `kill -HUP` meant as a reload) runs the same shutdown: the calls in flight finish and every row is written", async () => {
    fake.setSseDelayMs(100);
    const gateway = await spawnGateway({
      env: { SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`, SLUICE_SHUTDOWN_TIMEOUT_MS: "10000" },
    });
    try {
      const open = await openStreams(gateway);
      gateway.child.kill("SIGHUP");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
      expect(await open.outcomes()).toEqual(Array(streams).fill("whole"));
      expect(gateway.usageRequestIds()).toEqual(expect.arrayContaining(open.requestIds));
      expect(gateway.output()).toContain('"signal":"SIGHUP","msg":"shutting down');
      expect(gateway.output()).toContain('"msg":"stopped"');
    } finally {
      fake.setSseDelayMs(0);
      await gateway.remove();
    }
  }, 40_000);
});

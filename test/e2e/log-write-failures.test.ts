import { closeSync, existsSync, openSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { shutdownMarginMs } from "../../src/gateway-close.js";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { type SpawnedGateway, spawnGateway } from "../support/spawned-gateway.js";

const shutdownTimeoutMs = 2000;

/**
 * A gateway whose log cannot be written (stdout on a full disk, or a pipe whose reader left) keeps
 * serving and keeps its usage rows: the lines are dropped and counted, never retried, and the
 * shutdown ends on time. pino's default destination made the first refused write an uncaught
 * exception, and its flush at exit retried a full disk forever with the event loop blocked.
 */
describe("a log that cannot be written", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    await fake.close();
  });

  /** Calls the gateway while its log fails, then stops it with SIGTERM: everything still holds. */
  async function servesAndKeepsItsRows(gateway: SpawnedGateway, reason: string) {
    const project = await gateway.createProject();
    const requestIds: string[] = [];
    for (let call = 0; call < 20; call++) {
      const response = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] },
      });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
      requestIds.push(String(response.headers.get("x-request-id")));
    }
    expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
    const metrics = await (await fetch(`${gateway.url}/metrics`)).text();
    const dropped = Number(/^sluice_log_lines_dropped_total (\d+)$/m.exec(metrics)?.[1]);
    // One access line per request (LOG_LEVEL=debug) at least.
    expect(dropped).toBeGreaterThanOrEqual(20);

    const startedAt = performance.now();
    gateway.child.kill("SIGTERM");
    const exit = await gateway.exit;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(performance.now() - startedAt).toBeLessThan(shutdownTimeoutMs + shutdownMarginMs);
    expect(gateway.usageRequestIds()).toEqual(expect.arrayContaining(requestIds));
    // What the log lost is said on stderr at exit, since it could not be said in the log.
    const report = gateway
      .output()
      .split("\n")
      .find((line) => line.includes('"msg":"log lines could not be written: dropped"'));
    expect(JSON.parse(report ?? "{}")).toMatchObject({ level: "warn", reason });
  }

  it.skipIf(!existsSync("/dev/full"))(
    "keeps serving and writing usage rows when every log write fails with ENOSPC (stdout on /dev/full)",
    async () => {
      const full = openSync("/dev/full", "w");
      const gateway = await spawnGateway({
        stdout: full,
        env: {
          LOG_LEVEL: "debug",
          SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
          SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
        },
      }).finally(() => closeSync(full));
      try {
        await servesAndKeepsItsRows(gateway, "ENOSPC");
      } finally {
        await gateway.remove();
      }
    },
    40_000,
  );

  it("keeps serving and writing usage rows when stdout is a pipe its reader closed (EPIPE)", async () => {
    const gateway = await spawnGateway({
      env: {
        LOG_LEVEL: "debug",
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      },
    });
    try {
      gateway.child.stdout?.destroy();
      await servesAndKeepsItsRows(gateway, "EPIPE");
    } finally {
      await gateway.remove();
    }
  }, 40_000);
});

import { execFileSync } from "node:child_process";
import { closeSync, constants, existsSync, mkdtempSync, openSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
 * exception, and its flush at exit retried a full disk forever with the event loop blocked. A pipe
 * whose reader stopped reading does not hold the exit either (a blocking write to it never returns).
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
    // Within its shutdown time and margin (2 s more for a child process's exit on a loaded machine).
    expect(performance.now() - startedAt).toBeLessThan(shutdownTimeoutMs + shutdownMarginMs + 2000);
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

  // The log's own writes dropped their lines, but Node's streams for stdout and stderr, which a
  // dependency's console.warn or a Node warning writes to, made the refused write an uncaught
  // exception: the gateway died on the first such line after its parent closed the pipes.
  it("keeps serving when what a dependency prints goes to stdout and stderr pipes their reader closed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "sluice-printed-"));
    const printed = join(dir, "printed");
    const gateway = await spawnGateway({
      imports: ["./test/support/print-on-signal.ts"],
      env: {
        SLUICE_TEST_PRINTED: printed,
        SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
        SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      },
    });
    try {
      gateway.child.stdout?.destroy();
      gateway.child.stderr?.destroy();
      const project = await gateway.createProject();
      gateway.child.kill("SIGUSR2");
      while (!existsSync(printed)) await new Promise((resolve) => setTimeout(resolve, 20));
      for (let call = 0; call < 5; call++) {
        const response = await proxiedChat(gateway.url, project, {
          body: { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] },
        });
        expect(response.status).toBe(200);
        await response.arrayBuffer();
        gateway.child.kill("SIGUSR2");
      }
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);
      gateway.child.kill("SIGTERM");
      expect(await gateway.exit).toEqual({ code: 0, signal: null });
    } finally {
      await gateway.remove();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 40_000);

  it("exits on SIGTERM within its shutdown time when stdout is a pipe nobody reads (a blocking pipe, full)", async () => {
    // A named pipe, opened as a shell pipeline's is (`sluice | reader`): the gateway's end blocking
    // and write-only, the reader's end held open here and never read, so the pipe fills (64 KiB).
    const dir = mkdtempSync(join(tmpdir(), "sluice-pipe-"));
    const path = join(dir, "stdout");
    execFileSync("mkfifo", [path]);
    const reader = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
    const writer = openSync(path, "w");
    const shutdownTimeoutMs = 1000;
    const gateway = await spawnGateway({
      stdout: writer,
      imports: ["./test/support/blocking-stdout.ts"],
      env: { LOG_LEVEL: "debug", SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) },
    }).finally(() => closeSync(writer));
    try {
      // An access line of over 300 bytes each (the path is in it): over 64 KiB, more than the pipe holds.
      for (let call = 0; call < 400; call++) {
        const response = await fetch(`${gateway.url}/nope/${call}/${"x".repeat(200)}`);
        expect(response.status).toBe(404);
        await response.arrayBuffer();
      }
      expect((await fetch(`${gateway.url}/health`)).status).toBe(200);

      const startedAt = performance.now();
      gateway.child.kill("SIGTERM");
      // Within its shutdown time and margin (2 s more for a child process's exit on a loaded
      // machine), where a blocked write would hold it for ever.
      const bound = shutdownTimeoutMs + shutdownMarginMs + 2000;
      const exit = await Promise.race([
        gateway.exit,
        new Promise((resolve) => setTimeout(() => resolve("still running"), bound + 2000)),
      ]);
      expect(exit).toEqual({ code: 0, signal: null });
      expect(performance.now() - startedAt).toBeLessThan(bound);
      // The lines the pipe did not take are dropped, and said on stderr (which the test reads).
      const report = gateway
        .output()
        .split("\n")
        .find((line) => line.includes('"msg":"log lines could not be written: dropped"'));
      expect(JSON.parse(report ?? "{}")).toMatchObject({
        level: "warn",
        dropped: expect.any(Number),
        reason: "EAGAIN",
      });
    } finally {
      await gateway.remove();
      closeSync(reader);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 40_000);
});

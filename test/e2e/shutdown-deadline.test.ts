import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { shutdownMarginMs } from "../../src/gateway-close.js";
import { startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { createProjectOverAdminApi } from "../support/spawned-gateway.js";
import { startTcpProxy } from "../support/tcp-proxy.js";

const adminToken = `admin-${randomBytes(12).toString("hex")}`;
const shutdownTimeoutMs = 2000;

/** Starts `node --import tsx src/main.ts` as production does, and waits for its listening line. */
async function startGateway(env: Record<string, string>) {
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    cwd: join(import.meta.dirname, "../.."),
    env: { ...process.env, ...env, PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const exit = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${output}`)), 20_000);
    child.stdout.on("data", (chunk: Buffer) => {
      output += String(chunk);
      const match = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
      if (match?.[1]) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.stderr.on("data", (chunk: Buffer) => {
      output += String(chunk);
    });
    void exit.then((code) => reject(new Error(`the gateway exited with ${code}:\n${output}`)));
  });
  return { url, child, exit, output: () => output };
}

/**
 * The whole shutdown, as `npm start` runs it on SIGTERM, ends within SLUICE_SHUTDOWN_TIMEOUT_MS
 * plus `shutdownMarginMs`: a stream still open is cut at the deadline, and the usage writes after
 * it get only the margin, even from a database that has stopped answering.
 */
describe.skipIf(!postgresAvailable)("shutdown deadline", () => {
  it("exits within SLUICE_SHUTDOWN_TIMEOUT_MS plus the margin with a stream open and a database that stopped answering", async () => {
    const fake = await startFakeUpstream();
    const schema = await createPostgresSchema();
    const proxy = await startTcpProxy(5432);
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-shutdown-"));
    const gateway = await startGateway({
      SLUICE_DATA_DIR: dataDir,
      DATABASE_URL: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
      SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
      SLUICE_ADMIN_TOKEN: adminToken,
      SLUICE_PROVIDER_A_BASE_URL: `${fake.url}/a/v1`,
      SLUICE_SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs),
      // A usage write waits for the database's answer for longer than the whole test.
      SLUICE_DATABASE_QUERY_TIMEOUT_MS: "60000",
    });
    try {
      const project = await createProjectOverAdminApi(gateway.url, adminToken, "long");
      fake.hangStreamsAfter(1);
      const response = await proxiedChat(gateway.url, project, {
        body: { model: "gpt-4o-mini", messages: [], stream: true },
      });
      const reader = response.body!.getReader();
      await reader.read();
      const reading = (async () => {
        try {
          while (!(await reader.read()).done);
        } catch {
          // Cut at the deadline.
        }
      })();
      // The database stops answering: open connections and new ones alike.
      proxy.stall({ newConnections: true });
      const startedAt = performance.now();
      gateway.child.kill("SIGTERM");
      const code = await gateway.exit;
      const took = performance.now() - startedAt;
      await reading;
      expect(code).toBe(0);
      // The stream held the shutdown until the deadline; the rest took at most the margin, not the
      // usage write's 60 s (2 s more for a child process's exit on a loaded machine).
      expect(took).toBeGreaterThanOrEqual(shutdownTimeoutMs - 50);
      expect(took).toBeLessThan(shutdownTimeoutMs + shutdownMarginMs + 2000);
      // The stream's row could not be written: it is dropped with a word, not silently.
      expect(gateway.output()).toContain('"msg":"usage rows not written before shutdown: dropped"');
      expect(gateway.output()).toContain('"msg":"stopped"');
    } finally {
      gateway.child.kill("SIGKILL");
      fake.hangStreamsAfter(null);
      await proxy.close();
      await fake.close();
      await schema.drop();
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 40_000);
});

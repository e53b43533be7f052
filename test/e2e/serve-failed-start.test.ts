import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { serve } from "../../src/server.js";
import { sqliteFileIn } from "../../src/storage/database.js";
import { freePort } from "../support/spawned-gateway.js";

const root = mkdtempSync(join(tmpdir(), "sluice-serve-failed-"));
const names = [
  "PORT",
  "HOST",
  "LOG_LEVEL",
  "SLUICE_DATA_DIR",
  "SLUICE_MASTER_KEY",
  "SLUICE_METRICS_PORT",
  "DATABASE_URL",
  "REDIS_URL",
] as const;
const saved = Object.fromEntries(names.map((name) => [name, process.env[name]]));

/** A port on 127.0.0.1 held by another server, until `close`. */
async function takenPort(): Promise<{ port: number; taken: Server }> {
  const taken = createServer();
  await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
  return { port: (taken.address() as { port: number }).port, taken };
}

/** Whether `port` on 127.0.0.1 can be listened on now (nothing holds it). */
async function isFree(port: number): Promise<boolean> {
  const probe = createServer();
  const listened = await new Promise<boolean>((resolve) => {
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => resolve(true));
  });
  if (listened) await new Promise((resolve) => probe.close(resolve));
  return listened;
}

/** The files of the data dir's database (its WAL and shared memory too) this process holds open. */
function openDatabaseFiles(dataDir: string): string[] {
  if (!existsSync("/proc/self/fd")) return [];
  const file = sqliteFileIn(dataDir);
  const open: string[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const target = readlinkSync(`/proc/self/fd/${fd}`);
      if (target.startsWith(file)) open.push(target);
    } catch {
      // The descriptor readdir itself held, closed since.
    }
  }
  return open;
}

describe("serve() called in a program, whose start fails on a port in use", () => {
  let taken: Server | undefined;
  // Each test's own: a gateway one left open is not counted against the next.
  let dataDir = "";
  beforeEach(() => {
    dataDir = join(root, randomBytes(4).toString("hex"));
    delete process.env.DATABASE_URL;
    delete process.env.REDIS_URL;
    process.env.HOST = "127.0.0.1";
    process.env.LOG_LEVEL = "silent";
    process.env.SLUICE_DATA_DIR = dataDir;
    process.env.SLUICE_MASTER_KEY = randomBytes(32).toString("base64");
  });
  afterEach(async () => {
    if (taken) await new Promise((resolve) => taken?.close(resolve));
    taken = undefined;
  });
  afterAll(() => {
    for (const name of names)
      if (saved[name] === undefined) delete process.env[name];
      else process.env[name] = saved[name];
    rmSync(root, { recursive: true, force: true });
  });

  it.skipIf(!existsSync("/proc/self/fd"))(
    "closes the metrics listener and the gateway (its database) before rethrowing when PORT is taken",
    async () => {
      const gatewayPort = await takenPort();
      taken = gatewayPort.taken;
      const metricsPort = await freePort();
      process.env.PORT = String(gatewayPort.port);
      process.env.SLUICE_METRICS_PORT = String(metricsPort);
      await expect(serve()).rejects.toThrow(`cannot listen on HOST 127.0.0.1 PORT ${gatewayPort.port}`);
      expect(await isFree(metricsPort)).toBe(true);
      expect(openDatabaseFiles(dataDir)).toEqual([]);
    },
  );

  it.skipIf(!existsSync("/proc/self/fd"))(
    "closes the gateway (its database) before rethrowing when SLUICE_METRICS_PORT is taken",
    async () => {
      const metricsPort = await takenPort();
      taken = metricsPort.taken;
      const gatewayPort = await freePort();
      process.env.PORT = String(gatewayPort);
      process.env.SLUICE_METRICS_PORT = String(metricsPort.port);
      await expect(serve()).rejects.toThrow(
        `cannot listen on SLUICE_METRICS_HOST 127.0.0.1 SLUICE_METRICS_PORT ${metricsPort.port}`,
      );
      expect(openDatabaseFiles(dataDir)).toEqual([]);
      expect(await isFree(gatewayPort)).toBe(true);
    },
  );
});

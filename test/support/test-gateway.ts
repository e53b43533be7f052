import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import type { App } from "../../src/app.js";
import { type Config, loadConfig } from "../../src/config.js";
import { createGateway, type Gateway, type Injectables } from "../../src/deps.js";
import { createLogger } from "../../src/observability/logger.js";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { createGatewayServer, type GatewayServer } from "../../src/server.js";

export const adminToken = "test-admin-token-0123456789";

/** The output schema of the structured suites: one string `title`, required, nothing else. */
export const titleSchema = {
  type: "object",
  properties: { title: { type: "string" } },
  required: ["title"],
  additionalProperties: false,
};

export interface TestGateway {
  url: string;
  gateway: Gateway;
  server: GatewayServer;
  /** Every log line the gateway wrote, for leak tests. */
  logs: string[];
  close(): Promise<void>;
}

/** The log lines `sluice` wrote, parsed: from its `from`-th on (the count of lines before the act a test looks at). */
export function logLinesOf(sluice: TestGateway, from = 0): Record<string, unknown>[] {
  return sluice.logs.slice(from).map((line) => JSON.parse(line) as Record<string, unknown>);
}

/**
 * Starts a real gateway on 127.0.0.1 port 0 with a throwaway data dir, fast usage flushes and
 * captured logs. `overrides` are config values (e.g. provider base URLs pointing at a fake).
 */
export async function startTestGateway(
  overrides: Partial<Config> = {},
  injected: Partial<Injectables> = {},
): Promise<TestGateway> {
  const dataDir = mkdtempSync(join(tmpdir(), "sluice-test-"));
  // Listen first, so signed vault URLs can name the real port.
  // The production server (createGatewayServer) around an app that is built once the port is known.
  let app: App | null = null;
  const server = createGatewayServer({
    admitConnection: (socket, encrypted) => (app ? app.admitConnection(socket, encrypted) : true),
    handle: (request, response) => (app ? app.handle(request, response) : response.writeHead(503).end()),
    answerClientError: (error, socket) => (app ? app.answerClientError(error, socket) : socket.destroy()),
    answerConnect: (request, socket) => (app ? app.answerConnect(request, socket) : socket.destroy()),
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const config = loadConfig(
    {},
    {
      dataDir,
      port: 0,
      masterKey: randomBytes(32).toString("base64"),
      adminToken,
      logLevel: "debug",
      usageFlushIntervalMs: 20,
      metricsEnabled: false,
      publicUrl: `http://127.0.0.1:${port}`,
      ...overrides,
    },
  );
  const logs: string[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      logs.push(String(chunk));
      done();
    },
  });
  const gateway = await createGateway(config, { logger: createLogger(config.logLevel, sink), ...injected });
  app = gateway.app;
  return {
    url: `http://127.0.0.1:${port}`,
    gateway,
    server,
    logs,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await gateway.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

export interface TestProject {
  projectId: string;
  testKey: string;
  /** Partial keys per provider, each for a provider key `real-<provider>-key-<random>`. */
  partialKeys: Record<ProviderId, string>;
  providerKeys: Record<ProviderId, string>;
  keyIds: Record<ProviderId, string>;
  /** `<partial_key>.<test_key>` for the Bearer method. */
  bearer(provider: ProviderId): string;
}

/** Creates a project in test mode with one provider key per provider, through the admin use cases. */
export async function createTestProject(
  gateway: Gateway,
  fields: Record<string, unknown> = {},
): Promise<TestProject> {
  const created = await gateway.admin.createProject({
    name: "Test project",
    provider: "provider-a",
    testMode: true,
    ...fields,
  });
  const projectId = created.project.id;
  const partialKeys = {} as Record<ProviderId, string>;
  const providerKeys = {} as Record<ProviderId, string>;
  const keyIds = {} as Record<ProviderId, string>;
  for (const provider of ["provider-a", "provider-b", "provider-c"] as const) {
    const providerKey = `real-${provider}-key-${randomBytes(12).toString("hex")}`;
    const key = await gateway.admin.addProviderKey(projectId, { provider, apiKey: providerKey });
    partialKeys[provider] = key.partialKey;
    providerKeys[provider] = providerKey;
    keyIds[provider] = key.keyId;
  }
  return {
    projectId,
    testKey: created.testKey,
    partialKeys,
    providerKeys,
    keyIds,
    bearer: (provider) => `${partialKeys[provider]}.${created.testKey}`,
  };
}

/** A project on each provider (its `provider`), each with `fields` besides. */
export async function createProjectOnEachProvider(
  gateway: Gateway,
  fields: Record<string, unknown> = {},
): Promise<Record<ProviderId, TestProject>> {
  const projects = {} as Record<ProviderId, TestProject>;
  for (const provider of ["provider-a", "provider-b", "provider-c"] as const)
    projects[provider] = await createTestProject(gateway, { ...fields, provider });
  return projects;
}

/** The Apple team and key id the DeviceCheck tests sign with (a fake Apple is given the key). */
export const appleTeamId = "TEAM123456";
export const appleKeyId = "KEY1234567";

/**
 * A project on DeviceCheck alone (test mode off), production environment, signed for by
 * `privateKeyPem` under appleTeamId and appleKeyId; `fields` are further project fields.
 */
export function createDeviceCheckProject(
  gateway: Gateway,
  privateKeyPem: string,
  tokenMode: "single-use" | "cached",
  fields: Record<string, unknown> = {},
): Promise<TestProject> {
  return createTestProject(gateway, {
    testMode: false,
    deviceCheck: {
      enabled: true,
      teamId: appleTeamId,
      keyId: appleKeyId,
      privateKey: privateKeyPem,
      environment: "production",
      tokenMode,
    },
    ...fields,
  });
}

/**
 * The usage row of a request id, after flushing the usage queue. A row is written once Sluice has
 * seen the call end (a decompressing meter catching up, an upstream request the client left): it is
 * waited for, up to five seconds (a loaded machine is slow to get there); no row then throws. A test
 * that expects no row may wait less (`waitMs`): a row already queued is written by the first flush.
 */
export async function usageRowById(gateway: Gateway, requestId: string | null | undefined, waitMs = 5000) {
  const deadline = Date.now() + waitMs;
  for (;;) {
    await gateway.flushUsage();
    const row = await gateway.database.db
      .selectFrom("usage_records")
      .selectAll()
      .where("request_id", "=", requestId ?? "")
      .executeTakeFirst();
    if (row) return row;
    if (Date.now() > deadline) throw new Error(`no usage row for ${requestId}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Every usage row of a project, after flushing the usage queue. */
export async function projectUsageRows(sluice: TestGateway, project: TestProject) {
  await sluice.gateway.flushUsage();
  return sluice.gateway.database.db
    .selectFrom("usage_records")
    .selectAll()
    .where("project_id", "=", project.projectId)
    .execute();
}

/** The usage row of a response (by its x-request-id). */
export function usageRowOf(gateway: Gateway, response: Response) {
  return usageRowById(gateway, response.headers.get("x-request-id"));
}

import { afterAll, beforeAll } from "vitest";
import type { Config } from "../../src/config.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  projectUsageRows,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "./test-gateway.js";

/** What the proxy suites run against: a fake upstream, a gateway pointed at it, a project with a key of each provider. */
export interface ProxyStage {
  fake: FakeUpstream;
  sluice: TestGateway;
  project: TestProject;
  /** Every usage row of the project, after flushing the usage queue. */
  usageRows(): ReturnType<typeof projectUsageRows>;
  /** Closes the gateway, then the fake upstream. */
  close(): Promise<void>;
}

/** The stage, with `settings` over the gateway's test defaults and `fields` set on the project. */
export async function startProxyStage(
  settings: Partial<Config> = {},
  fields: Record<string, unknown> = {},
): Promise<ProxyStage> {
  const fake = await startFakeUpstream();
  const sluice = await startTestGateway({ ...providerBaseUrls(fake), ...settings });
  const project = await createTestProject(sluice.gateway, fields);
  return {
    fake,
    sluice,
    project,
    usageRows: () => projectUsageRows(sluice, project),
    async close() {
      await sluice.close();
      await fake.close();
    },
  };
}

/**
 * For the describe it is called in: the stage, started before its tests and closed after them,
 * with the clients `clientsOf` points at it (sdkClients, aiSdkClients). Its fields are there from
 * its beforeAll on: in the tests, and in the hooks set after this call.
 */
export function useProxyStage<Clients extends object>(
  clientsOf: (sluice: TestGateway, project: TestProject) => Clients,
): ProxyStage & Clients {
  const stage = {} as ProxyStage & Clients;
  beforeAll(async () => {
    const started = await startProxyStage();
    Object.assign(stage, started, clientsOf(started.sluice, started.project));
  });
  // A stage that did not start has nothing to close.
  afterAll(() => stage.close?.());
  return stage;
}

import { afterAll, beforeAll, expect } from "vitest";
import type { Config } from "../../src/config.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  projectUsageRows,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "./test-gateway.js";

type ProjectUsageRow = Awaited<ReturnType<typeof projectUsageRows>>[number];

/** What the proxy suites run against: a fake upstream, a gateway pointed at it, a project with a key of each provider. */
export interface ProxyStage {
  fake: FakeUpstream;
  sluice: TestGateway;
  project: TestProject;
  /** Every usage row of the project, after flushing the usage queue. */
  usageRows(): ReturnType<typeof projectUsageRows>;
  /**
   * The one usage row `run` adds, waited for up to five seconds (a row is written once the answer
   * has been read); more than one fails the test.
   */
  rowAddedBy(run: () => Promise<unknown>): Promise<ProjectUsageRow>;
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
  const usageRows = () => projectUsageRows(sluice, project);
  return {
    fake,
    sluice,
    project,
    usageRows,
    async rowAddedBy(run) {
      const before = new Set((await usageRows()).map((row) => row.request_id));
      await run();
      for (const deadline = Date.now() + 5000; Date.now() <= deadline; ) {
        const added = (await usageRows()).filter((row) => !before.has(row.request_id));
        if (added.length > 0) {
          expect(added).toHaveLength(1);
          return added[0] as ProjectUsageRow;
        }
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      throw new Error("no usage row");
    },
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

import type { Config } from "../../src/config.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { createTestProject, startTestGateway, type TestGateway, type TestProject } from "./test-gateway.js";

/** What the proxy suites run against: a fake upstream, a gateway pointed at it, a project with a key of each provider. */
export interface ProxyStage {
  fake: FakeUpstream;
  sluice: TestGateway;
  project: TestProject;
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
    async close() {
      await sluice.close();
      await fake.close();
    },
  };
}

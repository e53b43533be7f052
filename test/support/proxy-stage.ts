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

export async function startProxyStage(): Promise<ProxyStage> {
  const fake = await startFakeUpstream();
  const sluice = await startTestGateway({ ...providerBaseUrls(fake) });
  const project = await createTestProject(sluice.gateway);
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

import { afterAll, beforeAll, beforeEach } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createProjectOnEachProvider,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "./test-gateway.js";

/**
 * For the describe it is called in: a fake upstream and a gateway on it, with a project on each
 * provider holding `schema` (the fake answering `structuredOutput` until a test says otherwise),
 * the fake's record cleared before each test. `postText(provider)` asks that provider's project's
 * /v1/text to analyse "x".
 */
export function structuredOnEachProvider(schema: Record<string, unknown>, structuredOutput?: unknown) {
  let fake: FakeUpstream | undefined;
  let sluice: TestGateway | undefined;
  const projects = {} as Record<ProviderId, TestProject>;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    if (structuredOutput !== undefined) fake.setStructuredOutput(structuredOutput);
    Object.assign(projects, await createProjectOnEachProvider(sluice.gateway, { outputSchema: schema }));
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });
  beforeEach(() => fake?.clear());

  const started = (): TestGateway => {
    if (!sluice) throw new Error("the gateway starts in beforeAll");
    return sluice;
  };
  return {
    get fake(): FakeUpstream {
      if (!fake) throw new Error("the fake upstream starts in beforeAll");
      return fake;
    },
    get sluice(): TestGateway {
      return started();
    },
    projects,
    postText: (provider: ProviderId) =>
      fetch(`${started().url}/v1/text/${projects[provider].projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${projects[provider].bearer(provider)}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ text: "x" }),
      }),
  };
}

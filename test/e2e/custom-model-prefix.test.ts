import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const schema = { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] };

/**
 * A model name may be written after `models/` (provider C's list names its models so, and the admin
 * API and /v1/image take the prefix for every provider). /v1/image sent a name the catalogue does not
 * list without it, but the analysis endpoints sent such a name with it: provider A and B refuse
 * `models/gpt-…`, so the same uncatalogued name worked on /v1/image and failed on /v1/text, and the
 * usage rows of one model named it two ways.
 */
describe("a model name the catalogue does not list, written after models/", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-a",
      model: "models/gpt-9-preview",
      outputSchema: schema,
    });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  const post = (path: string, body: unknown) =>
    fetch(`${sluice.url}${path}/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
    });
  const sentModel = () =>
    (JSON.parse(fake.requests.at(-1)?.body.toString() ?? "{}") as { model?: unknown }).model;

  it("is sent without the prefix by /v1/text, as by /v1/image, and recorded so", async () => {
    const text = await post("/v1/text", { text: "x" });
    expect(text.status).toBe(200);
    expect(sentModel()).toBe("gpt-9-preview");
    expect((await usageRowOf(sluice.gateway, text)).model).toBe("gpt-9-preview");

    const image = await post("/v1/image", { prompt: "a lighthouse", model: "models/gpt-image-9" });
    expect(image.status).toBe(200);
    expect(sentModel()).toBe("gpt-image-9");
    expect((await usageRowOf(sluice.gateway, image)).model).toBe("gpt-image-9");
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * SPEC's endpoint summary, its Auth column row by row: /health and the six model lists are public
 * (the project-scoped ones need only the project id in the URL); every other endpoint answers 401
 * UNAUTHORIZED without credentials, or with a partial key alone, and calls no provider.
 */
describe("which endpoints need authentication", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(providerBaseUrls(fake));
    project = await createTestProject(sluice.gateway, {
      outputSchema: { type: "object", properties: { a: { type: "string" } }, required: ["a"] },
    });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  it("serves /health and the six model lists to anyone", async () => {
    const paths = ["/health"];
    for (const provider of ["provider-a", "provider-b", "provider-c"])
      paths.push(`/v1/${provider}/models`, `/v1/${provider}/${project.projectId}/models`);
    for (const path of paths) expect((await fetch(`${sluice.url}${path}`)).status, path).toBe(200);
    expect(fake.requests).toHaveLength(0);
  });

  // `{id}` is the project's id.
  const required: Array<[string, string, string]> = [
    ["POST", "/v1/text", '{"text":"x"}'],
    ["POST", "/v1/text/{id}", '{"text":"x"}'],
    ["POST", "/v1/vision", '{"image":"iVBORw0KGgo="}'],
    ["POST", "/v1/vision/{id}", '{"image":"iVBORw0KGgo="}'],
    ["POST", "/v1/pdf", '{"pdf":"data:application/pdf;base64,JVBERi0xLjQK"}'],
    ["POST", "/v1/pdf/{id}", '{"pdf":"data:application/pdf;base64,JVBERi0xLjQK"}'],
    ["POST", "/v1/image", '{"prompt":"x"}'],
    ["POST", "/v1/image/{id}", '{"prompt":"x"}'],
    ["POST", "/v1/provider-a/{id}/chat/completions", "{}"],
    ["POST", "/v1/provider-a/{id}/embeddings", "{}"],
    ["GET", "/v1/provider-a/{id}/files", ""],
    ["DELETE", "/v1/provider-a/{id}/files/file-1", ""],
    ["POST", "/v1/provider-b/{id}/messages", "{}"],
    ["POST", "/v1/provider-c/{id}/models/gemini-2.5-flash:generateContent", "{}"],
  ];

  it.each(required)(
    "answers %s %s 401 without credentials, and with a partial key alone",
    async (method, path, body) => {
      const alone: Record<string, string>[] = [{}, { "x-ai-key": project.partialKeys["provider-a"] }];
      for (const credentials of alone) {
        const response = await fetch(`${sluice.url}${path.replace("{id}", project.projectId)}`, {
          method,
          headers: { "content-type": "application/json", "x-project-id": project.projectId, ...credentials },
          ...(body === "" ? {} : { body }),
        });
        expect(response.status, JSON.stringify(credentials)).toBe(401);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
      }
      expect(fake.requests).toHaveLength(0);
    },
  );
});

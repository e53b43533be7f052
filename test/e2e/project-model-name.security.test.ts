import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const schema = { type: "object", properties: { title: { type: "string" } }, required: ["title"] };
const rule =
  "must be a model name: letters, digits, `.`, `_` and `-` (optionally after `models/`), at most 200 characters";
const injected = [
  "../../../evil",
  "gemini-2.5-flash:streamGenerateContent?alt=sse#",
  "gemini-2.5-flash%2F..",
  "",
  "x".repeat(201),
];

describe("a project's model never reshapes the provider's URL", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake) });
    project = await createTestProject(sluice.gateway, { provider: "provider-c", outputSchema: schema });
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });
  beforeEach(() => {
    fake.clear();
    fake.setStructuredOutput({ title: "ok" });
  });

  const admin = (method: string, path: string, body: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });

  it.each(injected)(
    "refuses to create or update a project with the model %j: 422 naming the field",
    async (model) => {
      for (const response of [
        await admin("POST", "", { name: "Evil", provider: "provider-c", model }),
        await admin("PATCH", `/${project.projectId}`, { model }),
      ]) {
        expect(response.status).toBe(422);
        const body = (await response.json()) as {
          error: { code: string; message: string; details: unknown };
        };
        expect(body.error.code).toBe("VALIDATION_ERROR");
        expect(body.error.details).toEqual({ problems: [`model: ${rule}`] });
      }
      expect((await sluice.gateway.admin.getProject(project.projectId)).model).toBeNull();
    },
  );

  it("takes catalogued, custom and models/ names", async () => {
    for (const model of ["gemini-2.5-flash", "models/gemini-2.5-flash", "my_custom.model-2", null]) {
      const response = await admin("PATCH", `/${project.projectId}`, { model });
      expect(response.status).toBe(200);
    }
  });

  it.each(injected.filter(Boolean))(
    "sends no request upstream for a project stored earlier with the model %j",
    async (model) => {
      const stored = await createTestProject(sluice.gateway, {
        provider: "provider-c",
        outputSchema: schema,
      });
      await sluice.gateway.database.db
        .updateTable("projects")
        .set({ model })
        .where("id", "=", stored.projectId)
        .execute();
      const response = await fetch(`${sluice.url}/v1/text/${stored.projectId}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${stored.bearer("provider-c")}`,
          "content-type": "application/json",
        },
        body: JSON.stringify({ text: "hello" }),
      });
      expect(response.status).toBe(422);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("VALIDATION_ERROR");
      expect(fake.requests).toEqual([]);
    },
  );
});

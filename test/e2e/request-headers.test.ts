import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import { authMethods, type DeviceCheckStage, startDeviceCheckStage } from "../support/device-check-stage.js";
import { usageRowOf } from "../support/test-gateway.js";

const pdf = Buffer.from("%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n");

/** Each endpoint SPEC's "Common request headers" table is for, without a project id in its path. */
const endpoints = [
  ["/v1/text", { text: "A calm lake at dawn" }],
  ["/v1/vision", { image: `data:image/png;base64,${tinyPng.toString("base64")}` }],
  ["/v1/pdf", { pdf: `data:application/pdf;base64,${pdf.toString("base64")}` }],
  ["/v1/image", { prompt: "a lighthouse" }],
] as const;

/**
 * SPEC "Common request headers (text, vision, pdf, image)": without the project id in the path it
 * comes from `x-project-id`; `x-ai-key` carries the partial key of the methods that are not Bearer,
 * `x-device-token` the legacy method's token. Each endpoint, called so by each of SPEC's four
 * authentication methods, answers 200 and records the method on its usage row.
 */
describe("the common request headers of the structured and image endpoints", () => {
  let stage: DeviceCheckStage;
  let fake: DeviceCheckStage["fake"];
  let sluice: DeviceCheckStage["sluice"];
  let project: DeviceCheckStage["project"];

  beforeAll(async () => {
    // Test Mode and DeviceCheck both on: every method can pass.
    stage = await startDeviceCheckStage();
    ({ fake, sluice, project } = stage);
  });
  afterAll(() => stage.close());

  const send = (path: string, body: unknown, headers: Record<string, string>) =>
    fetch(`${sluice.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-project-id": project.projectId, ...headers },
      body: JSON.stringify(body),
    });

  it.each(endpoints)(
    "answers %s with the project in x-project-id, by each authentication method",
    async (path, body) => {
      for (const method of authMethods) {
        fake.clear();
        const response = await send(path, body, stage.credentials(method));
        const answer = (await response.json()) as Record<string, unknown>;
        expect(response.status, `${method}: ${JSON.stringify(answer)}`).toBe(200);
        if (path === "/v1/image") expect(answer).toMatchObject({ images: [{ base64: expect.any(String) }] });
        else expect(answer).toEqual({ title: "A calm lake" });
        expect(fake.requests).toHaveLength(1);
        expect(String(fake.last()!.headers.authorization)).toBe(
          `Bearer ${project.providerKeys["provider-a"]}`,
        );
        expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
          project_id: project.projectId,
          auth_method: method,
          status: 200,
        });
      }
    },
  );

  it.each(endpoints)(
    "answers %s 401 for a method that needs x-ai-key sent without it",
    async (path, body) => {
      fake.clear();
      for (const method of ["test-key-header", "device-token-header"] as const) {
        const response = await send(path, body, stage.credentials(method, "provider-a", false));
        expect(response.status, method).toBe(401);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
      }
      expect(fake.requests).toHaveLength(0);
    },
  );
});

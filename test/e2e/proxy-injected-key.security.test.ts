import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { proxyKeyCalls } from "../support/proxy-key-calls.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";

/**
 * SPEC's proxies with the headers of every method sent at once (`Authorization: Bearer
 * <partial_key>.<token>` beside the test-key, `x-ai-key` and device-token headers; the test-key
 * header's method is tried first and succeeds, and proxy-auth-methods.test.ts sends each method
 * alone): the provider gets the full key in its own key header (A: the Authorization bearer; B:
 * x-api-key; C: x-goog-api-key, with the gateway's client identifier) and none of the client's
 * credential headers, which hold the partial key and the test key.
 */
describe("the key the proxies inject, and the credentials they keep back", () => {
  let stage: ProxyStage;
  let fake: ProxyStage["fake"];
  let sluice: ProxyStage["sluice"];
  let project: ProxyStage["project"];

  beforeAll(async () => {
    stage = await startProxyStage();
    ({ fake, sluice, project } = stage);
  });
  afterAll(() => stage.close());
  beforeEach(() => fake.clear());

  it.each(proxyKeyCalls)(
    "%s: the full key in the provider's key header, none of the client's credentials",
    async (provider, path, body, keyHeader, keyValue) => {
      const response = await fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${project.bearer(provider)}`,
          "content-type": "application/json",
          "x-ai-key": project.partialKeys[provider],
          "x-sluice-test-key": project.testKey,
          "x-device-token": Buffer.from("a device token").toString("base64"),
          "x-project-id": project.projectId,
          "x-goog-api-client": "the-app/1.0",
        },
        body: JSON.stringify(body),
      });
      expect(response.status).toBe(200);
      await response.arrayBuffer();
      const { headers } = fake.last()!;
      expect(headers[keyHeader]).toBe(keyValue(project.providerKeys[provider]));
      const credentials = ["authorization", "x-api-key", "x-goog-api-key"].filter(
        (name) => name !== keyHeader,
      );
      for (const name of [...credentials, "x-ai-key", "x-sluice-test-key", "x-device-token", "x-project-id"])
        expect(headers[name], name).toBeUndefined();
      const sent = JSON.stringify(headers);
      expect(sent).not.toContain(project.testKey);
      expect(sent).not.toContain(project.partialKeys[provider]);
      // SPEC: provider C is sent a client identifier that names the gateway, not the app's.
      if (provider === "provider-c") expect(headers["x-goog-api-client"]).toMatch(/^sluice\/\d/);
    },
  );
});

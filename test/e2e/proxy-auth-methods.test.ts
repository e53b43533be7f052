import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { ProviderId } from "../../src/providers/provider-id.js";
import { authMethods, type DeviceCheckStage, startDeviceCheckStage } from "../support/device-check-stage.js";
import { proxyKeyCalls } from "../support/proxy-key-calls.js";
import { usageRowOf } from "../support/test-gateway.js";

/**
 * SPEC, the three proxies: "`x-project-id` is not needed (the project is in the path), and
 * `x-ai-key` and `x-device-token` are used only with the alternative auth methods". Each proxy,
 * called by each of SPEC's four authentication methods with the project only in its path, forwards
 * the call with the full provider key in the provider's own key header and records the method.
 */
describe("the proxies, by each of SPEC's authentication methods", () => {
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
  beforeEach(() => fake.clear());

  const send = (provider: ProviderId, path: string, body: unknown, headers: Record<string, string>) =>
    fetch(`${sluice.url}/v1/${provider}/${project.projectId}/${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });

  it.each(proxyKeyCalls)(
    "forwards %s's call by each method, the full key in its key header, no x-project-id needed",
    async (provider, path, body, keyHeader, keyValue) => {
      for (const method of authMethods) {
        fake.clear();
        const response = await send(provider, path, body, stage.credentials(method, provider));
        const answer = await response.text();
        expect(response.status, `${method}: ${answer}`).toBe(200);
        expect(fake.requests, method).toHaveLength(1);
        const { headers } = fake.last()!;
        expect(headers[keyHeader], method).toBe(keyValue(project.providerKeys[provider]));
        for (const name of ["x-ai-key", "x-sluice-test-key", "x-device-token"])
          expect(headers[name], `${method}: ${name}`).toBeUndefined();
        expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
          project_id: project.projectId,
          provider,
          auth_method: method,
          status: 200,
        });
      }
    },
  );

  it.each(proxyKeyCalls)(
    "answers %s 401 for a method that needs x-ai-key sent without it, and never forwards",
    async (provider, path, body) => {
      for (const method of ["test-key-header", "device-token-header"] as const) {
        const response = await send(provider, path, body, stage.credentials(method, provider, false));
        expect(response.status, method).toBe(401);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("UNAUTHORIZED");
      }
      expect(fake.requests).toHaveLength(0);
    },
  );

  it.each(proxyKeyCalls)(
    "ignores x-ai-key beside a Bearer credential on %s (SPEC rule 2)",
    async (provider, path, body, keyHeader, keyValue) => {
      for (const method of ["bearer-test-key", "bearer-device-check"] as const) {
        fake.clear();
        const headers = { ...stage.credentials(method, provider), "x-ai-key": "sk_sluice_notakey_AAAA" };
        const response = await send(provider, path, body, headers);
        expect(response.status, method).toBe(200);
        await response.arrayBuffer();
        expect(fake.last()?.headers[keyHeader]).toBe(keyValue(project.providerKeys[provider]));
      }
    },
  );
});

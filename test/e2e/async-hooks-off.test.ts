import { executionAsyncId } from "node:async_hooks";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { providerC } from "../fakes/fake-upstream-responses.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * On Node 20 the first AsyncLocalStorage (or any enabled async hook) turns on promise hooks for the
 * whole process, for good: every promise created from then on pays for them (an async call and its
 * await measured ~115 ns without, ~290 ns with), the proxy's hot path included. One image call that
 * enabled them would slow every proxied request after it, and so would one admin call (the
 * benchmark creates its projects through the admin API): the deadline's cancel of the admin API's
 * PostgreSQL queries finds them through its own Kysely instances (docs/decisions/0049).
 */
describe("the gateway never turns on async hooks", () => {
  // The cheap guard, over all of src: AsyncLocalStorage and createHook come from this module only.
  it("imports node:async_hooks nowhere in src (its tests aside)", () => {
    const users = sourceFiles("src").filter((file) =>
      /(["'])(node:)?async_hooks\1/.test(readFileSync(file, "utf8")),
    );
    expect(users).toEqual([]);
  });

  describe("serving", () => {
    let fake: FakeUpstream;
    let sluice: TestGateway;
    let c: TestProject;

    beforeAll(async () => {
      fake = await startFakeUpstream();
      sluice = await startTestGateway({ providerCBaseUrl: `${fake.url}/c/v1beta` });
      c = await createTestProject(sluice.gateway, { provider: "provider-c" });
    });
    afterAll(async () => {
      await sluice.close();
      await fake.close();
    });

    const post = (path: string, body: unknown) =>
      fetch(`${sluice.url}/v1/${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${c.bearer("provider-c")}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });

    // And the paths themselves, dependencies included (an SDK's own AsyncLocalStorage would count).
    it("leaves them off through proxied calls and image generations (Gemini's calls run at once)", async () => {
      expect(await promiseHooksOn()).toBe(false);
      const proxied = await post(`provider-c/${c.projectId}/v1beta/models/gemini-2.0-flash:generateContent`, {
        contents: [{ parts: [{ text: "x" }] }],
      });
      expect(proxied.status).toBe(200);
      await proxied.arrayBuffer();
      for (let index = 0; index < 2; index++)
        fake.enqueueResponse({ status: 200, body: providerC.imageResponse("gemini-nano-banana-2.1", {}) });
      const gemini = await post(`image/${c.projectId}`, {
        prompt: "x",
        model: "gemini-nano-banana-2.1",
        n: 2,
      });
      expect(gemini.status).toBe(200);
      await gemini.arrayBuffer();
      const imagen = await post(`image/${c.projectId}`, { prompt: "x", model: "imagen-4.0-generate-001" });
      expect(imagen.status).toBe(200);
      await imagen.arrayBuffer();
      expect(await promiseHooksOn()).toBe(false);
    });
  });

  describe.each([
    ["SQLite", false],
    ["PostgreSQL", true],
  ])("the admin API on %s", (_engine, onPostgres) => {
    it.skipIf(onPostgres && !postgresAvailable)("leaves them off through a write and a report", async () => {
      const schema = onPostgres ? await createPostgresSchema() : null;
      const sluice = await startTestGateway(schema ? { databaseUrl: schema.url } : {});
      try {
        expect(await promiseHooksOn()).toBe(false);
        const headers = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };
        const created = await fetch(`${sluice.url}/admin/v1/projects`, {
          method: "POST",
          headers,
          body: JSON.stringify({ name: "Hooks", provider: "provider-a" }),
        });
        expect(created.status).toBe(201);
        const { project } = (await created.json()) as { project: { id: string } };
        const path = `${sluice.url}/admin/v1/projects/${project.id}`;
        const renamed = await fetch(path, {
          method: "PATCH",
          headers,
          body: JSON.stringify({ name: "Renamed" }),
        });
        expect(renamed.status).toBe(200);
        await renamed.arrayBuffer();
        const report = await fetch(`${path}/usage`, { headers });
        expect(report.status).toBe(200);
        await report.arrayBuffer();
        expect(await promiseHooksOn()).toBe(false);
      } finally {
        await sluice.close();
        await schema?.drop();
      }
    });
  });
});

/**
 * Whether promise hooks are on in this process: with them, each await's continuation runs in an
 * async context of its own; without, it stays in the one of the turn that ran it.
 */
async function promiseHooksOn(): Promise<boolean> {
  await null;
  const before = executionAsyncId();
  await null;
  return executionAsyncId() !== before;
}

function sourceFiles(directory: string): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { adminToken, startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * The project list reads on after the last project a page answered, by creation time, and a
 * project's creation time is its writer's clock (docs/operations.md, "Clocks"). A project created
 * while the list is read, by an instance whose clock is a second behind, comes before the page
 * already read: the pages read on do not answer it; the next list does (docs/api.md, "Project list
 * pages"). Each project there from the first page to the last is still answered once.
 */
describe.skipIf(!postgresAvailable)(
  "the project list read while an instance whose clock is behind creates one",
  () => {
    let ahead: TestGateway;
    let behind: TestGateway;
    let drop: (() => Promise<void>) | undefined;
    beforeAll(async () => {
      const schema = await createPostgresSchema();
      drop = schema.drop;
      const masterKey = Buffer.alloc(32, 3).toString("base64");
      ahead = await startTestGateway({ databaseUrl: schema.url, masterKey });
      behind = await startTestGateway(
        { databaseUrl: schema.url, masterKey },
        { now: () => new Date(Date.now() - 1000) },
      );
    });
    afterAll(async () => {
      await ahead?.close();
      await behind?.close();
      await drop?.();
    });
    const admin = (sluice: TestGateway, method: string, query = "", body?: unknown) =>
      fetch(`${sluice.url}/admin/v1/projects${query}`, {
        method,
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    const page = async (query: string) =>
      (await (await admin(ahead, "GET", query)).json()) as { data: { id: string }[]; next?: string };

    it("answers it on the next list, not on the pages read on, and every other project once", async () => {
      for (const id of ["p1", "p2", "p3"])
        expect((await admin(ahead, "POST", "", { id, name: id, provider: "provider-a" })).status).toBe(201);
      const first = await page("?limit=2");
      expect(first.data.map((project) => project.id)).toEqual(["p1", "p2"]);
      const created = await admin(behind, "POST", "", { id: "meanwhile", name: "m", provider: "provider-a" });
      expect(created.status).toBe(201);
      const ids = first.data.map((project) => project.id);
      for (let next = first.next; next !== undefined; ) {
        const more = await page(`?limit=2&cursor=${next}`);
        ids.push(...more.data.map((project) => project.id));
        next = more.next;
      }
      expect(ids).toEqual(["p1", "p2", "p3"]);
      expect((await page("")).data.map((project) => project.id)).toEqual(["meanwhile", "p1", "p2", "p3"]);
    });
  },
);

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createProjectRepository, type Project } from "../../src/storage/project-repository.js";
import { adminToken, startTestGateway, type TestGateway, titleSchema } from "../support/test-gateway.js";

/**
 * A gateway serving many tenants holds a project each, and each project view carries its output
 * schema (up to 65,536 bytes): 20,000 projects of 5 KB schemas made one `GET /admin/v1/projects`
 * answer 114 MB, built in one piece with the event loop held for 3 s and the process 610 MB larger;
 * 9,000 projects of schemas near the limit made it 500 after 14 s (past the longest string V8 can
 * build). The list answers `limit` projects at most (100 unless asked, 200 at most) and a `next`
 * cursor to the projects after them (docs/decisions/0029).
 */
describe("the project list of a gateway with 2,500 projects", () => {
  let sluice: TestGateway;
  const count = 2500;
  // Creation order is not id order: the list's order is creation, then id (code points) in a tie.
  const idOf = (index: number) => `tenant-${String((index * 7919) % count).padStart(5, "0")}`;
  const createdAtOf = (index: number) =>
    new Date(Date.parse("2020-06-01T00:00:00.000Z") + Math.floor(index / 3) * 1000).toISOString();
  const expected = Array.from({ length: count }, (_, index) => ({ id: idOf(index), at: createdAtOf(index) }))
    .sort((left, right) =>
      left.at === right.at
        ? Buffer.compare(Buffer.from(left.id), Buffer.from(right.id))
        : left.at < right.at
          ? -1
          : 1,
    )
    .map((entry) => entry.id);

  beforeAll(async () => {
    sluice = await startTestGateway();
    const projects = createProjectRepository(sluice.gateway.database.db);
    const created = await sluice.gateway.admin.createProject({
      id: "template",
      name: "Template",
      provider: "provider-a",
      outputSchema: titleSchema,
    });
    const template: Project = (await projects.get(created.project.id)) as Project;
    await projects.delete("template");
    for (let index = 0; index < count; index++) {
      const at = createdAtOf(index);
      await projects.insert({
        ...template,
        id: idOf(index),
        name: `Tenant ${index}`,
        createdAt: at,
        updatedAt: at,
      });
    }
  }, 120_000);
  afterAll(async () => {
    await sluice?.close();
  });

  const list = async (query = "") => {
    const response = await fetch(`${sluice.url}/admin/v1/projects${query}`, {
      headers: { authorization: `Bearer ${adminToken}` },
    });
    const text = await response.text();
    return { status: response.status, bytes: Buffer.byteLength(text), body: JSON.parse(text) as Answer };
  };
  interface Answer {
    data: { id: string; name: string; outputSchema: unknown }[];
    next?: string;
    error?: { code: string; message: string; details: { problems: string[] } };
  }

  it("answers the first 100 projects and a cursor, and paging reaches every project once, in order", async () => {
    const first = await list();
    expect(first.status).toBe(200);
    expect(first.body.data).toHaveLength(100);
    expect(first.body.data.map((project) => project.id)).toEqual(expected.slice(0, 100));
    expect(first.body.data[0]).toMatchObject({ name: expect.any(String), outputSchema: titleSchema });
    expect(typeof first.body.next).toBe("string");
    expect(first.bytes).toBeLessThan(100 * 1024);
    const seen = first.body.data.map((project) => project.id);
    let next = first.body.next;
    let pages = 1;
    // Read on with another `limit` now and then: the cursor alone says where.
    const limits = [200, 1, 150];
    while (next !== undefined) {
      const limit = limits[pages - 1] ?? 200;
      const page = await list(`?limit=${limit}&cursor=${encodeURIComponent(next)}`);
      expect(page.status).toBe(200);
      expect(page.body.data.length).toBeLessThanOrEqual(limit);
      seen.push(...page.body.data.map((project) => project.id));
      next = page.body.next;
      pages++;
    }
    // 100, 200, 1, 150, then 2,049 in pages of 200.
    expect(pages).toBe(4 + 11);
    expect(seen).toEqual(expected);
  }, 60_000);

  it("reads on from where the cursor stood while projects are created and deleted meanwhile", async () => {
    const first = await list("?limit=200");
    expect(first.body.data.map((project) => project.id)).toEqual(expected.slice(0, 200));
    // One project already read and one not yet read go; a new one comes last (created now).
    for (const id of [expected[10], expected[1000]]) await sluice.gateway.admin.deleteProject(id as string);
    await sluice.gateway.admin.createProject({ id: "a-newcomer", name: "New", provider: "provider-a" });
    const seen = first.body.data.map((project) => project.id);
    let next = first.body.next;
    while (next !== undefined) {
      const page = await list(`?limit=200&cursor=${encodeURIComponent(next)}`);
      seen.push(...page.body.data.map((project) => project.id));
      next = page.body.next;
    }
    expect(seen).toEqual([...expected.filter((id) => id !== expected[1000]), "a-newcomer"]);
  }, 60_000);
});

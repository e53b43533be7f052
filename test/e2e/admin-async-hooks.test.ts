import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";

const testGatewayModule = fileURLToPath(new URL("../support/test-gateway.ts", import.meta.url));

/**
 * Starts a gateway on the database URL given as the first argument (none: SQLite), makes admin API
 * calls (a project created, updated, its usage report read), and prints whether a promise hook is
 * set. In a process of its own: the test runner's may have hooks of its own.
 */
const adminCalls = `
import { adminToken, startTestGateway } from ${JSON.stringify(testGatewayModule)};
const databaseUrl = process.argv[1] || undefined;
const sluice = await startTestGateway(databaseUrl ? { databaseUrl } : {});
const headers = { authorization: "Bearer " + adminToken, "content-type": "application/json" };
const created = await fetch(sluice.url + "/admin/v1/projects", {
  method: "POST",
  headers,
  body: JSON.stringify({ name: "Hooks", provider: "provider-a" }),
}).then((response) => response.json());
const path = sluice.url + "/admin/v1/projects/" + created.project.id;
const statuses = [
  (await fetch(path, { method: "PATCH", headers, body: JSON.stringify({ name: "Renamed" }) })).status,
  (await fetch(path + "/usage", { headers })).status,
];
// Node 20's own view of the promise hooks: what AsyncLocalStorage.run (async_hooks) turns on.
const hooks = process.binding("async_wrap").getPromiseHooks().filter(Boolean).length;
await sluice.close();
process.stdout.write(JSON.stringify({ statuses, hooks }));
`;

/**
 * The admin API's calls turn no async hooks on: on Node 20, once one is (the first
 * `AsyncLocalStorage.run`), every promise the process makes pays for it, the proxy's too (an async
 * call and its await: 115 ns without, about 290 ns with). The benchmark creates its projects through
 * the admin API. (docs/decisions/0049: the deadline's cancel of the admin queries finds them
 * through the admin API's own Kysely instances, not an AsyncLocalStorage.)
 */
describe("admin API calls and async hooks", () => {
  async function promiseHooksAfterAdminCalls(databaseUrl = "") {
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--no-deprecation", "--import", "tsx", "--input-type=module", "-e", adminCalls, databaseUrl],
      { timeout: 30_000 },
    );
    return JSON.parse(stdout) as { statuses: number[]; hooks: number };
  }

  it("turns none on with SQLite", async () => {
    expect(await promiseHooksAfterAdminCalls()).toEqual({ statuses: [200, 200], hooks: 0 });
  }, 40_000);

  describe.skipIf(!postgresAvailable)("on PostgreSQL", () => {
    let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
    beforeEach(async () => {
      schema = await createPostgresSchema();
    });
    afterEach(async () => {
      await schema?.drop();
    });

    it("turns none on", async () => {
      expect(await promiseHooksAfterAdminCalls(schema.url)).toEqual({ statuses: [200, 200], hooks: 0 });
    }, 40_000);
  });
});

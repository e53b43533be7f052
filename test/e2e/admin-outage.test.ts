import BetterSqlite3 from "better-sqlite3";
import { describe, expect, it } from "vitest";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

const headers = { authorization: `Bearer ${adminToken}`, "content-type": "application/json" };

interface AdminCall {
  method: string;
  path: string;
  body?: unknown;
}

/** Every admin route, each of which reads or writes the database; the project is deleted last. */
async function adminCalls(sluice: TestGateway): Promise<AdminCall[]> {
  const project = await createTestProject(sluice.gateway);
  const [testKey] = await sluice.gateway.admin.listTestKeys(project.projectId);
  const at = `/admin/v1/projects/${project.projectId}`;
  return [
    {
      method: "POST",
      path: "/admin/v1/projects",
      body: { name: "During the outage", provider: "provider-a" },
    },
    { method: "GET", path: "/admin/v1/projects" },
    { method: "GET", path: at },
    { method: "PATCH", path: at, body: { name: "Renamed" } },
    { method: "POST", path: `${at}/test-keys` },
    { method: "GET", path: `${at}/test-keys` },
    { method: "DELETE", path: `${at}/test-keys/${testKey?.testKeyId}` },
    { method: "POST", path: `${at}/keys`, body: { provider: "provider-a", apiKey: "sk-during-the-outage" } },
    { method: "GET", path: `${at}/keys` },
    { method: "DELETE", path: `${at}/keys/${project.keyIds["provider-a"]}` },
    { method: "GET", path: `${at}/usage` },
    { method: "DELETE", path: at },
  ];
}

function send(sluice: TestGateway, call: AdminCall): Promise<Response> {
  return fetch(`${sluice.url}${call.path}`, {
    method: call.method,
    headers,
    ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
  });
}

async function expectUnavailable(sluice: TestGateway, call: AdminCall): Promise<void> {
  const response = await send(sluice, call);
  const label = `${call.method} ${call.path}`;
  expect({ label, status: response.status }).toEqual({ label, status: 503 });
  expect(response.headers.get("retry-after")).toBe("2");
  expect(await response.json()).toEqual({
    error: {
      code: "SERVICE_UNAVAILABLE",
      details: { retryable: true },
      message: "The gateway's database is unavailable; retry shortly",
      requestId: response.headers.get("x-request-id"),
    },
  });
}

describe.skipIf(!postgresAvailable)("the admin API while PostgreSQL is down", () => {
  it("answers 503 SERVICE_UNAVAILABLE with Retry-After on every route, and serves again once it is back", async () => {
    const schema = await createPostgresSchema();
    const proxy = await startTcpProxy(5432);
    const sluice = await startTestGateway({
      databaseUrl: schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
    });
    try {
      const calls = await adminCalls(sluice);
      proxy.cut();
      for (const call of calls) await expectUnavailable(sluice, call);
      // Bad input is still the client's error, whatever the database's state.
      const invalid = await send(sluice, { method: "POST", path: "/admin/v1/projects", body: { name: 1 } });
      expect(invalid.status).toBe(400);
      proxy.restore();
      const listed = await send(sluice, { method: "GET", path: "/admin/v1/projects" });
      expect(listed.status).toBe(200);
      expect(((await listed.json()) as { data: Array<{ name: string }> }).data.map((p) => p.name)).toEqual([
        "Test project",
      ]);
      // A refused connection (the proxy gone) is the same outage as a dropped one.
      await proxy.close();
      for (const call of calls.filter((each) => each.method === "GET")) await expectUnavailable(sluice, call);
      expect(sluice.logs.join("")).not.toContain("request failed");
    } finally {
      await sluice.close();
      await proxy.close();
      await schema.drop();
    }
  }, 30_000);
});

describe("the admin API while SQLite is locked by another writer", () => {
  it("answers 503 SERVICE_UNAVAILABLE on every write and keeps serving reads", async () => {
    const sluice = await startTestGateway();
    const { sqlite, sqliteLockWait } = sluice.gateway.database;
    if (!sqlite || !sqliteLockWait) throw new Error("the test gateway should run on SQLite");
    // SQLITE_BUSY at once instead of after the usual 5 s wait.
    sqliteLockWait.ms = 0;
    const writer = new BetterSqlite3(sqlite.name);
    try {
      const calls = await adminCalls(sluice);
      writer.exec("begin immediate");
      for (const call of calls) {
        if (call.method === "GET") expect((await send(sluice, call)).status).toBe(200);
        else await expectUnavailable(sluice, call);
      }
      writer.exec("rollback");
      const last = calls.at(-1);
      if (last) expect((await send(sluice, last)).status).toBe(204);
    } finally {
      writer.close();
      await sluice.close();
    }
  });
});

import { sql } from "kysely";
import { describe, expect, it } from "vitest";
import { startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChatStatus } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { startTcpProxy } from "../support/tcp-proxy.js";
import { namedSessions, terminateBackendsHeld } from "../support/terminate-backends.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * PostgreSQL restarting, failing over, or a pooler dropping idle connections closes the gateway's
 * pooled connections while the database stays reachable. A project or credential read sent on one
 * of them failed, and every call waiting for that read was answered 503 together (an audit that
 * ran `pg_terminate_backend` on Sluice's backends: 30 to 82 calls a run, the first burst after it
 * always among them). Here the gateway reaches PostgreSQL through a proxy that does not pass the
 * closes on, so that the pool finds each connection gone only when it sends on it, as it does when
 * the calls are read before the close (under load), or behind a network that forgot it.
 * src/storage/postgres-terminated-connections.test.ts sends on connections the server closed
 * (57P01) before the pool has read the close.
 */
describe.skipIf(!postgresAvailable)("PostgreSQL terminates the gateway's pooled connections", () => {
  it("answers the calls whose records are read after it (200), not 503", async () => {
    const schema = await createPostgresSchema();
    const proxy = await startTcpProxy(5432);
    const { url, applicationName } = namedSessions(
      schema.url.replace("127.0.0.1:5432", `127.0.0.1:${proxy.port}`),
    );
    const fake = await startFakeUpstream();
    const sluice = await startTestGateway({ databaseUrl: url, providerABaseUrl: `${fake.url}/a/v1` });
    try {
      const projects: TestProject[] = [];
      for (let each = 0; each < 8; each++) projects.push(await createTestProject(sluice.gateway));
      const burst = (some: TestProject[]) =>
        Promise.all(some.map((project) => proxiedChatStatus(sluice.url, project)));
      expect(await burst(projects.slice(0, 4))).toEqual([200, 200, 200, 200]);
      // The pool holds connections, as under traffic: six, each used at once.
      const { db } = sluice.gateway.database;
      await Promise.all([1, 2, 3, 4, 5, 6].map(() => sql`select pg_sleep(0.05)`.execute(db)));
      proxy.hideCloses();
      expect(terminateBackendsHeld(applicationName)).toBeGreaterThanOrEqual(6);
      // Calls on projects this instance has not read yet (each needs its records from the
      // database), and the admin API's list of projects.
      const listed = fetch(`${sluice.url}/admin/v1/projects`, {
        headers: { authorization: `Bearer ${adminToken}` },
      });
      expect(await burst(projects.slice(4))).toEqual([200, 200, 200, 200]);
      expect((await listed).status).toBe(200);
    } finally {
      await sluice.close();
      await proxy.close();
      await fake.close();
      await schema.drop();
    }
  }, 30_000);
});

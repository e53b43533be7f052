import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import { createTestProject, startTestGateway, type TestGateway } from "../support/test-gateway.js";

describe.skipIf(!postgresAvailable)("a proxied call's usage row on PostgreSQL", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let schema: Awaited<ReturnType<typeof createPostgresSchema>>;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    schema = await createPostgresSchema();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1`, databaseUrl: schema.url });
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
    await schema.drop();
  });

  it("writes the row of a call whose body names a model holding a NUL byte", async () => {
    const project = await createTestProject(sluice.gateway);
    fake.failNext(400);
    const response = await proxiedChat(sluice.url, project, {
      body: Buffer.from('{"model":"gpt-4o\u0000","messages":[]}', "latin1"),
    });
    await response.arrayBuffer();
    expect(response.status).toBe(400);
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db
      .selectFrom("usage_records")
      .select("request_id")
      .where("request_id", "=", response.headers.get("x-request-id") ?? "")
      .execute();
    expect(sluice.logs.join("\n")).not.toContain("usage row refused by the database");
    expect(rows).toHaveLength(1);
  });
});

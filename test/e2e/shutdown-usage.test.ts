import { rmSync } from "node:fs";
import { join } from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { proxiedChat } from "../support/proxied-chat.js";
import { createTestProject, startTestGateway } from "../support/test-gateway.js";

/**
 * Shutdown as src/server.ts runs it (the connections cut, then the gateway closed at once): calls
 * cut short, or whose row is written just after their response closed, still get their rows.
 */
describe("usage rows at shutdown", () => {
  let fake: FakeUpstream;

  beforeAll(async () => {
    fake = await startFakeUpstream();
  });

  afterAll(async () => {
    fake.hangStreamsAfter(null);
    fake.setCompression(null);
    await fake.close();
  });

  it.each([
    ["a stream cut by the shutdown", "stream"],
    ["a compressed answer read after its response closed", "gzip"],
  ])("keeps the row of %s", async (_name, kind) => {
    const sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
    const dataDir = sluice.gateway.config.dataDir;
    const project = await createTestProject(sluice.gateway);
    fake.hangStreamsAfter(kind === "stream" ? 1 : null);
    fake.setCompression(kind === "gzip" ? "gzip" : null);
    const response = await proxiedChat(sluice.url, project, {
      body: { model: "gpt-4o-mini", messages: [], stream: kind === "stream" },
    });
    const reader = response.body!.getReader();
    await reader.read();
    if (kind === "gzip") while (!(await reader.read()).done);
    sluice.server.closeAllConnections();
    sluice.server.close();
    await sluice.gateway.close();
    const database = new BetterSqlite3(join(dataDir, "sluice.sqlite"), { readonly: true });
    try {
      const rows = database
        .prepare("select status, outcome from usage_records where project_id = ?")
        .all(project.projectId);
      expect(rows).toHaveLength(1);
    } finally {
      database.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { holdWriteLock } from "../support/sqlite-lock-holder.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

const run = promisify(execFile);

/**
 * The gateway on its embedded SQLite file while another process (a `sqlite3` shell, a script, a long
 * CLI command) holds the file's write lock: an admin write waits for it, and every other request is
 * served meanwhile. Before, the write waited in SQLite's busy handler on the event loop, and
 * /health and proxied calls were answered only once the lock was released.
 */
/**
 * The client, a process of its own (the test's own timers would stall with the gateway's event
 * loop): a PATCH of the project's name, and 100 ms later, once it waits for the lock, /health and
 * a proxied call; each one's status, time taken and moment answered (ms since the first was sent).
 */
const client = `
const [url, projectId, bearer, adminToken] = process.argv.slice(1);
const started = performance.now();
const timed = async (send) => {
  const sent = performance.now();
  const response = await send();
  await response.arrayBuffer();
  const now = performance.now();
  return { status: response.status, tookMs: now - sent, answeredAt: now - started };
};
const patch = timed(() => fetch(url + "/admin/v1/projects/" + projectId, {
  method: "PATCH",
  headers: { authorization: "Bearer " + adminToken, "content-type": "application/json" },
  body: JSON.stringify({ name: "Renamed while locked" }),
}));
await new Promise((resolve) => setTimeout(resolve, 100));
const health = await timed(() => fetch(url + "/health"));
const proxied = await timed(() => fetch(url + "/v1/provider-a/" + projectId + "/chat/completions", {
  method: "POST",
  headers: { authorization: "Bearer " + bearer, "content-type": "application/json" },
  body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
}));
const patched = await patch;
process.stdout.write(JSON.stringify({ health, proxied, patch: patched }));
`;

interface Timing {
  status: number;
  tookMs: number;
  answeredAt: number;
}

async function callsFromAnotherProcess(url: string, project: TestProject) {
  const { stdout } = await run(process.execPath, [
    "--input-type=module",
    "-e",
    client,
    url,
    project.projectId,
    project.bearer("provider-a"),
    adminToken,
  ]);
  const timings = JSON.parse(stdout) as Record<"health" | "proxied" | "patch", Timing>;
  const statuses = {
    health: timings.health.status,
    proxied: timings.proxied.status,
    patch: timings.patch.status,
  };
  return { ...timings, statuses };
}

describe("a gateway whose SQLite file another process holds write-locked", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerABaseUrl: `${fake.url}/a/v1` });
    project = await createTestProject(sluice.gateway);
    // A first call loads what a proxied call needs once (its modules, the upstream connection).
    const first = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    });
    expect(first.status).toBe(200);
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });

  it("answers /health and proxied calls while an admin write waits for the lock, and the write once it is released", async () => {
    const file = sluice.gateway.database.sqlite?.name;
    if (!file) throw new Error("the test gateway should run on SQLite");
    // Long enough that a third of it is far above what a loaded machine takes to answer (333 ms was
    // passed once with the suite beside it), and a wait on the event loop would take all of it.
    const holdMs = 2000;
    const lock = await holdWriteLock(file, holdMs);
    const [timings] = await Promise.all([callsFromAnotherProcess(sluice.url, project), lock.released]);
    expect(timings.statuses).toEqual({ health: 200, proxied: 200, patch: 200 });
    // Both answered while the lock was held, before the write that waited for it.
    expect(timings.health.tookMs).toBeLessThan(holdMs / 3);
    expect(timings.proxied.tookMs).toBeLessThan(holdMs / 3);
    expect(timings.proxied.answeredAt).toBeLessThan(timings.patch.answeredAt);
    expect(timings.patch.tookMs).toBeGreaterThan(holdMs / 2);
    expect((await sluice.gateway.admin.getProject(project.projectId)).name).toBe("Renamed while locked");
  });
});

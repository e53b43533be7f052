import { gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import { injectedKey } from "../support/proxy-key-calls.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * zlib's one-shot `gunzip`, held once it has decoded: the test lets it answer (`release`) when it
 * has seen what happens meanwhile. The gateway's own code imports it through this mock.
 */
const gate = vi.hoisted(() => {
  const held: (() => void)[] = [];
  let reached: (() => void) | null = null;
  return {
    hold(done: () => void) {
      held.push(done);
      reached?.();
    },
    /** Resolves once a decode is held. */
    reached: () =>
      new Promise<void>((resolve) => {
        if (held.length > 0) resolve();
        else reached = resolve;
      }),
    release() {
      reached = null;
      for (const done of held.splice(0)) done();
    },
  };
});

vi.mock("node:zlib", async (importOriginal) => {
  const zlib = await importOriginal<typeof import("node:zlib")>();
  return {
    ...zlib,
    gunzip: (body: Buffer, options: object, done: (error: Error | null, result: Buffer) => void) =>
      zlib.gunzip(body, options, (error, result) => gate.hold(() => done(error, result))),
  };
});

/**
 * A provider that compresses its error though Sluice asks for identity, and quotes the key in it:
 * the body is decoded (to mask the key) off the event loop, so the gateway answers other calls
 * meanwhile, and a client that leaves, or a shutdown that cuts its connection, ends the call then.
 */
describe("a compressed error answer decoded to mask the key", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      request.resume();
      if (request.url?.includes("plain")) {
        response.writeHead(404, { "content-type": "application/json" });
        response.end('{"error":{"message":"no such thing"}}');
        return;
      }
      // Large, as a flooding provider's may be: ~1 MiB of text around the key.
      const text = JSON.stringify({
        error: {
          message: `Incorrect API key provided: ${injectedKey(request)}`,
          padding: "x".repeat(1 << 20),
        },
      });
      const body = gzipSync(text);
      response.writeHead(401, {
        "content-type": "application/json",
        "content-encoding": "gzip",
        "content-length": String(body.length),
      });
      response.end(body);
    });
    sluice = await startTestGateway({ providerABaseUrl: `${upstream.url}/a/v1` });
  });

  afterAll(async () => {
    gate.release();
    await sluice.close();
    await upstream.close();
  });

  const call = (gateway: TestGateway, project: TestProject, path: string, signal?: AbortSignal) =>
    fetch(`${gateway.url}/v1/provider-a/${project.projectId}/${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [] }),
      signal,
    });

  /** Which comes first: the decode held at the gate, or the answer (which cannot begin before the decode ends). */
  const firstOf = (answer: Promise<Response>) =>
    Promise.race([
      gate.reached().then(() => "decoding"),
      answer.then(
        () => "answered",
        () => "failed",
      ),
    ]);

  /** The project's usage rows once there are `count`, waited for up to 15 seconds (a loaded machine). */
  async function rowsOf(gateway: TestGateway, project: TestProject, count: number) {
    const deadline = Date.now() + 15_000;
    for (;;) {
      await gateway.gateway.flushUsage();
      const rows = await gateway.gateway.database.db
        .selectFrom("usage_records")
        .select(["status", "outcome"])
        .where("project_id", "=", project.projectId)
        .orderBy("created_at")
        .execute();
      if (rows.length >= count || Date.now() > deadline) return rows;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it("answers another call while the error decodes, then sends the error decoded and masked", async () => {
    const project = await createTestProject(sluice.gateway);
    const pending = call(sluice, project, "chat/completions");
    expect(await firstOf(pending)).toBe("decoding");
    // The event loop is free: another call is answered from start to end while the decode is held.
    const other = await call(sluice, project, "plain");
    expect(other.status).toBe(404);
    expect(await other.json()).toEqual({ error: { message: "no such thing" } });
    gate.release();
    const response = await pending;
    const body = await response.text();
    const key = project.providerKeys["provider-a"];
    expect(response.status).toBe(401);
    expect(response.headers.get("content-encoding")).toBeNull();
    expect(body).not.toContain(key);
    expect(JSON.parse(body).error.message).toBe(`Incorrect API key provided: ${"*".repeat(key.length)}`);
  });

  it("ends the call as aborted when the client leaves during the decode, and writes nothing after", async () => {
    const project = await createTestProject(sluice.gateway);
    const leave = new AbortController();
    const pending = call(sluice, project, "chat/completions", leave.signal);
    expect(await firstOf(pending)).toBe("decoding");
    leave.abort();
    await expect(pending).rejects.toThrow();
    // Recorded before the decode ends: the call does not wait for it.
    expect(await rowsOf(sluice, project, 1)).toEqual([{ status: 401, outcome: "aborted" }]);
    gate.release();
    // The gateway goes on answering.
    expect((await call(sluice, project, "plain")).status).toBe(404);
  });

  it("ends the call as aborted when the shutdown cuts its connection during the decode", async () => {
    const own = await startTestGateway({ providerABaseUrl: `${upstream.url}/a/v1` });
    try {
      const project = await createTestProject(own.gateway);
      const pending = call(own, project, "chat/completions");
      expect(await firstOf(pending)).toBe("decoding");
      const hurry = new AbortController();
      const drained = own.server.drain(60_000, hurry.signal);
      hurry.abort();
      // The answer had begun (its head was written with the first chunk): its connection is cut.
      expect(await drained).toEqual({ refused: 0, cut: 1 });
      await expect(pending.then((response) => response.text())).rejects.toThrow();
      expect(await rowsOf(own, project, 1)).toEqual([{ status: 401, outcome: "aborted" }]);
      gate.release();
    } finally {
      gate.release();
      await own.close();
    }
  });
});

import { readdirSync, readlinkSync, writeFileSync } from "node:fs";
import { connect, type Socket } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/** Serving the local vault's files at their signed URLs, to browsers and apps (docs/images.md). */
describe("the local vault's signed URLs", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ providerCBaseUrl: `${fake.url}/c/v1beta`, vaultUrlTtlSeconds: 3600 });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "team7",
      saveImagesToVault: true,
    });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  /** A freshly generated image: its signed URL and its file in the vault. */
  async function stored(): Promise<{ url: URL; file: string }> {
    const response = await fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ prompt: "a lighthouse" }),
    });
    expect(response.status).toBe(200);
    const [image] = ((await response.json()) as { images: Array<{ url: string; path: string }> }).images;
    return { url: new URL(image!.url), file: join(sluice.gateway.config.dataDir, "vault", image!.path) };
  }

  /**
   * A client that sends its request and reads nothing of the answer after its first bytes, as a slow
   * or stalled client (or one holding many connections on purpose) does.
   */
  function stalledClient(url: URL): Promise<Socket> {
    return new Promise((resolve, reject) => {
      const socket = connect(Number(url.port), url.hostname, () =>
        socket.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\n\r\n`),
      );
      socket.once("data", () => {
        socket.pause();
        resolve(socket);
      });
      socket.once("error", reject);
    });
  }

  /** How many of this process's open files are `file` (Linux: /proc/self/fd). */
  function openCount(file: string): number {
    return readdirSync("/proc/self/fd").filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === file;
      } catch {
        return false;
      }
    }).length;
  }

  it("holds no more than a chunk of a large file in memory per client that does not read its answer", {
    timeout: 30_000,
  }, async () => {
    const { url, file } = await stored();
    const size = 16 * 1024 * 1024;
    writeFileSync(file, Buffer.alloc(size, 7));
    const before = process.memoryUsage().arrayBuffers;
    const clients = await Promise.all(Array.from({ length: 12 }, () => stalledClient(url)));
    try {
      // The server writes what the connections take, then waits on them.
      await sleep(300);
      const held = process.memoryUsage().arrayBuffers - before;
      // Read whole, each answer holds the file's 16 MiB until its client has read it all: 192 MiB.
      expect(held).toBeLessThan(size * 3);
    } finally {
      for (const client of clients) client.destroy();
    }
    // The file is still served whole to a client that reads it.
    const fetched = await fetch(url);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get("content-length")).toBe(String(size));
    expect((await fetched.arrayBuffer()).byteLength).toBe(size);
  });

  it.skipIf(process.platform !== "linux")(
    "closes the file when a client leaves in the middle of its answer, and after a HEAD",
    async () => {
      const { url, file } = await stored();
      writeFileSync(file, Buffer.alloc(32 * 1024 * 1024, 7));
      const clients = await Promise.all(Array.from({ length: 4 }, () => stalledClient(url)));
      await sleep(100);
      expect(openCount(file)).toBe(4);
      for (const client of clients) client.destroy();
      await expect.poll(() => openCount(file)).toBe(0);
      const head = await fetch(url, { method: "HEAD" });
      expect(head.status).toBe(200);
      expect(head.headers.get("content-length")).toBe(String(32 * 1024 * 1024));
      expect(head.headers.get("content-type")).toBe("image/png");
      expect(openCount(file)).toBe(0);
    },
  );

  it("serves a small file whole, with its type and nosniff", async () => {
    const { url } = await stored();
    const fetched = await fetch(url);
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get("content-type")).toBe("image/png");
    expect(fetched.headers.get("x-content-type-options")).toBe("nosniff");
    expect(fetched.headers.get("content-length")).toBe(String(tinyPng.length));
    expect(Buffer.from(await fetched.arrayBuffer()).equals(tinyPng)).toBe(true);
  });
});

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import { tinyPng } from "../fakes/fake-upstream-responses.js";

const adminToken = `admin-${randomBytes(12).toString("hex")}`;

/** Whether this machine can listen on the IPv6 loopback (some CI containers have no IPv6). */
const ipv6Loopback = await new Promise<boolean>((resolve) => {
  const probe = createServer();
  probe.once("error", () => resolve(false));
  probe.listen(0, "::1", () => probe.close(() => resolve(true)));
});

/**
 * `npm start` as production runs it, on PORT=0 and without SLUICE_PUBLIC_URL: the signed vault
 * URLs it hands out must name the address it really listens on (the port it got, an IPv6 address
 * in brackets), not the configured `HOST:PORT` (`http://127.0.0.1:0`, `http://::1:0`).
 */
describe.each([
  ["127.0.0.1", true],
  ["::1", ipv6Loopback],
])("signed vault URLs of a gateway on HOST=%s PORT=0", (host, available) => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-vault-url-"));
  let fake: FakeUpstream;
  let child: ChildProcess | undefined;
  let url = "";
  let output = "";

  beforeAll(async () => {
    if (!available) return;
    fake = await startFakeUpstream();
    child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        PORT: "0",
        HOST: host,
        SLUICE_PUBLIC_URL: "",
        LOG_LEVEL: "info",
        SLUICE_DATA_DIR: join(dir, "data"),
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_ADMIN_TOKEN: adminToken,
        SLUICE_PROVIDER_C_BASE_URL: `${fake.url}/c/v1beta`,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const started = child;
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${output}`)), 20_000);
      started.stdout?.on("data", (chunk: Buffer) => {
        output += String(chunk);
        const port = /"port":(\d+),[^\n]*sluice listening on/.exec(output)?.[1];
        if (port) {
          clearTimeout(timer);
          resolve(`http://${host.includes(":") ? `[${host}]` : host}:${port}`);
        }
      });
      started.stderr?.on("data", (chunk: Buffer) => {
        output += String(chunk);
      });
      started.once("exit", (code) => reject(new Error(`the gateway exited with ${code}:\n${output}`)));
    });
  }, 30_000);

  afterAll(async () => {
    child?.kill("SIGKILL");
    await fake?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const admin = async (path: string, body: unknown) => {
    const response = await fetch(`${url}/admin/v1${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    expect(response.status, await response.clone().text()).toBe(201);
    return response.json();
  };

  it.skipIf(!available)("hands out a URL of the listening address that serves the image", async () => {
    const { project, testKey } = (await admin("/projects", {
      name: "vault url",
      provider: "provider-c",
      testMode: true,
      teamId: "team1",
      saveImagesToVault: true,
    })) as { project: { id: string }; testKey: string };
    const { partialKey } = (await admin(`/projects/${project.id}/keys`, {
      provider: "provider-c",
      apiKey: "real-provider-c-key",
    })) as { partialKey: string };
    const response = await fetch(`${url}/v1/image/${project.id}`, {
      method: "POST",
      headers: { authorization: `Bearer ${partialKey}.${testKey}`, "content-type": "application/json" },
      body: JSON.stringify({ prompt: "a lighthouse" }),
    });
    expect(response.status).toBe(200);
    const body = (await response.json()) as { images: Array<{ url: string; path: string }> };
    const image = body.images[0]!;
    expect(URL.canParse(image.url), image.url).toBe(true);
    expect(new URL(image.url).origin).toBe(url);
    expect(new URL(image.url).pathname).toBe(`/v1/vault/${image.path}`);
    const fetched = await fetch(image.url);
    expect(fetched.status).toBe(200);
    expect(Buffer.from(await fetched.arrayBuffer()).equals(tinyPng)).toBe(true);
  });
});

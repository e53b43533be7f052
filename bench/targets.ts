import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { request } from "undici";
import { type FakeApple, generateAppleKeyPair, startFakeApple } from "../test/fakes/fake-apple.js";
import type { LoadCase } from "./load.js";
import { type StartOptions, startProcess, type Target } from "./processes.js";

/** What the benchmarks start and call: Sluice's production build, its projects and load cases. */
export const root = join(import.meta.dirname, "..");

export interface Apple {
  fake: FakeApple;
  teamId: string;
  keyId: string;
  privateKeyPem: string;
  deviceToken: string;
}

/**
 * The decoded size of the bench's device token: 2,400 characters of base64, as long as the tokens
 * DCDevice hands an app (a few KiB; the bench used 128 characters before 2026-11-29, which hid the
 * work Sluice does per character of the token).
 */
const deviceTokenBytes = 1800;

/** A fake Apple DeviceCheck host in this process, knowing one key and one valid device token. */
export async function startApple(): Promise<Apple> {
  const fake = await startFakeApple({ label: "production" });
  const { privateKeyPem, publicKeyPem } = generateAppleKeyPair();
  const teamId = "BENCHTEAM1";
  const keyId = "BENCHKEY01";
  fake.registerKey(keyId, { teamId, publicKeyPem });
  const deviceToken = randomBytes(deviceTokenBytes).toString("base64");
  fake.registerValidToken(deviceToken);
  return { fake, teamId, keyId, privateKeyPem, deviceToken };
}

export function sluiceEnv(
  upstreamUrl: string,
  appleUrl: string,
  dataDir: string,
  adminToken: string,
): Record<string, string> {
  return {
    PORT: "0",
    HOST: "127.0.0.1",
    LOG_LEVEL: "info",
    SLUICE_DATA_DIR: dataDir,
    SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
    SLUICE_ADMIN_TOKEN: adminToken,
    SLUICE_PROVIDER_A_BASE_URL: `${upstreamUrl}/a/v1`,
    SLUICE_RATE_LIMIT_PROJECT_PER_MINUTE: "100000000",
    SLUICE_RATE_LIMIT_IP_PER_MINUTE: "100000000",
    SLUICE_RATE_LIMIT_DEVICE_PER_MINUTE: "100000000",
    SLUICE_DEVICECHECK_PRODUCTION_URL: appleUrl,
    SLUICE_DEVICE_TOKEN_BUDGET: "100000000",
    DATABASE_URL: "",
    REDIS_URL: "",
  };
}

export async function startSluice(
  upstreamUrl: string,
  appleUrl: string,
  dataDir: string,
  options: StartOptions & { nodeFlags?: string[]; env?: Record<string, string> } = {},
): Promise<{ target: Target; adminToken: string }> {
  const adminToken = randomBytes(24).toString("hex");
  const target = await startProcess(
    "sluice",
    [...(options.nodeFlags ?? []), join(root, "dist/src/main.js")],
    { ...sluiceEnv(upstreamUrl, appleUrl, dataDir, adminToken), ...options.env },
    options,
  );
  return { target, adminToken };
}

/** A project with a provider key, as an operator creates it: test mode, or DeviceCheck when `device` is given. */
export async function createProject(
  url: string,
  adminToken: string,
  device?: Apple,
): Promise<{ id: string; bearer: string }> {
  const admin = async (path: string, body: unknown) => {
    const response = await request(`${url}/admin/v1${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return (await response.body.json()) as Record<string, unknown>;
  };
  const settings = device
    ? {
        name: "bench devicecheck",
        testMode: false,
        deviceCheck: {
          enabled: true,
          teamId: device.teamId,
          keyId: device.keyId,
          privateKey: device.privateKeyPem,
          environment: "production",
        },
      }
    : { name: "bench", testMode: true };
  const created = (await admin("/projects", { ...settings, provider: "provider-a" })) as {
    project?: { id: string };
    testKey: string;
  };
  if (!created.project) throw new Error(`creating the bench project failed: ${JSON.stringify(created)}`);
  const key = (await admin(`/projects/${created.project.id}/keys`, {
    provider: "provider-a",
    apiKey: `sk-bench-${randomBytes(16).toString("hex")}`,
  })) as { partialKey: string };
  return {
    id: created.project.id,
    bearer: `${key.partialKey}.${device ? device.deviceToken : created.testKey}`,
  };
}

export function loadCases(project: { id: string; bearer: string }): { json: LoadCase; sse: LoadCase } {
  const headers = { authorization: `Bearer ${project.bearer}` };
  const path = `/v1/provider-a/${project.id}/chat/completions`;
  const messages = [{ role: "user", content: "Say hello in five words." }];
  return {
    json: { name: "json", path, headers, body: JSON.stringify({ model: "gpt-4o-mini", messages }) },
    // Asks for usage itself, so Sluice forwards this body unchanged, like the floor.
    sse: {
      name: "sse",
      path,
      headers,
      body: JSON.stringify({
        model: "gpt-4o-mini",
        messages,
        stream: true,
        stream_options: { include_usage: true },
      }),
    },
  };
}

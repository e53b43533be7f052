import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateAppleKeyPair } from "../fakes/fake-apple.js";
import {
  adminToken,
  appleKeyId,
  appleTeamId,
  logLinesOf,
  startTestGateway,
  type TestGateway,
} from "../support/test-gateway.js";

/**
 * Every admin write the API answers with success leaves one `admin change` line at the default
 * level (`info`): what was done, to which project and key, from which address, under which request
 * id; an update names the fields it changed, never their values. Refused writes and reads leave none.
 */
describe("admin audit log", () => {
  let sluice: TestGateway;
  const clientIp = "203.0.113.7";
  const apple = generateAppleKeyPair();
  const providerKey = `sk-proj-${randomBytes(24).toString("hex")}`;

  beforeAll(async () => {
    // The default level: the audit trail needs no LOG_LEVEL=debug. A proxy on 127.0.0.1 is trusted,
    // so the address logged is the one it forwards, as the gateway resolves it.
    sluice = await startTestGateway({ logLevel: "info", trustProxy: ["127.0.0.1"] });
  });
  afterAll(async () => {
    await sluice?.close();
  });

  async function admin(method: string, path: string, body?: unknown, token = adminToken) {
    const response = await fetch(`${sluice.url}/admin/v1${path}`, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        "x-forwarded-for": `198.51.100.1, ${clientIp}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
    const text = await response.text();
    return {
      status: response.status,
      requestId: response.headers.get("x-request-id"),
      json: text ? (JSON.parse(text) as Record<string, unknown>) : {},
      text,
    };
  }

  /** The `admin change` lines logged since line `from`. */
  const changes = (from: number) => logLinesOf(sluice, from).filter((line) => line.msg === "admin change");

  it("logs a provider key added with its key id and provider, and no secret", async () => {
    const created = await admin("POST", "/projects", {
      id: "audit-key",
      name: "Audit",
      provider: "provider-a",
    });
    expect(created.status).toBe(201);
    const before = sluice.logs.length;
    const added = await admin("POST", "/projects/audit-key/keys", {
      provider: "provider-a",
      apiKey: providerKey,
      label: "label-text-not-logged",
    });
    expect(added.status).toBe(201);
    const partialKey = added.json.partialKey as string;
    expect(changes(before)).toEqual([
      expect.objectContaining({
        level: "info",
        action: "keys add",
        projectId: "audit-key",
        keyId: added.json.keyId,
        provider: "provider-a",
        clientIp,
        requestId: added.requestId,
      }),
    ]);
    const logged = sluice.logs.slice(before).join("");
    for (const secret of [providerKey, partialKey, partialKey.split("_").slice(3).join("_"), adminToken])
      expect(logged).not.toContain(secret);
    expect(logged).not.toContain("label-text-not-logged");
  });

  it("logs every other write: create, update, rotate, revoke, delete", async () => {
    const before = sluice.logs.length;
    const created = await admin("POST", "/projects", {
      name: "Audit 2",
      provider: "provider-a",
      deviceCheck: {
        enabled: true,
        teamId: appleTeamId,
        keyId: appleKeyId,
        privateKey: apple.privateKeyPem,
      },
    });
    expect(created.status).toBe(201);
    const id = (created.json.project as { id: string }).id;
    const updated = await admin("PATCH", `/projects/${id}`, {
      name: "Audit 2b",
      outputSchema: { type: "object", properties: { secretish: { type: "string" } } },
      rateLimits: { perMinute: 77 },
      monthlySpendCapUsd: 12.5,
      deviceCheck: { privateKey: generateAppleKeyPair().privateKeyPem, environment: "development" },
    });
    expect(updated.status).toBe(200);
    const rotated = await admin("POST", `/projects/${id}/test-keys`);
    expect(rotated.status).toBe(201);
    const revokedTestKey = await admin("DELETE", `/projects/${id}/test-keys/${rotated.json.testKeyId}`);
    expect(revokedTestKey.status).toBe(204);
    const added = await admin("POST", `/projects/${id}/keys`, {
      provider: "provider-b",
      apiKey: providerKey,
    });
    const revokedKey = await admin("DELETE", `/projects/${id}/keys/${added.json.keyId}`);
    expect(revokedKey.status).toBe(204);
    const deleted = await admin("DELETE", `/projects/${id}`);
    expect(deleted.status).toBe(204);

    const lines = changes(before);
    const common = (answer: { requestId: string | null }) => ({ clientIp, requestId: answer.requestId });
    expect(lines).toEqual([
      expect.objectContaining({
        action: "projects create",
        projectId: id,
        testKeyId: created.json.testKeyId,
        ...common(created),
      }),
      expect.objectContaining({
        action: "projects update",
        projectId: id,
        fields: [
          "deviceCheck.environment",
          "deviceCheck.privateKey",
          "monthlySpendCapUsd",
          "name",
          "outputSchema",
          "rateLimits.perMinute",
        ],
        ...common(updated),
      }),
      expect.objectContaining({
        action: "test-keys rotate",
        projectId: id,
        testKeyId: rotated.json.testKeyId,
        ...common(rotated),
      }),
      expect.objectContaining({
        action: "test-keys revoke",
        projectId: id,
        testKeyId: rotated.json.testKeyId,
        ...common(revokedTestKey),
      }),
      expect.objectContaining({
        action: "keys add",
        projectId: id,
        keyId: added.json.keyId,
        ...common(added),
      }),
      expect.objectContaining({
        action: "keys revoke",
        projectId: id,
        keyId: added.json.keyId,
        ...common(revokedKey),
      }),
      expect.objectContaining({ action: "projects delete", projectId: id, ...common(deleted) }),
    ]);
    for (const line of lines) expect(line.level).toBe("info");
    const logged = sluice.logs.slice(before).join("");
    for (const secret of [
      providerKey,
      created.json.testKey as string,
      rotated.json.testKey as string,
      added.json.partialKey as string,
      "PRIVATE KEY",
      "Audit 2b",
      "secretish",
      "12.5",
      adminToken,
    ])
      expect(logged).not.toContain(secret);
  });

  it("names in an update's fields only those whose value changed, not those set to the value stored", async () => {
    const created = await admin("POST", "/projects", {
      id: "audit-same",
      name: "Same",
      provider: "provider-a",
      outputSchema: { type: "object", properties: { a: { type: "string" }, b: { type: "string" } } },
      rateLimits: { perMinute: 77 },
      deviceCheck: { enabled: true, teamId: appleTeamId, keyId: appleKeyId, privateKey: apple.privateKeyPem },
    });
    expect(created.status).toBe(201);
    const before = sluice.logs.length;
    // The name, the limit, the Apple ids and key and the schema (its members in the same order) as
    // stored: only the cap and the device limit, which differ, are changes. The key is the one
    // stored, in the text a Windows editor saves it as (CRLF line endings).
    const mixed = await admin("PATCH", "/projects/audit-same", {
      name: "Same",
      outputSchema: { type: "object", properties: { a: { type: "string" }, b: { type: "string" } } },
      rateLimits: { perMinute: 77, devicePerMinute: 5 },
      monthlySpendCapUsd: 3,
      deviceCheck: {
        teamId: appleTeamId,
        keyId: appleKeyId,
        privateKey: apple.privateKeyPem.replaceAll("\n", "\r\n"),
      },
    });
    expect(mixed.status).toBe(200);
    // Every field as stored: written (updatedAt moves), and logged, but no field named as changed.
    const same = await admin("PATCH", "/projects/audit-same", { name: "Same", monthlySpendCapUsd: 3 });
    expect(same.status).toBe(200);
    // Another key, and the schema's members in another order (the order a model answers in): changes.
    const other = await admin("PATCH", "/projects/audit-same", {
      outputSchema: { type: "object", properties: { b: { type: "string" }, a: { type: "string" } } },
      deviceCheck: { privateKey: generateAppleKeyPair().privateKeyPem, enabled: true },
    });
    expect(other.status).toBe(200);
    expect(changes(before)).toEqual([
      expect.objectContaining({
        action: "projects update",
        projectId: "audit-same",
        fields: ["monthlySpendCapUsd", "rateLimits.devicePerMinute"],
        requestId: mixed.requestId,
      }),
      expect.objectContaining({ action: "projects update", fields: [], requestId: same.requestId }),
      expect.objectContaining({
        action: "projects update",
        fields: ["deviceCheck.privateKey", "outputSchema"],
        requestId: other.requestId,
      }),
    ]);
    // No line of the key's text is in the log.
    const logged = sluice.logs.slice(before).join("");
    for (const line of apple.privateKeyPem.split("\n").filter((line) => line.length >= 16))
      expect(logged).not.toContain(line);
  });

  it("logs no refused or failed write, no write that changed nothing, and no read", async () => {
    const created = await admin("POST", "/projects", {
      id: "audit-quiet",
      name: "Q",
      provider: "provider-a",
    });
    expect(created.status).toBe(201);
    const before = sluice.logs.length;
    const refused: Array<[number, string, string, unknown?, string?]> = [
      [400, "POST", "/projects/audit-quiet/keys", { provider: "provider-q", apiKey: providerKey }],
      [400, "POST", "/projects/audit-quiet/keys", { provider: "provider-a", apiKey: providerKey, bogus: 1 }],
      [404, "POST", "/projects/nope/keys", { provider: "provider-a", apiKey: providerKey }],
      [401, "POST", "/projects/audit-quiet/keys", { provider: "provider-a", apiKey: providerKey }, "wrong"],
      [422, "PATCH", "/projects/audit-quiet", { deviceCheck: { privateKey: "not a key" } }],
      [409, "POST", "/projects", { id: "audit-quiet", name: "Q", provider: "provider-a" }],
      [404, "DELETE", "/projects/audit-quiet/keys/0123456789abcdef0123"],
      [404, "DELETE", "/projects/audit-quiet/test-keys/tk0123456789abcdef"],
      [400, "DELETE", "/projects/audit-quiet", { force: true }],
      [404, "DELETE", "/projects/nope"],
      [404, "POST", "/projects/nope/test-keys"],
    ];
    for (const [status, method, path, body, token] of refused)
      expect((await admin(method, path, body, token)).status, `${method} ${path}`).toBe(status);
    // `{}` writes nothing (its updatedAt stays): no change to log.
    expect((await admin("PATCH", "/projects/audit-quiet", {})).status).toBe(200);
    for (const path of ["/projects", "/projects/audit-quiet", "/projects/audit-quiet/keys"])
      expect((await admin("GET", path)).status).toBe(200);
    expect(changes(before)).toEqual([]);
    expect(sluice.logs.slice(before).join("")).not.toContain(providerKey);
  });
});

import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { redisAvailable, redisTestSpace, redisUrl } from "../support/services.js";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * The admin token or a master key typed where a project id goes (a path's project segment, the
 * `x-project-id` header) names no project: its refusal row is written, and its failures counted by
 * the failed-authentication throttle under a key of the id. A provider key there is recorded by its
 * start and length (key-as-project-id.security.test.ts); a configured secret has no form to tell it
 * by, and was recorded whole: in the database's usage row and, with REDIS_URL, in a Redis key. Now
 * the row says `[redacted]`, and so does the key; the log and /metrics held neither, and hold none.
 */
describe.skipIf(!redisAvailable)("a configured secret typed where the project id goes", () => {
  const space = redisTestSpace("secret-id");
  const prefix = `${space.nextPrefix()}:`;
  // Of a project id's form (28 characters): nothing else marks it as a secret.
  const adminToken = `tok-${randomBytes(12).toString("hex")}`;
  /**
   * A master key whose base64 holds a `/` at 20, and no other: a path cuts the id there, leaving its
   * start. (A second one could make an empty path segment, `//`, which is refused 400 before
   * authentication, with no row: one run in ~40 did so before the rest was cleared of them too.)
   */
  const masterKey = (() => {
    const text = randomBytes(32).toString("base64").replace(/[/+]/g, "A");
    return Buffer.from(`${text.slice(0, 20)}/${text.slice(21)}`, "base64").toString("base64");
  })();
  let sluice: TestGateway;

  beforeAll(async () => {
    sluice = await startTestGateway({
      logLevel: "trace",
      adminToken,
      masterKey,
      metricsEnabled: true,
      redisUrl,
      redisKeyPrefix: prefix,
    });
  });
  afterAll(async () => {
    await sluice?.close();
    await space.cleanup();
  });

  /** Every run of 12 characters of `secret`: no part of it may be stored or shown. */
  function piecesOf(secret: string): string[] {
    const pieces: string[] = [];
    for (let at = 0; at + 12 <= secret.length; at++) pieces.push(secret.slice(at, at + 12));
    return pieces;
  }

  const credential = {
    authorization: "Bearer sk_sluice_0123456789ab_AAAA.tk_x",
    "content-type": "application/json",
  };

  /** Requests naming `secret` as the project: each with whether it writes a row. */
  function requests(secret: string): Array<[string, RequestInit, { row: boolean }]> {
    const encoded = encodeURIComponent(secret);
    const post = { method: "POST", headers: credential, body: "{}" };
    return [
      [`/v1/provider-a/${secret}/chat/completions`, post, { row: true }],
      [`/v1/provider-a/${encoded}/chat/completions`, post, { row: true }],
      [
        "/v1/text",
        {
          method: "POST",
          headers: { ...credential, "x-project-id": secret },
          body: JSON.stringify({ text: "hi" }),
        },
        { row: true },
      ],
      [`/v1/provider-c/${encoded}/models`, {}, { row: false }],
    ];
  }

  it("records `[redacted]` as the project id of their rows, and keeps them out of Redis, the log and /metrics", async () => {
    const requestIds: string[] = [];
    for (const secret of [adminToken, masterKey])
      for (const [path, init, { row }] of requests(secret)) {
        const response = await fetch(`${sluice.url}${path}`, init);
        await response.arrayBuffer();
        expect(response.status, path).toBeGreaterThanOrEqual(400);
        if (row) requestIds.push(response.headers.get("x-request-id") ?? "");
      }
    await sluice.gateway.flushUsage();
    const rows = await sluice.gateway.database.db.selectFrom("usage_records").selectAll().execute();
    const recorded = rows.filter((row) => requestIds.includes(row.request_id));
    expect(recorded).toHaveLength(requestIds.length);
    for (const row of recorded) expect(row.project_id, row.request_id).toBe("[redacted]");

    const redis = await space.readyClient();
    const keys = await redis.keys(`${prefix}*`);
    // The failures were counted there, the ids' own among them: one key for every id holding a secret.
    expect(keys).toContain(`${prefix}sluice:auth:project:[redacted]`);

    const metrics = await (await fetch(`${sluice.url}/metrics`)).text();
    expect(metrics).toContain("sluice_http_requests_total");

    const stored = {
      rows: JSON.stringify(rows),
      redis: keys.join("\n"),
      logs: sluice.logs.join(""),
      metrics,
    };
    for (const [where, text] of Object.entries(stored))
      for (const [name, secret] of Object.entries({ adminToken, masterKey }))
        for (const piece of piecesOf(secret))
          expect(text.includes(piece), `${piece} of the ${name} in ${where}`).toBe(false);
  });
});

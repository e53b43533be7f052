import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * The secrets Sluice is configured with (SLUICE_ADMIN_TOKEN, SLUICE_MASTER_KEY and, during a
 * rotation, SLUICE_MASTER_KEY_PREVIOUS) have no form the log's redaction knows: an admin token of
 * 64 characters or fewer pasted into a path was shown whole by the access line. None may be in any
 * log line, at any level, whatever its length, as typed or percent-encoded, in a path or a query.
 */
describe("configured secrets in the log", () => {
  const gateways: TestGateway[] = [];
  afterAll(async () => {
    for (const gateway of gateways) await gateway.close();
  });

  async function start(secrets: {
    adminToken: string;
    masterKey?: string | undefined;
    masterKeyPrevious?: string;
    dataDir?: string;
  }) {
    const sluice = await startTestGateway({ logLevel: "trace", ...secrets });
    gateways.push(sluice);
    return sluice;
  }

  /** The substrings of `secret` of `length` characters (a piece long enough to tell it by). */
  function piecesOf(secret: string, length = 12): string[] {
    const pieces: string[] = [];
    for (let at = 0; at + length <= secret.length; at++) pieces.push(secret.slice(at, at + length));
    return pieces;
  }

  function expectAbsent(logs: string[], secrets: string[]) {
    const text = logs.join("");
    for (const secret of secrets) {
      for (const form of [secret, encodeURIComponent(secret)])
        for (const piece of piecesOf(form))
          expect(text, `${piece} of ${secret} in the log`).not.toContain(piece);
    }
  }

  async function send(sluice: TestGateway, path: string, init: RequestInit = {}) {
    const response = await fetch(`${sluice.url}${path}`, init);
    await response.arrayBuffer();
    return response.status;
  }

  /** Waits for the access lines of the requests sent: one per request, written as each closes. */
  async function settled(sluice: TestGateway, from: number, requests: number) {
    for (let wait = 0; wait < 100; wait++) {
      const lines = sluice.logs.slice(from).filter((line) => line.includes('"msg":"request"'));
      if (lines.length >= requests) return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error("the access lines were not written");
  }

  const post = {
    method: "POST",
    headers: { authorization: "Bearer sk_sluice_0123456789ab_AAAA.tk_x", "content-type": "application/json" },
    body: "{}",
  };

  function pathsHolding(secret: string): Array<[string, RequestInit?]> {
    const encoded = encodeURIComponent(secret);
    // Every character percent-encoded, the hex digits in lower case: a client may write any of them so.
    const allEncoded = [...Buffer.from(secret)]
      .map((byte) => `%${byte.toString(16).padStart(2, "0")}`)
      .join("");
    return [
      [`/admin/v1/${secret}`],
      [`/admin/v1/${encoded}`],
      [`/admin/v1/${allEncoded}`],
      [`/admin/v1/projects/${encoded}`],
      [`/v1/provider-a/${encoded}/chat/completions`, post],
      [`/v1/provider-a/${secret}/chat/completions`, post],
      [`/v1/text/${encoded}`, post],
      [`/v1/models?after=${encoded}&q=${secret}`],
      // The secret across the cut the access line makes in a long path (after 1,024 characters):
      // a cut before the redaction would leave its first 22 characters.
      [`/${"a".repeat(1000)}/${encoded}/${"z".repeat(2000)}`],
    ];
  }

  it("leaves no admin token of any length, nor a master key, in any line of the log", async () => {
    for (const adminToken of [
      `tok-${randomBytes(12).toString("hex")}`,
      // With the characters of base64 (`openssl rand -base64 32`, the README's advice) and a key's form.
      `sk-${randomBytes(30).toString("base64")}`,
      `${randomBytes(60).toString("base64url")}`,
    ]) {
      const masterKey = randomBytes(32).toString("base64");
      const masterKeyPrevious = randomBytes(32).toString("base64");
      const sluice = await start({ adminToken, masterKey, masterKeyPrevious });
      const from = sluice.logs.length;
      const requests = [
        ...pathsHolding(adminToken),
        ...pathsHolding(masterKey),
        ...pathsHolding(masterKeyPrevious),
      ];
      for (const [path, init] of requests) await send(sluice, path, init);
      await settled(sluice, from, requests.length);
      // The lines were written, and quote the paths (but for the secrets).
      const written = sluice.logs.slice(from).join("");
      expect(written).toContain("/admin/v1/");
      // A token in a project id's place is not shown by its start either (one over 64 characters was).
      expect(written).toContain('"path":"/v1/provider-a/[redacted]/chat/completions"');
      expect(written).not.toMatch(/"path":"\/v1\/provider-a\/[^"/]*… \(\d+ characters\)/);
      expectAbsent(sluice.logs, [adminToken, masterKey, masterKeyPrevious]);
    }
  });

  // The S3 vault's secret access key (40 characters of base64, as AWS issues them) has no form the
  // log's redaction knows either: it signs every presigned URL the vault hands out.
  it("leaves no S3 secret access key of the vault in any line of the log", async () => {
    const secretAccessKey = randomBytes(30).toString("base64");
    const sluice = await startTestGateway({
      logLevel: "trace",
      adminToken: `tok-${randomBytes(12).toString("hex")}`,
      vaultS3Endpoint: "http://127.0.0.1:9",
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "AKIAIOSFODNN7EXAMPLE",
      vaultS3SecretAccessKey: secretAccessKey,
    });
    gateways.push(sluice);
    const from = sluice.logs.length;
    const requests = pathsHolding(secretAccessKey);
    for (const [path, init] of requests) await send(sluice, path, init);
    await settled(sluice, from, requests.length);
    sluice.gateway.logger.warn({ note: `held ${secretAccessKey}` }, `the key ${secretAccessKey}`);
    expect(sluice.logs.slice(from).join("")).toContain('"note":"held [redacted]"');
    expectAbsent(sluice.logs, [secretAccessKey]);
  });

  // Without SLUICE_MASTER_KEY, outside production, the key is the data dir's master.key, generated
  // on a fresh one: the gateway holds it as surely as a configured one, and it was in no redaction.
  it("leaves no master key generated into the data dir, or read from its master.key, in any line", async () => {
    const dataDir = mkdtempSync(join(tmpdir(), "sluice-key-file-"));
    const fileKey = randomBytes(32).toString("base64");
    writeFileSync(join(dataDir, "master.key"), `${fileKey}\n`, { mode: 0o600 });
    try {
      const adminToken = `tok-${randomBytes(12).toString("hex")}`;
      const generating = await start({ adminToken, masterKey: undefined });
      const generated = readFileSync(join(generating.gateway.config.dataDir, "master.key"), "utf8").trim();
      expect(generated).toHaveLength(44);
      const reading = await start({ adminToken, masterKey: undefined, dataDir });
      for (const [sluice, masterKey] of [
        [generating, generated],
        [reading, fileKey],
      ] as const) {
        const from = sluice.logs.length;
        const requests = pathsHolding(masterKey);
        for (const [path, init] of requests) await send(sluice, path, init);
        await settled(sluice, from, requests.length);
        // Any line, not only the access line's path: a message, a field, a name, escaped for JSON.
        sluice.gateway.logger.warn(
          { note: `held ${masterKey}`, [masterKey]: encodeURIComponent(masterKey) },
          `the key ${masterKey} as %s`,
          JSON.stringify({ key: masterKey }),
        );
        const written = sluice.logs.slice(from).join("");
        expect(written).toContain('"path":"/v1/provider-a/[redacted]/chat/completions"');
        expect(written).toContain('"note":"held [redacted]"');
        expectAbsent(sluice.logs, [masterKey]);
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  // A path's `/` ends the project id: a token holding one (base64 does) gave the route an id that was
  // the token's start, shown by its own start and length (one of a key's form, or over 64 characters),
  // and the token's rest after the `/` stood whole in the line, the logger no longer able to tell it.
  it("leaves no part of an admin token holding a / whose start is taken for a project id", async () => {
    for (const adminToken of [
      `sk-${"q0bjAKMPI8Ntf1eAKH3u".repeat(2)}/tail-of-the-token-0123`,
      `${"Zm9vYmFyYmF6".repeat(6)}/tail-of-the-token-4567`,
    ]) {
      const sluice = await start({ adminToken });
      const from = sluice.logs.length;
      const requests: Array<[string, RequestInit?]> = [
        [`/v1/provider-a/${adminToken}/chat/completions`, post],
        [`/v1/provider-a/${adminToken}`, post],
      ];
      for (const [path, init] of requests) await send(sluice, path, init);
      await settled(sluice, from, requests.length);
      const written = sluice.logs.slice(from).join("");
      expect(written).toContain('"path":"/v1/provider-a/[redacted]/chat/completions"');
      expect(written).toContain('"path":"/v1/provider-a/[redacted]"');
      expectAbsent(sluice.logs, [adminToken]);
      expect(written).not.toContain("tail-of-the-token");
    }
  });

  // A `?` ends the path the access line shows: a token holding one left its start (before the `?`)
  // there whole, which the logger could not tell for the token (the usage row records the id as
  // `[redacted]`: `configuredSecretHeld` knows a start cut there).
  it("leaves no part of an admin token holding a ? whose start the path ends with", async () => {
    for (const [adminToken, itsStart] of [
      ["start-of-the-token-0123?tail-of-the-token-4567", "start-of-the-token"],
      // Of a key's form (a project id shown by its start and length).
      [`sk-${"q0bjAKMPI8Ntf1eAKH3u".repeat(2)}?tail-of-the-token-0123`, "sk-q0bj"],
    ] as const) {
      const sluice = await start({ adminToken });
      const from = sluice.logs.length;
      const [before, after] = adminToken.split("?") as [string, string];
      const requests: Array<[string, RequestInit?]> = [
        [`/v1/provider-a/${adminToken}/chat/completions`, post],
        [`/v1/provider-a/${encodeURIComponent(before)}?${after}`, post],
        [`/admin/v1/projects/${adminToken}`],
        [`/v1/models/${adminToken}`],
      ];
      for (const [path, init] of requests) await send(sluice, path, init);
      await settled(sluice, from, requests.length);
      const written = sluice.logs.slice(from).join("");
      expect(written).toContain('"path":"/v1/provider-a/[redacted]"');
      expect(written).toContain('"path":"/admin/v1/projects/[redacted]"');
      expectAbsent(sluice.logs, [adminToken]);
      expect(written).not.toContain(itsStart);
    }
  });
});

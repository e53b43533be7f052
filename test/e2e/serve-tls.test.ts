import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSelfSigned } from "../support/self-signed.js";

/** A GET over HTTPS that trusts only `ca` and checks the certificate names `localhost`. */
function httpsGet(url: string, ca: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const outgoing = request(url, { ca, servername: "localhost" }, (response) => {
      let body = "";
      response.on("data", (chunk: Buffer) => {
        body += String(chunk);
      });
      response.on("end", () => resolve({ status: response.statusCode ?? 0, body }));
    });
    outgoing.on("error", reject);
    outgoing.end();
  });
}

describe("serving HTTPS directly (SLUICE_TLS_CERT, SLUICE_TLS_KEY)", () => {
  const dir = mkdtempSync(join(tmpdir(), "sluice-tls-"));
  const certFile = join(dir, "cert.pem");
  const keyFile = join(dir, "key.pem");
  let child: ChildProcess;
  let url: string;
  let output = "";

  beforeAll(async () => {
    writeSelfSigned(dir);
    child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: join(import.meta.dirname, "../.."),
      env: {
        ...process.env,
        PORT: "0",
        HOST: "127.0.0.1",
        LOG_LEVEL: "info",
        SLUICE_DATA_DIR: join(dir, "data"),
        SLUICE_MASTER_KEY: randomBytes(32).toString("base64"),
        SLUICE_TLS_CERT: certFile,
        SLUICE_TLS_KEY: keyFile,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${output}`)), 20_000);
      child.stdout?.on("data", (chunk: Buffer) => {
        output += String(chunk);
        const match = /listening on (https:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (match?.[1]) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
      child.stderr?.on("data", (chunk: Buffer) => {
        output += String(chunk);
      });
      child.once("exit", (code) => reject(new Error(`the gateway exited with ${code}:\n${output}`)));
    });
  });

  afterAll(() => {
    child?.kill("SIGTERM");
    rmSync(dir, { recursive: true, force: true });
  });

  it("answers over TLS with the configured certificate, and not in plain HTTP", async () => {
    const health = await httpsGet(`${url}/health`, readFileSync(certFile));
    expect(health.status).toBe(200);
    expect(JSON.parse(health.body)).toMatchObject({ status: "ok" });
    const plain = await fetch(`${url.replace("https:", "http:")}/health`).catch((error: unknown) => error);
    expect(plain).toBeInstanceOf(Error);
  });
});

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  createTestProject,
  logLinesOf,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

/** What the fake object store saw: each request's method and key (the path after the bucket). */
interface StoreRequest {
  method: string;
  key: string;
  query: URLSearchParams;
}

/** S3's error codes for these statuses (a bad access key id, a store shedding load). */
const s3Codes: Record<number, string> = { 403: "InvalidAccessKeyId", 500: "InternalError", 503: "SlowDown" };

const secretAccessKey = "s3-secret-wJalrXUtnFEMI-K7MDENG-never-shown";

describe("image generation with an S3 vault that refuses the upload", () => {
  let fake: FakeUpstream;
  let s3: Server;
  let sluice: TestGateway;
  let project: TestProject;
  const seen: StoreRequest[] = [];
  // How the store answers each request (set by each test; 200 unless told). "stored, unanswered":
  // the object is kept, and the answer never comes (lost on the way, or a store that hangs).
  let answer: (request: StoreRequest, index: number) => number | "stored, unanswered" = () => 200;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    s3 = createServer((request: IncomingMessage, response: ServerResponse) => {
      const url = new URL(request.url ?? "/", "http://s3.test");
      const stored: StoreRequest = {
        method: request.method ?? "",
        key: decodeURIComponent(url.pathname.replace(/^\/vault\//, "")),
        query: url.searchParams,
      };
      const index = seen.push(stored) - 1;
      request.resume();
      request.on("end", () => {
        const status = answer(stored, index);
        if (status === "stored, unanswered") return;
        // An S3 error body, as the store sends it.
        response.writeHead(status, { "content-type": "application/xml" });
        response.end(
          status >= 300 ? `<Error><Code>${s3Codes[status] ?? "InternalError"}</Code></Error>` : "",
        );
      });
    });
    await new Promise<void>((resolve) => s3.listen(0, "127.0.0.1", resolve));
    sluice = await startTestGateway({
      providerCBaseUrl: `${fake.url}/c/v1beta`,
      vaultS3Endpoint: `http://127.0.0.1:${(s3.address() as AddressInfo).port}`,
      vaultS3Bucket: "vault",
      vaultS3AccessKeyId: "AKIDTEST",
      vaultS3SecretAccessKey: secretAccessKey,
      // Short, for the upload whose answer never comes; the others are answered at once.
      vaultTimeoutMs: 1000,
    });
    project = await createTestProject(sluice.gateway, {
      provider: "provider-c",
      teamId: "team1",
      saveImagesToVault: true,
    });
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
    s3.closeAllConnections();
    await new Promise((resolve) => s3.close(resolve));
  });

  beforeEach(() => {
    fake.clear();
    seen.length = 0;
    answer = () => 200;
  });

  const generate = (body: unknown) =>
    fetch(`${sluice.url}/v1/image/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-c")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
    });

  it.each([500, 503, 403])(
    "answers 503 with Retry-After when the store answers %i, records the billed cost, and shows no secret",
    async (status) => {
      answer = (request) => (request.method === "PUT" ? status : 204);
      const response = await generate({ prompt: "a cat" });
      const text = await response.clone().text();
      expect(response.status).toBe(503);
      expect(response.headers.get("retry-after")).toBe("5");
      expect(JSON.parse(text)).toEqual({
        error: {
          code: "SERVICE_UNAVAILABLE",
          details: { retryable: true },
          message: "The image vault could not store the generated images",
          requestId: response.headers.get("x-request-id"),
        },
      });
      expect(fake.requests).toHaveLength(1);
      expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
        status: 503,
        error_code: "SERVICE_UNAVAILABLE",
        model: "imagen-4.0-generate-001",
        cost_usd: 0.04,
      });
      // The operator learns what the store said: its status and its own error code.
      const logged = logLinesOf(sluice);
      expect(
        logged.find(
          (line) =>
            line.msg === "vault call failed" && line.requestId === response.headers.get("x-request-id"),
        ),
      ).toMatchObject({
        level: "warn",
        dependency: "vault",
        code: s3Codes[status],
        cause: `the vault's object store answered ${status} (${s3Codes[status]})`,
      });
      // Neither the secret key nor a presigned URL's signature reaches the client or the log.
      const signatures = seen.map((request) => request.query.get("X-Amz-Signature") as string);
      expect(signatures.length).toBeGreaterThan(0);
      for (const secret of [secretAccessKey, ...signatures]) {
        expect(text).not.toContain(secret);
        expect(sluice.logs.join("\n")).not.toContain(secret);
      }
    },
  );

  it("deletes the images it stored when another image of the request could not be stored", async () => {
    // The second upload to arrive fails; the others are stored, and would be left behind.
    const stored: string[] = [];
    let puts = 0;
    answer = (request) => {
      if (request.method !== "PUT") return 204;
      if (++puts === 2) return 500;
      stored.push(request.key);
      return 200;
    };
    const response = await generate({ prompt: "a cat", n: 3 });
    expect(response.status).toBe(503);
    expect(await usageRowOf(sluice.gateway, response)).toMatchObject({ status: 503, cost_usd: 0.12 });
    expect(stored).toHaveLength(2);
    // The client never learns these objects' URLs: each is deleted (waited for, not assumed).
    const deletes = () => seen.filter((request) => request.method === "DELETE").map((request) => request.key);
    for (const deadline = Date.now() + 5000; deletes().length < 2 && Date.now() < deadline; )
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(deletes().sort()).toEqual(stored.sort());
  });

  it("deletes an image whose upload the deadline cut, which the store may have kept", async () => {
    // The store keeps the object but its answer never comes: the 503 names no URL for it.
    const stored: string[] = [];
    answer = (request) => {
      if (request.method !== "PUT") return 204;
      stored.push(request.key);
      return "stored, unanswered";
    };
    const response = await generate({ prompt: "a cat" });
    expect(response.status).toBe(503);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      "The image vault did not store the generated images within 1000 ms",
    );
    expect(stored).toHaveLength(1);
    const deletes = () => seen.filter((request) => request.method === "DELETE").map((request) => request.key);
    for (const deadline = Date.now() + 5000; deletes().length < 1 && Date.now() < deadline; )
      await new Promise((resolve) => setTimeout(resolve, 10));
    expect(deletes()).toEqual(stored);
  });
});

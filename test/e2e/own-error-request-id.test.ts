import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createGatewayServer } from "../../src/server.js";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { rawExchange } from "../support/raw-exchange.js";
import {
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * Every error answer of Sluice's own carries its id as `x-request-id`, the envelope's `requestId`;
 * on provider B's paths also as `request-id`, the one header the Anthropic SDK reads an id from
 * (docs/api.md, docs/proxy.md "Headers"), refusals before admission included. Each case below is
 * one way such an answer is written: by a route, by the router, before routing (a malformed target),
 * and straight to the connection for a request whose head Node read but whose body it could not
 * (bad chunk framing, a body that stalls). The last two went without `request-id`.
 */
describe("the request id on each of Sluice's own error answers", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let server: Server;
  let port = 0;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway({ ...providerBaseUrls(fake), maxBodyBytes: 1024 });
    project = await createTestProject(sluice.gateway);
    // As serve() builds it; the request timeout is short so a stalled body is answered in time.
    server = createGatewayServer(sluice.gateway.app, {
      http: { requestTimeout: 1000, headersTimeout: 1000, connectionsCheckingInterval: 50 },
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await sluice.close();
    await fake.close();
  });

  const messages = () => `/v1/provider-b/${project.projectId}/v1/messages`;
  const request = (lines: string[], body = "", version = "HTTP/1.1") =>
    Buffer.from(
      `${lines[0]} ${version}\r\nhost: x\r\n${lines
        .slice(1)
        .map((line) => `${line}\r\n`)
        .join("")}\r\n${body}`,
    );
  const authorized = () => [`x-api-key: ${project.bearer("provider-b")}`, "content-type: application/json"];

  /** What each answer carried: its status, code, and which of the two headers hold the envelope's id. */
  async function idsOf(bytes: Buffer) {
    const reply = await rawExchange(port, bytes, { timeoutMs: 5000 });
    const body = JSON.parse(reply.body.toString("utf8")) as { error: { code: string; requestId: string } };
    const id = body.error.requestId;
    expect(id).toMatch(/^req_[0-9a-f]{32}$/);
    return {
      status: reply.status,
      code: body.error.code,
      "x-request-id": reply.headers["x-request-id"] === id,
      "request-id": reply.headers["request-id"] === id,
    };
  }

  it("carries it as x-request-id and request-id on provider B's paths, however the answer is written", async () => {
    const cases: Record<string, Buffer> = {
      "401 by admission": request([`POST ${messages()}`, "content-length: 2"], "{}"),
      "404 unknown project": request(
        ["POST /v1/provider-b/no-such-project/v1/messages", ...authorized(), "content-length: 2"],
        "{}",
      ),
      "405 by the router": request([`GET ${messages()}`]),
      "400 a path the router cannot decode": request([`POST /v1/provider-b/${project.projectId}/v1/%zz`]),
      "400 a malformed target (Transfer-Encoding on HTTP/1.0)": request(
        [`POST ${messages()}`, "transfer-encoding: chunked"],
        "0\r\n\r\n",
        "HTTP/1.0",
      ),
      "413 by its content-length": request([`POST ${messages()}`, ...authorized(), "content-length: 5000"]),
      "400 bad chunk framing after the head": request(
        [`POST ${messages()}`, ...authorized(), "transfer-encoding: chunked"],
        "zz\r\n{}\r\n",
      ),
      "408 a body that stalls": request([`POST ${messages()}`, ...authorized(), "content-length: 100"], "{"),
    };
    const seen: Record<string, unknown> = {};
    for (const [name, bytes] of Object.entries(cases)) {
      const { status, code, ...headers } = await idsOf(bytes);
      seen[name] = { status, code, ...headers };
    }
    const expected = (status: number, code: string) => ({
      status,
      code,
      "x-request-id": true,
      "request-id": true,
    });
    expect(seen).toEqual({
      "401 by admission": expected(401, "UNAUTHORIZED"),
      "404 unknown project": expected(404, "PROJECT_NOT_FOUND"),
      "405 by the router": expected(405, "METHOD_NOT_ALLOWED"),
      "400 a path the router cannot decode": expected(400, "BAD_REQUEST"),
      "400 a malformed target (Transfer-Encoding on HTTP/1.0)": expected(400, "BAD_REQUEST"),
      "413 by its content-length": expected(413, "PAYLOAD_TOO_LARGE"),
      "400 bad chunk framing after the head": expected(400, "BAD_REQUEST"),
      "408 a body that stalls": expected(408, "REQUEST_TIMEOUT"),
    });
    expect(fake.requests).toHaveLength(0);
  });

  it("carries x-request-id alone on other paths, and where Node hands over no path", async () => {
    const cases: Record<string, Buffer> = {
      "404 no route": request(["GET /no/such/route"]),
      "400 bad chunk framing after the head": request(
        ["POST /v1/text", "transfer-encoding: chunked", "content-type: application/json"],
        "zz\r\n{}\r\n",
      ),
      "431 a head over the limit": request([`GET ${messages()}`, `x-long: ${"a".repeat(20_000)}`]),
      "404 CONNECT": Buffer.from("CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n"),
    };
    const seen: Record<string, unknown> = {};
    for (const [name, bytes] of Object.entries(cases)) seen[name] = await idsOf(bytes);
    expect(seen).toEqual({
      "404 no route": { status: 404, code: "NOT_FOUND", "x-request-id": true, "request-id": false },
      "400 bad chunk framing after the head": {
        status: 400,
        code: "BAD_REQUEST",
        "x-request-id": true,
        "request-id": false,
      },
      "431 a head over the limit": {
        status: 431,
        code: "REQUEST_HEADER_FIELDS_TOO_LARGE",
        "x-request-id": true,
        "request-id": false,
      },
      "404 CONNECT": { status: 404, code: "NOT_FOUND", "x-request-id": true, "request-id": false },
    });
  });
});

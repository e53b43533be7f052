import { brotliCompressSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
} from "../support/test-gateway.js";

/**
 * The JSON bodies Sluice reads itself must be UTF-8 (RFC 8259 §8.1): invalid bytes are 400, not
 * U+FFFD, and a charset other than UTF-8 is 415, as is a content coding. The proxies forward the
 * bytes as sent.
 */
describe("the encoding of JSON bodies Sluice reads itself", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    sluice = await startTestGateway(providerBaseUrls(fake));
    project = await createTestProject(sluice.gateway);
  });
  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });
  beforeEach(() => fake.clear());

  /** `{"<field>":"bad\xFF\xC0\xAE", …rest}`: a lone 0xFF and an overlong '.', in a string. */
  const invalid = (field: string, rest = "") =>
    Buffer.concat([
      Buffer.from(`{${rest}"${field}":"bad`),
      Buffer.from([0xff, 0xc0, 0xae]),
      Buffer.from('"}'),
    ]);

  const routes = [
    ["/admin/v1/projects", '"provider":"provider-a",', "name"],
    ["/v1/text", "", "text"],
    ["/v1/vision", "", "image"],
    ["/v1/pdf", "", "pdf"],
    ["/v1/image", "", "prompt"],
  ] as const;

  const post = (
    path: string,
    body: Buffer | string,
    contentType = "application/json",
    contentEncoding?: string,
  ) =>
    fetch(`${sluice.url}${path}${path.startsWith("/admin") ? "" : `/${project.projectId}`}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${path.startsWith("/admin") ? adminToken : project.bearer("provider-a")}`,
        "content-type": contentType,
        ...(contentEncoding === undefined ? {} : { "content-encoding": contentEncoding }),
      },
      body,
    });

  async function expectError(response: Response, status: number, code: string) {
    const body = (await response.json()) as { error: { code: string; message: string; requestId: string } };
    expect({ status: response.status, code: body.error.code }).toEqual({ status, code });
    expect(body.error.requestId).toBe(response.headers.get("x-request-id"));
    return body.error.message;
  }

  it.each(routes)(
    "refuses invalid UTF-8 on %s with 400 instead of reading it as U+FFFD",
    async (path, rest, field) => {
      const message = await expectError(await post(path, invalid(field, rest)), 400, "BAD_REQUEST");
      expect(message).toBe("The body is not valid UTF-8");
      expect(fake.requests).toEqual([]);
    },
  );

  it("stores no project from a body with invalid UTF-8", async () => {
    await post("/admin/v1/projects", invalid("name", '"id":"bad-bytes","provider":"provider-a",'));
    const projects = (await sluice.gateway.admin.listProjects()).data;
    expect(projects.map((stored) => stored.id)).not.toContain("bad-bytes");
  });

  it.each(routes)(
    "refuses a charset other than UTF-8 on %s with 415 naming it",
    async (path, rest, field) => {
      const body = `{${rest}"${field}":"caf\u00e9"}`;
      const latin1 = Buffer.from(body, "latin1");
      for (const charset of ["iso-8859-1", '"windows-1252"']) {
        const response = await post(path, latin1, `application/json; charset=${charset}`);
        const message = await expectError(response, 415, "UNSUPPORTED_MEDIA_TYPE");
        expect(message).toBe(
          `The charset "${charset.replaceAll('"', "")}" is not supported: JSON bodies must be UTF-8`,
        );
      }
      expect(fake.requests).toEqual([]);
    },
  );

  it.each(routes)(
    "refuses a content coding on %s with 415 naming it and Accept-Encoding: identity, compressed or not",
    async (path, rest, field) => {
      const json = `{${rest}"${field}":"hi"}`;
      for (const [coding, body] of [
        ["gzip", gzipSync(json)],
        ["br", json],
        ["identity, br", brotliCompressSync(json)],
      ] as const) {
        const response = await post(path, body, "application/json", coding);
        const message = await expectError(response, 415, "UNSUPPORTED_MEDIA_TYPE");
        expect(message).toBe(
          `The content-encoding "${coding.replace("identity, ", "")}" is not supported: send the JSON body uncompressed`,
        );
        expect(response.headers.get("accept-encoding")).toBe("identity");
      }
      expect(fake.requests).toEqual([]);
    },
  );

  it("stores no project from a compressed body, and reads one marked identity", async () => {
    const json = (id: string) => JSON.stringify({ id, name: "Coded", provider: "provider-a" });
    await post("/admin/v1/projects", gzipSync(json("gzipped")), "application/json", "gzip");
    await post("/admin/v1/projects", json("labelled-br"), "application/json", "br");
    const identity = await post("/admin/v1/projects", json("identity"), "application/json", "Identity");
    expect(identity.status).toBe(201);
    const projects = (await sluice.gateway.admin.listProjects()).data.map((stored) => stored.id);
    expect(projects).toContain("identity");
    expect(projects).not.toContain("gzipped");
    expect(projects).not.toContain("labelled-br");
  });

  it("accepts charset=utf-8 in any letter case, and a leading byte order mark", async () => {
    for (const [contentType, bom] of [
      ["application/json; charset=UTF-8", false],
      ["application/json;charset=utf-8", true],
      ["application/json", true],
    ] as const) {
      const json = JSON.stringify({ name: "Caf\u00e9 \u2615", provider: "provider-a" });
      const body = bom ? Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(json)]) : json;
      const response = await post("/admin/v1/projects", body, contentType);
      expect(response.status).toBe(201);
      const created = (await response.json()) as { project: { name: string } };
      expect(created.project.name).toBe("Caf\u00e9 \u2615");
    }
  });

  it("leaves the proxies alone: a latin-1 charset and its bytes are forwarded as sent", async () => {
    const body = Buffer.from(
      '{"model":"gpt-4.1-mini","messages":[{"role":"user","content":"caf\u00e9"}]}',
      "latin1",
    );
    const response = await fetch(`${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json; charset=iso-8859-1",
      },
      body,
    });
    expect(response.status).toBe(200);
    expect(fake.requests.map((request) => request.body.equals(body))).toEqual([true]);
    expect(fake.requests[0]?.headers["content-type"]).toBe("application/json; charset=iso-8859-1");
  });
});

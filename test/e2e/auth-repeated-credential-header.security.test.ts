import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { type RawAnswer, sendRawHeaders } from "../support/raw-request.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowById,
} from "../support/test-gateway.js";

/**
 * A credential header sent twice is ambiguous: Node keeps the first `Authorization` (and joins
 * other repeats), while a proxy or CDN in front of Sluice may read the last. Such a request is
 * refused with 400 before authentication, names the header but none of its values, gets its usage
 * row, is counted by the failed-authentication throttle (as a wrong credential is), and never
 * reaches the provider.
 */
let addresses = 0;
/** A client address of its own (the gateway trusts 127.0.0.1's x-forwarded-for). */
const freshAddress = () => `198.51.100.${++addresses}`;

/**
 * Sends `headers` as given: a list value goes out as that many header lines (fetch would join
 * them into one). From an address of its own unless `headers` name one: each refusal counts as a
 * failed authentication, and the limit is 1.
 */
function send(
  url: string,
  headers: Record<string, string | string[]>,
  body: string,
  method = "POST",
): Promise<RawAnswer> {
  if (headers["x-forwarded-for"] === undefined) headers = { ...headers, "x-forwarded-for": freshAddress() };
  return sendRawHeaders(url, headers, body, method);
}

describe("a credential header sent more than once", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let project: TestProject;

  beforeAll(async () => {
    fake = await startFakeUpstream();
    // One wrong credential throttles the client: whether a refusal is counted as one shows.
    sluice = await startTestGateway({
      ...providerBaseUrls(fake),
      authFailureLimit: 1,
      trustProxy: ["127.0.0.1"],
    });
    project = await createTestProject(sluice.gateway);
  });

  afterAll(async () => {
    await sluice.close();
    await fake.close();
  });

  beforeEach(() => fake.clear());

  const chat = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
  const message = JSON.stringify({
    model: "claude-3-5-haiku-latest",
    max_tokens: 16,
    messages: [{ role: "user", content: "hi" }],
  });
  const generate = JSON.stringify({ contents: [{ role: "user", parts: [{ text: "hi" }] }] });

  const json = { "content-type": "application/json" };
  const rowOf = (answer: RawAnswer) => usageRowById(sluice.gateway, String(answer.headers["x-request-id"]));

  /** The 400 envelope naming `header`, with none of `values` anywhere in the answer or the logs. */
  async function expectRefused(answer: RawAnswer, header: string, values: string[]) {
    expect(answer.status).toBe(400);
    const body = JSON.parse(answer.body) as { error: Record<string, unknown> };
    expect(body).toEqual({
      error: {
        code: "BAD_REQUEST",
        message: `The ${header} header was sent more than once; send each credential header once`,
        requestId: answer.headers["x-request-id"],
      },
    });
    const logs = sluice.logs.join("");
    for (const value of values) {
      expect(answer.body).not.toContain(value);
      expect(JSON.stringify(answer.headers)).not.toContain(value);
      expect(logs).not.toContain(value);
    }
    expect(await rowOf(answer)).toMatchObject({
      project_id: project.projectId,
      key_id: null,
      endpoint: expect.any(String),
      status: 400,
      error_code: "BAD_REQUEST",
      outcome: "error",
      auth_method: null,
      input_tokens: null,
      cost_usd: null,
    });
    expect(fake.requests).toEqual([]);
  }

  it("refuses two Authorization headers on provider A, though the first alone would pass", async () => {
    const valid = `Bearer ${project.bearer("provider-a")}`;
    const other = "Bearer sk_sluice_other_AAAA.tk_some-other-test-key";
    const url = `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`;
    for (const authorization of [
      [valid, other],
      [other, valid],
      [valid, valid],
    ]) {
      const answer = await send(url, { authorization, "content-type": "application/json" }, chat);
      await expectRefused(answer, "authorization", [project.testKey, "tk_some-other-test-key"]);
    }
  });

  it("refuses two x-api-key headers on provider B and two x-goog-api-key headers on provider C", async () => {
    const b = await send(
      `${sluice.url}/v1/provider-b/${project.projectId}/v1/messages`,
      { "x-api-key": [project.bearer("provider-b"), "other.key"], "content-type": "application/json" },
      message,
    );
    await expectRefused(b, "x-api-key", [project.testKey, "other.key"]);
    const c = await send(
      `${sluice.url}/v1/provider-c/${project.projectId}/v1beta/models/gemini-2.0-flash:generateContent`,
      { "x-goog-api-key": [project.bearer("provider-c"), "other.key"], "content-type": "application/json" },
      generate,
    );
    await expectRefused(c, "x-goog-api-key", [project.testKey, "other.key"]);
  });

  it("refuses Sluice's own credential headers sent twice, on the structured endpoints too", async () => {
    const single = { "x-sluice-test-key": project.testKey, "x-ai-key": project.partialKeys["provider-a"] };
    const cases: Array<[string, Record<string, string | string[]>]> = [
      ["x-sluice-test-key", { ...single, "x-sluice-test-key": [project.testKey, "tk_second"] }],
      ["x-ai-key", { ...single, "x-ai-key": [project.partialKeys["provider-a"], "sk_sluice_second"] }],
      ["x-device-token", { ...single, "x-device-token": ["ZGV2aWNlLW9uZQ==", "ZGV2aWNlLXR3bw=="] }],
    ];
    for (const [header, headers] of cases) {
      for (const path of [
        `/v1/text/${project.projectId}`,
        `/v1/provider-a/${project.projectId}/embeddings`,
      ]) {
        const answer = await send(
          `${sluice.url}${path}`,
          { ...headers, "content-type": "application/json" },
          JSON.stringify({ text: "hi", model: "text-embedding-3-small", input: "hi" }),
        );
        await expectRefused(answer, header, [project.testKey, "tk_second", "sk_sluice_second"]);
      }
    }
  });

  it("refuses two Authorization headers on the admin API, whichever comes first, and counts no wrong token", async () => {
    const valid = `Bearer ${adminToken}`;
    const wrong = "Bearer not-the-admin-token-value";
    // All from one address: a refusal counted as a wrong token would throttle the next (limit 1).
    const from = { "x-forwarded-for": freshAddress() };
    for (const authorization of [
      [valid, wrong],
      [wrong, valid],
      [valid, valid],
    ]) {
      const list = await send(`${sluice.url}/admin/v1/projects`, { authorization, ...from }, "", "GET");
      const create = await send(
        `${sluice.url}/admin/v1/projects`,
        { authorization, ...from, "content-type": "application/json" },
        JSON.stringify({ id: "twice-authorized", name: "Twice", provider: "provider-a" }),
      );
      for (const answer of [list, create]) {
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.body)).toEqual({
          error: {
            code: "BAD_REQUEST",
            message: "The authorization header was sent more than once; send each credential header once",
            requestId: answer.headers["x-request-id"],
          },
        });
        for (const value of [adminToken, "not-the-admin-token-value"]) {
          expect(answer.body).not.toContain(value);
          expect(JSON.stringify(answer.headers)).not.toContain(value);
          expect(sluice.logs.join("")).not.toContain(value);
        }
      }
    }
    const projects = (await sluice.gateway.admin.listProjects()).data;
    expect(projects.map((stored) => stored.id)).not.toContain("twice-authorized");
    // Not a wrong token: the throttle counted none, and the token alone still works.
    const once = await send(`${sluice.url}/admin/v1/projects`, { authorization: valid, ...from }, "", "GET");
    expect(once.status).toBe(200);
  });

  it("refuses x-project-id sent twice where the project id is read from it, as a credential header sent twice", async () => {
    const credentials = {
      "x-sluice-test-key": project.testKey,
      "x-ai-key": project.partialKeys["provider-a"],
    };
    const text = JSON.stringify({ text: "hi" });
    const image = JSON.stringify({ prompt: "a lighthouse" });
    for (const [path, body] of [
      ["/v1/text", text],
      ["/v1/image", image],
    ] as const) {
      // Node would join them as "p, p" and find no such project: which one was meant is a guess.
      for (const ids of [
        [project.projectId, project.projectId],
        [project.projectId, "prj_other"],
      ]) {
        const answer = await send(
          `${sluice.url}${path}`,
          { ...credentials, "x-project-id": ids, "content-type": "application/json" },
          body,
        );
        expect(answer.status).toBe(400);
        expect(JSON.parse(answer.body)).toEqual({
          error: {
            code: "BAD_REQUEST",
            message:
              "The x-project-id header was sent more than once; send it once (or put the project id in the path)",
            requestId: answer.headers["x-request-id"],
          },
        });
        // Its row, under the first id, as a failed authentication's is under the id it claims.
        expect(await rowOf(answer)).toMatchObject({
          project_id: project.projectId,
          key_id: null,
          status: 400,
          error_code: "BAD_REQUEST",
          outcome: "error",
          auth_method: null,
        });
      }
    }
    expect(fake.requests).toEqual([]);
    // Counted as a wrong credential for the project (the limit is 1): the same address is throttled
    // then (429, no row), for that project, the header once included.
    const from = { "x-forwarded-for": freshAddress() };
    const twice = { ...credentials, "x-project-id": [project.projectId, project.projectId] };
    const first = await send(`${sluice.url}/v1/text`, { ...twice, ...from, ...json }, text);
    expect(first.status).toBe(400);
    const again = await send(`${sluice.url}/v1/text`, { ...twice, ...from, ...json }, text);
    expect(again.status).toBe(429);
    await expect(usageRowById(sluice.gateway, String(again.headers["x-request-id"]), 500)).rejects.toThrow(
      /no usage row/,
    );
    const single = { ...credentials, "x-project-id": project.projectId };
    expect((await send(`${sluice.url}/v1/text`, { ...single, ...from, ...json }, text)).status).toBe(429);
    // From another address the header once authenticates (the project has no output schema, which
    // is checked after authentication: 422).
    const authenticated = { status: 422, error_code: "VALIDATION_ERROR", auth_method: "test-key-header" };
    const once = await send(
      `${sluice.url}/v1/text`,
      { ...credentials, "x-project-id": project.projectId, "content-type": "application/json" },
      text,
    );
    expect(await rowOf(once)).toMatchObject(authenticated);
    // Where the path names the project the header is not read, so its repeats change nothing.
    const inPath = await send(
      `${sluice.url}/v1/text/${project.projectId}`,
      { ...credentials, "x-project-id": ["prj_a", "prj_b"], "content-type": "application/json" },
      text,
    );
    expect(await rowOf(inPath)).toMatchObject(authenticated);
  });

  it("still forwards a request whose credential headers each come once, other headers repeated", async () => {
    const answer = await send(
      `${sluice.url}/v1/provider-a/${project.projectId}/chat/completions`,
      {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
        accept: ["application/json", "text/plain"],
        "x-stainless-lang": ["js", "js"],
      },
      chat,
    );
    expect(answer.status).toBe(200);
    expect(fake.requests).toHaveLength(1);
    expect(await rowOf(answer)).toMatchObject({ status: 200, auth_method: "bearer-test-key" });
  });
});

import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminToken, startTestGateway, type TestGateway, usageRowOf } from "../support/test-gateway.js";

/** `count` random characters of the alphabet provider keys are made of. */
function keyCharacters(count: number): string {
  return randomBytes(count * 2)
    .toString("base64url")
    .replace(/[-_]/g, "x")
    .slice(0, count);
}

/**
 * Keys of the providers' forms, as a client may type one where the project id goes, each with the
 * start a message may show (`quotedStart`: its first four characters).
 */
const keys = {
  // Provider C (a Google API key): 39 characters, under the 64 an id may have.
  "provider C": `AIza${keyCharacters(35)}`,
  // Provider A: the older form (51 characters) and a project key (164).
  "provider A": `sk-${keyCharacters(48)}`,
  "provider A project": `sk-proj-${keyCharacters(156)}`,
  // Provider B: 108 characters.
  "provider B": `sk-ant-api03-${keyCharacters(93)}AA`,
};

/** Every run of 10 characters of `key` past its first four: no part of its secret may show. */
function fragmentsOf(key: string): string[] {
  const fragments: string[] = [];
  for (let at = 4; at + 10 <= key.length; at++) fragments.push(key.slice(at, at + 10));
  return fragments;
}

describe("a provider key typed where the project id goes is never echoed or logged", () => {
  let sluice: TestGateway;
  const answers: string[] = [];
  const rows: string[] = [];

  beforeAll(async () => {
    // Every line the gateway can write, the access log's (which names the path) included.
    sluice = await startTestGateway({ logLevel: "trace" });
  });
  afterAll(async () => {
    await sluice.close();
  });

  /** The calls that name a project, with `id` where the project id goes. */
  const calls = (id: string): Array<[string, RequestInit, { row: boolean }]> => [
    [
      `/v1/provider-a/${id}/chat/completions`,
      {
        method: "POST",
        headers: {
          authorization: "Bearer sk_sluice_0123456789ab_AAAA.tk_x",
          "content-type": "application/json",
        },
        body: "{}",
      },
      { row: true },
    ],
    [`/v1/provider-c/${id}/models`, {}, { row: false }],
    [
      "/v1/text",
      {
        method: "POST",
        headers: {
          authorization: "Bearer sk_sluice_0123456789ab_AAAA.tk_x",
          "content-type": "application/json",
          "x-project-id": id,
        },
        body: JSON.stringify({ text: "hi" }),
      },
      { row: true },
    ],
    [`/admin/v1/projects/${id}`, { headers: { authorization: `Bearer ${adminToken}` } }, { row: false }],
  ];

  it.each(Object.entries(keys))(
    "answers 404 with the %s key masked as its start and length",
    async (_, key) => {
      for (const [path, init, { row }] of calls(key)) {
        const response = await fetch(`${sluice.url}${path}`, init);
        const text = await response.text();
        answers.push(`${JSON.stringify([...response.headers])} ${text}`);
        expect(response.status, path).toBe(404);
        const { error } = JSON.parse(text) as { error: { code: string; message: string } };
        expect(error.code, path).toBe("PROJECT_NOT_FOUND");
        expect(error.message, path).toBe(
          `Project ${JSON.stringify(`${key.slice(0, 4)}…`)} (${key.length} characters) does not exist`,
        );
        if (row) {
          const usage = await usageRowOf(sluice.gateway, response);
          expect(usage.project_id, path).toBe(`${key.slice(0, 4)}… (${key.length} characters)`);
          rows.push(JSON.stringify(usage));
        }
      }
    },
  );

  it("leaves no part of any of those keys in an answer, a log line or a usage row", async () => {
    await sluice.gateway.flushUsage();
    const logged = sluice.logs.join("");
    expect(logged).toContain('"msg":"request"');
    // The access line names the id as the answer does, by its start and length.
    expect(logged).toContain("/v1/provider-c/AIza… (39 characters)/models");
    for (const [where, text] of Object.entries({
      answers: answers.join("\n"),
      logs: logged,
      usage: rows.join("\n"),
    }))
      for (const [name, key] of Object.entries(keys))
        for (const fragment of fragmentsOf(key))
          expect(text.includes(fragment), `${name} key in ${where}`).toBe(false);
  });

  it("still quotes an unknown id that has no key's form whole", async () => {
    const response = await fetch(`${sluice.url}/v1/provider-c/sk-demo-project/models`);
    expect(response.status).toBe(404);
    const { error } = (await response.json()) as { error: { message: string } };
    expect(error.message).toBe('Project "sk-demo-project" does not exist');
  });
});

import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type FakeUpstream, providerBaseUrls, startFakeUpstream } from "../fakes/fake-upstream.js";
import { openUpload } from "../support/held-upload.js";
import { createPostgresSchema, postgresAvailable } from "../support/services.js";
import {
  adminToken,
  createTestProject,
  startTestGateway,
  type TestGateway,
  type TestProject,
  titleSchema,
} from "../support/test-gateway.js";

/**
 * A call is authenticated once its head is in, and its body may take minutes more (Node's
 * requestTimeout, 300 s). An admin change that refuses its credentials, made while the body arrives,
 * must keep it from the provider all the same: the revocation's 204 says the key stopped working at
 * once on this instance, and a leaked key's holder could otherwise open calls beforehand and finish
 * them after the revocation, each sent with the provider key.
 */
describe("a call whose body is still arriving when an admin change refuses its credentials", () => {
  let fake: FakeUpstream;
  let sluice: TestGateway;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    fake.setStructuredOutput({ title: "A calm lake" });
    sluice = await startTestGateway(providerBaseUrls(fake));
  });
  afterAll(async () => {
    await sluice?.close();
    await fake?.close();
  });
  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${sluice.url}/admin/v1/projects${path}`, {
      method,
      headers: {
        authorization: `Bearer ${adminToken}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const routes = {
    proxy: (project: TestProject) => ({
      path: `/v1/provider-a/${project.projectId}/chat/completions`,
      body: JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] }),
    }),
    text: (project: TestProject) => ({ path: `/v1/text/${project.projectId}`, body: '{"text":"hello"}' }),
  };
  const changes = {
    "its provider key revoked": {
      code: "FORBIDDEN",
      make: (project: TestProject) =>
        admin("DELETE", `/${project.projectId}/keys/${project.keyIds["provider-a"]}`),
    },
    "its test key revoked": {
      code: "UNAUTHORIZED",
      make: async (project: TestProject) => {
        const listed = (await (await admin("GET", `/${project.projectId}/test-keys`)).json()) as {
          data: { testKeyId: string }[];
        };
        return admin("DELETE", `/${project.projectId}/test-keys/${listed.data[0]?.testKeyId}`);
      },
    },
    "its project disabled": {
      code: "FORBIDDEN",
      make: (project: TestProject) => admin("PATCH", `/${project.projectId}`, { disabled: true }),
    },
    "its Test Mode turned off": {
      code: "UNAUTHORIZED",
      make: (project: TestProject) => admin("PATCH", `/${project.projectId}`, { testMode: false }),
    },
    // Two changes at once: the call's credentials no longer pass, and a new request is told so
    // (401) before anything of the project's state, or of the key's, as authentication tells it.
    "its Test Mode turned off and its project disabled": {
      code: "UNAUTHORIZED",
      make: (project: TestProject) =>
        admin("PATCH", `/${project.projectId}`, { testMode: false, disabled: true }),
    },
    "its test key revoked and its provider key revoked": {
      code: "UNAUTHORIZED",
      make: async (project: TestProject) => {
        const listed = (await (await admin("GET", `/${project.projectId}/test-keys`)).json()) as {
          data: { testKeyId: string }[];
        };
        expect(
          (await admin("DELETE", `/${project.projectId}/test-keys/${listed.data[0]?.testKeyId}`)).status,
        ).toBe(204);
        return admin("DELETE", `/${project.projectId}/keys/${project.keyIds["provider-a"]}`);
      },
    },
    "its project renamed": {
      code: null,
      make: (project: TestProject) => admin("PATCH", `/${project.projectId}`, { name: "Renamed" }),
    },
    "its project deleted": {
      code: "PROJECT_NOT_FOUND",
      make: (project: TestProject) => admin("DELETE", `/${project.projectId}`),
    },
    // Another project under the id, which knows none of the call's credentials: 401, as a new request.
    "its project deleted and created again": {
      code: "UNAUTHORIZED",
      make: async (project: TestProject) => {
        expect((await admin("DELETE", `/${project.projectId}`)).status).toBe(204);
        return admin("POST", "", {
          id: project.projectId,
          name: "Again",
          provider: "provider-a",
          testMode: true,
          outputSchema: titleSchema,
        });
      },
    },
    "its test key rotated": {
      code: null,
      make: (project: TestProject) => admin("POST", `/${project.projectId}/test-keys`),
    },
    "its spend cap and output schema changed": {
      code: null,
      make: (project: TestProject) =>
        admin("PATCH", `/${project.projectId}`, {
          monthlySpendCapUsd: 50,
          outputSchema: { ...titleSchema, description: "changed" },
        }),
    },
    // A policy, not a credential: as a rate limit or the spend cap, it holds the calls admitted after it.
    "its proxy allow-list narrowed": {
      code: null,
      /** What a new request is answered, where it differs from `code`. */
      fresh: { proxy: "FORBIDDEN" },
      make: (project: TestProject) =>
        admin("PATCH", `/${project.projectId}`, { proxyAllowList: { "provider-a": ["POST embeddings"] } }),
    },
    "another project changed": {
      code: null,
      make: async () => {
        const other = await createTestProject(sluice.gateway);
        return admin("DELETE", `/${other.projectId}/keys/${other.keyIds["provider-a"]}`);
      },
    },
  };

  for (const [route, request] of Object.entries(routes))
    for (const [change, { code, make, ...rest }] of Object.entries(changes))
      it(`on ${route}, with ${change} meanwhile: ${code ?? "sent as before"}`, async () => {
        const project = await createTestProject(sluice.gateway, { outputSchema: titleSchema });
        const { path, body } = request(project);
        fake.clear();
        const upload = openUpload(
          sluice.url,
          path,
          project.bearer("provider-a"),
          [`content-length: ${body.length}`],
          body.slice(0, 5),
        );
        try {
          // Authenticated and admitted: the call waits for the rest of its body.
          await new Promise((resolve) => setTimeout(resolve, 300));
          expect((await make(project)).status).toBeLessThan(300);
          upload.socket.write(body.slice(5));
          const answer = await upload.answer;
          if (code === null) {
            expect(answer.status).toBe(200);
            expect(fake.requests).toHaveLength(1);
          } else {
            expect(answer.body).toMatchObject({ error: { code } });
            expect(fake.requests, "nothing went to the provider").toHaveLength(0);
          }
          // The refusal a new request with the same credentials gets, or its success.
          const fresh = await fetch(`${sluice.url}${path}`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${project.bearer("provider-a")}`,
              "content-type": "application/json",
            },
            body,
          });
          const freshBody = (await fresh.json()) as { error?: { code: string } };
          const freshCode = "fresh" in rest ? (rest.fresh as Record<string, string>)[route] : undefined;
          expect(freshBody.error?.code ?? null).toBe(freshCode ?? code);
        } finally {
          upload.socket.destroy();
        }
      });
});

/**
 * Made through another instance, the change reaches this one as it reaches a new request: once the
 * records the call was admitted with are past SLUICE_PROJECT_CACHE_TTL_MS, the body's arrival reads
 * them again.
 */
describe.skipIf(!postgresAvailable)(
  "a call whose body is still arriving when another instance revokes its key",
  () => {
    let fake: FakeUpstream;
    let serving: TestGateway;
    let other: TestGateway;
    let drop: (() => Promise<void>) | undefined;
    beforeAll(async () => {
      fake = await startFakeUpstream();
      const schema = await createPostgresSchema();
      drop = schema.drop;
      const shared = { ...providerBaseUrls(fake), databaseUrl: schema.url, projectCacheTtlMs: 300 };
      const masterKey = Buffer.alloc(32, 5).toString("base64");
      serving = await startTestGateway({ ...shared, masterKey });
      other = await startTestGateway({ ...shared, masterKey });
    });
    afterAll(async () => {
      await serving?.close();
      await other?.close();
      await fake?.close();
      await drop?.();
    });

    it("is refused with 403 once its body is in past the TTL, nothing sent to the provider", async () => {
      const project = await createTestProject(other.gateway);
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }] });
      fake.clear();
      const upload = openUpload(
        serving.url,
        `/v1/provider-a/${project.projectId}/chat/completions`,
        project.bearer("provider-a"),
        [`content-length: ${body.length}`],
        body.slice(0, 5),
      );
      try {
        await new Promise((resolve) => setTimeout(resolve, 300));
        const revoked = await fetch(
          `${other.url}/admin/v1/projects/${project.projectId}/keys/${project.keyIds["provider-a"]}`,
          { method: "DELETE", headers: { authorization: `Bearer ${adminToken}` } },
        );
        expect(revoked.status).toBe(204);
        await new Promise((resolve) => setTimeout(resolve, 400));
        upload.socket.write(body.slice(5));
        expect((await upload.answer).body).toMatchObject({ error: { code: "FORBIDDEN" } });
        expect(fake.requests, "nothing went to the provider").toHaveLength(0);
      } finally {
        upload.socket.destroy();
      }
    });
  },
);

/**
 * /v1/pdf fetches a PDF named by URL once the body is in, and that fetch may take up to
 * SLUICE_PDF_FETCH_TIMEOUT_MS (15 s) from a host the caller chose: a second body, which a leaked
 * key's holder can drip as slowly as an upload. A revocation made while it arrives must keep the
 * call from the provider as one made while the body arrives does.
 */
describe("a /v1/pdf call whose PDF is still arriving by URL when an admin change refuses its credentials", () => {
  const pdf = Buffer.from("%PDF-1.4\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n");
  let fake: FakeUpstream;
  let sluice: TestGateway;
  let fetching: (() => void) | undefined;
  let release: (() => void) | undefined;
  beforeAll(async () => {
    fake = await startFakeUpstream();
    fake.setStructuredOutput({ title: "A calm lake" });
    sluice = await startTestGateway(providerBaseUrls(fake), {
      fetchPdf: async () => {
        fetching?.();
        await new Promise<void>((resolve) => {
          release = resolve;
        });
        return pdf;
      },
    });
  });
  afterAll(async () => {
    release?.();
    await sluice?.close();
    await fake?.close();
  });

  it.each([
    ["its provider key revoked", "FORBIDDEN"],
    ["its project renamed", null],
  ] as const)("with %s meanwhile: %s", async (change, code) => {
    const project = await createTestProject(sluice.gateway, { outputSchema: titleSchema });
    fake.clear();
    const started = new Promise<void>((resolve) => {
      fetching = resolve;
    });
    const answer = fetch(`${sluice.url}/v1/pdf/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ pdf: "https://pdfs.example.com/slow.pdf" }),
    });
    await started;
    const made = await fetch(
      change === "its provider key revoked"
        ? `${sluice.url}/admin/v1/projects/${project.projectId}/keys/${project.keyIds["provider-a"]}`
        : `${sluice.url}/admin/v1/projects/${project.projectId}`,
      {
        method: change === "its provider key revoked" ? "DELETE" : "PATCH",
        headers: { authorization: `Bearer ${adminToken}`, "content-type": "application/json" },
        ...(change === "its provider key revoked" ? {} : { body: JSON.stringify({ name: "Renamed" }) }),
      },
    );
    expect(made.status).toBeLessThan(300);
    release?.();
    const answered = await answer;
    if (code === null) {
      expect(answered.status).toBe(200);
      expect(fake.requests).toHaveLength(1);
    } else {
      expect(await answered.json()).toMatchObject({ error: { code } });
      expect(fake.requests, "nothing went to the provider").toHaveLength(0);
    }
  });
});

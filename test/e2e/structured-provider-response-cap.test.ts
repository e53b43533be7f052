import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tinyPng } from "../fakes/fake-upstream-responses.js";
import { type LocalServer, startLocalServer } from "../support/local-server.js";
import {
  createTestProject,
  titleSchema as schema,
  startTestGateway,
  type TestGateway,
  type TestProject,
  usageRowOf,
} from "../support/test-gateway.js";

const cap = 64 * 1024;

const completion = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  created: 1,
  model: "gpt-4o-mini",
  choices: [{ index: 0, message: { role: "assistant", content: '{"title":"ok"}' }, finish_reason: "stop" }],
  usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
});
const imageAnswer = JSON.stringify({
  created: 1,
  data: [{ b64_json: tinyPng.toString("base64") }],
});

/**
 * The structured and image endpoints take at most SLUICE_MAX_PROVIDER_RESPONSE_BYTES of a
 * provider's answer: over it, whether announced by content-length or counted as a chunked body
 * arrives, the call is a 502 PROVIDER_ERROR with its usage row, and the body is not read further.
 * They ask for the answer uncompressed.
 */
describe("a provider answer over SLUICE_MAX_PROVIDER_RESPONSE_BYTES", () => {
  let upstream: LocalServer;
  let sluice: TestGateway;
  let project: TestProject;
  /** How the fake answers next: a valid answer, or one padded past the cap. */
  let mode: "small" | "content-length" | "chunked" = "small";
  const acceptEncodings: Array<string | undefined> = [];
  /** Bytes the fake wrote of its last chunked answer. */
  let written = 0;

  beforeAll(async () => {
    upstream = await startLocalServer((request, response) => {
      acceptEncodings.push(request.headers["accept-encoding"]);
      request.resume();
      request.on("end", () => {
        const answer = (request.url ?? "").includes("/images/") ? imageAnswer : completion;
        if (mode === "small") {
          response.writeHead(200, { "content-type": "application/json" });
          response.end(answer);
        } else if (mode === "content-length") {
          // JSON whitespace before a valid answer: legal JSON, just too large.
          const body = Buffer.concat([Buffer.alloc(cap, 0x20), Buffer.from(answer)]);
          response.writeHead(200, { "content-type": "application/json", "content-length": body.length });
          response.end(body);
        } else {
          // 8 MiB of whitespace in 32 KiB chunks 2 ms apart, then the answer: only the cap's worth
          // is read, and the gateway closes the connection then. Paced, so what is written before
          // the close does not depend on the kernel's socket buffers (which, autotuned up to
          // tcp_wmem's and tcp_rmem's maximum, take several MiB without anyone reading).
          written = 0;
          response.writeHead(200, { "content-type": "application/json" });
          const chunk = Buffer.alloc(32 * 1024, 0x20);
          const pump = () => {
            if (response.destroyed) return;
            if (written >= 8 * 2 ** 20) return void response.end(answer);
            written += chunk.length;
            response.write(chunk);
            setTimeout(pump, 2);
          };
          pump();
        }
      });
    });
    const url = upstream.url;
    sluice = await startTestGateway({
      providerABaseUrl: `${url}/a/v1`,
      providerBBaseUrl: `${url}/b/v1`,
      providerCBaseUrl: `${url}/c/v1beta`,
      maxProviderResponseBytes: cap,
    });
    project = await createTestProject(sluice.gateway, { provider: "provider-a", outputSchema: schema });
  });
  afterAll(async () => {
    await sluice?.close();
    await upstream?.close();
  });

  const call = (route: "text" | "image", body: object) =>
    fetch(`${sluice.url}/v1/${route}/${project.projectId}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify(body),
    });

  it("takes an answer within the cap, asked for uncompressed", async () => {
    mode = "small";
    acceptEncodings.length = 0;
    const text = await call("text", { text: "hello" });
    expect(text.status).toBe(200);
    expect(await text.json()).toEqual({ title: "ok" });
    const image = await call("image", { prompt: "a cat" });
    expect(image.status).toBe(200);
    expect(acceptEncodings).toEqual(["identity", "identity"]);
  });

  for (const how of ["content-length", "chunked"] as const) {
    it.each([
      ["text", { text: "hello" }, {}],
      // A 200 over the cap is images generated, and billed: priced by what the request asked, where
      // that names a price. gpt-image-1 (the default) generates at `auto`, which has none.
      ["image", { prompt: "a cat" }, { cost_usd: null }],
      ["image", { prompt: "a cat", model: "dall-e-3" }, { cost_usd: 0.04 }],
      [
        "image",
        {
          prompt: "a cat",
          model: "gpt-image-1",
          size: "1024x1536",
          n: 2,
          providerOptions: { "provider-a": { quality: "low" } },
        },
        { cost_usd: 0.032 },
      ],
      [
        "image",
        { prompt: "a cat", model: "gpt-image-1-mini", size: "1024x1024", n: 3, maxImagesPerCall: 2 },
        { cost_usd: 0.048 },
      ],
    ] as const)(
      `answers /v1/%s 502 PROVIDER_ERROR for one announced or sent larger (${how}), %j`,
      async (route, body, row) => {
        mode = how;
        const response = await call(route, body);
        const envelope = (await response.json()) as { error: { code: string; message: string } };
        expect(response.status).toBe(502);
        expect(envelope.error).toMatchObject({
          code: "PROVIDER_ERROR",
          message: expect.stringContaining("larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES"),
          // As every other 502 of these routes: the provider's status, and no retry that could pass.
          details: { providerStatus: 200, retryable: false },
        });
        // The provider answered 2xx, and billed the call: the spend cap counts it (decision 0057).
        expect(await usageRowOf(sluice.gateway, response)).toMatchObject({
          status: 502,
          error_code: "PROVIDER_ERROR",
          provider_answered: 1,
          ...row,
        });
        if (how === "chunked") expect(written).toBeLessThan(4 * 2 ** 20);
      },
    );
  }
});

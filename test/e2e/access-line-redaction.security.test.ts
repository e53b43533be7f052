import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rawExchange } from "../support/raw-exchange.js";
import { mulberry32 } from "../support/seeded-random.js";
import { startTestGateway, type TestGateway } from "../support/test-gateway.js";

/**
 * A client that pastes a credential into a request's target, in any spelling, sees none of it in
 * the gateway's log at `debug` (the access line quotes the path) nor in the answer.
 */
describe("credentials pasted into a request's target", () => {
  let sluice: TestGateway;
  beforeAll(async () => {
    sluice = await startTestGateway({ logLevel: "debug" });
  });
  afterAll(async () => {
    await sluice.close();
  });

  const openAiKey = `sk-proj-${"T3BlbkFJ0123456789abcdefghijklmnop".repeat(2)}`;
  const googleKey = "AIzaSy0aB1-cD2_eF3gH4iJ5kL6mN7oP8qR9sTu";
  const next = mulberry32(11);
  // A DeviceCheck device token's size: base64 of 2 to 3 KB.
  const deviceToken = Buffer.from(Array.from({ length: 2400 }, () => Math.floor(next() * 256))).toString(
    "base64",
  );
  const partialKey = `sk_sluice_k1_${"Zm9vYmFyYmF6cXV4".repeat(3)}`;

  /** Sends `target` as it is (a URL parser would turn a `\` into a `/`) and gives the answer and the lines logged. */
  async function send(target: string) {
    const from = sluice.logs.length;
    const port = Number(new URL(sluice.url).port);
    const request = `GET ${target} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n`;
    const answer = await rawExchange(port, Buffer.from(request, "latin1"), { timeoutMs: 5000 });
    // The access line is written when the answer's connection closes.
    for (
      let waited = 0;
      waited < 2000 && !sluice.logs.slice(from).some((line) => line.includes('"msg":"request"'));
      waited += 10
    )
      await new Promise((resolve) => setTimeout(resolve, 10));
    return { answer: answer.body.toString("latin1"), logged: sluice.logs.slice(from).join("") };
  }

  /** Pieces of a secret any of which in an output gives too much of it away. */
  const piecesOf = (secret: string) => secret.match(/[A-Za-z0-9_-]{16}/g) ?? [];

  it("leaves no key behind an escape copied with it, and no device token, in the log or the answer", async () => {
    const encodedToken = encodeURIComponent(deviceToken);
    const targets = [
      `/v1/provider-a/p/x\\n${openAiKey}/chat/completions`,
      `/v1/provider-a/p/x%5Cn${openAiKey}`,
      `/v1/provider-c/p/v1beta/models/x%5Cu0022${googleKey}:generateContent`,
      `/v1/provider-a/p/x%2522${googleKey}`,
      `/v1/provider-a/p/${deviceToken}`,
      `/v1/provider-a/${encodedToken}/chat/completions`,
      `/v1/provider-a/p/chat/completions/${encodedToken}`,
      `/v1/provider-a/${partialKey}.${encodedToken}/chat/completions`,
      `/v1/provider-a/p/chat/completions?device_token=${encodedToken}&key=${googleKey}`,
      `/v1/text/x\\t${openAiKey}`,
    ];
    for (const target of targets) {
      const { answer, logged } = await send(target);
      expect(logged, target).toContain('"msg":"request"');
      for (const piece of [openAiKey, googleKey, deviceToken, partialKey]
        .flatMap(piecesOf)
        .filter((p) => !p.startsWith("sk-proj-") && !p.startsWith("sk_sluice_"))) {
        expect(logged.includes(piece), `${piece} logged for ${target.slice(0, 60)}`).toBe(false);
        expect(answer.includes(piece), `${piece} answered for ${target.slice(0, 60)}`).toBe(false);
      }
    }
  });

  it("writes an ordinary provider path in the access line as it is", async () => {
    const path = "/v1/provider-c/prj_0123456789abcdef/v1beta/models/gemini-2.5-flash:streamGenerateContent";
    const { logged } = await send(`${path}?alt=sse`);
    const line = JSON.parse(logged.split("\n").find((text) => text.includes('"msg":"request"')) ?? "{}");
    expect(line.path).toBe(path);
  });
});

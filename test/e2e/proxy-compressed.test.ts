import { request as httpRequest, type IncomingHttpHeaders } from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { useProxyStage } from "../support/proxy-stage.js";
import { sdkClients } from "../support/sdk-clients.js";
import { usageRowById } from "../support/test-gateway.js";

/**
 * Sluice asks providers for `accept-encoding: identity`; these providers compress anyway. The
 * client must get the provider's bytes and content-encoding unchanged, and the usage row the same
 * tokens as the uncompressed call.
 */
describe("a provider that compresses its answers though Sluice asks for identity", () => {
  const stage = useProxyStage(sdkClients);

  afterEach(() => stage.fake.setCompression(null));

  /**
   * The usage row of a call. A compressed answer's row is written once its decompressor has caught
   * up, which may be a moment after the client read the last byte: it is waited for.
   */
  const rowFor = (requestId: string | null) => usageRowById(stage.sluice.gateway, requestId);

  /**
   * Provider C's usage rows not in `known`, oldest first, once there are `count` (its SDK shows no
   * headers), or what there is after five seconds.
   */
  async function newGeminiRows(known: ReadonlySet<string>, count: number) {
    const deadline = Date.now() + 5000;
    for (;;) {
      await stage.sluice.gateway.flushUsage();
      const rows = (
        await stage.sluice.gateway.database.db
          .selectFrom("usage_records")
          .selectAll()
          .where("project_id", "=", stage.project.projectId)
          .where("provider", "=", "provider-c")
          .orderBy("request_id")
          .execute()
      ).filter((row) => !known.has(row.request_id));
      if (rows.length >= count || Date.now() > deadline) return rows;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  /** The columns a compressed answer must record as its uncompressed twin did. */
  const metered = (row: Awaited<ReturnType<typeof rowFor>>) => ({
    model: row.model,
    input_tokens: row.input_tokens,
    output_tokens: row.output_tokens,
    cached_tokens: row.cached_tokens,
    reasoning_tokens: row.reasoning_tokens,
    cost_usd: row.cost_usd,
    streamed: row.streamed,
    status: row.status,
    outcome: row.outcome,
  });

  /** A chat completion, buffered and streamed, through the OpenAI SDK: the two usage rows. */
  async function chatCalls() {
    const messages = [{ role: "user" as const, content: "Hi" }];
    const buffered = await stage.openai.chat.completions
      .create({ model: "gpt-4o-mini", messages })
      .withResponse();
    expect(buffered.data.choices[0]?.message.content).toBe("Hello from the fake upstream");
    const streamed = await stage.openai.chat.completions
      .create({ model: "gpt-4o-mini", messages, stream: true })
      .withResponse();
    let text = "";
    for await (const chunk of streamed.data) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe("Hello from the fake upstream");
    return [
      metered(await rowFor(buffered.response.headers.get("x-request-id"))),
      metered(await rowFor(streamed.response.headers.get("x-request-id"))),
    ];
  }

  it.each(["gzip", "deflate", "br"] as const)(
    "records the tokens of a %s chat completion, JSON and streamed, as the uncompressed calls record them",
    async (coding) => {
      const plain = await chatCalls();
      expect(plain[0]).toMatchObject({ input_tokens: 11, output_tokens: 7, cached_tokens: 3, streamed: 0 });
      expect(plain[1]).toMatchObject({ input_tokens: 11, output_tokens: 7, streamed: 1 });
      stage.fake.setCompression(coding);
      const compressed = await chatCalls();
      expect(stage.fake.last()?.headers["accept-encoding"]).toBe("identity");
      expect(stage.fake.last()?.sentBody?.length).toBeGreaterThan(0);
      expect(compressed).toEqual(plain);
    },
  );

  it("records the tokens of gzipped provider B and C answers, JSON and streamed, through their SDKs", async () => {
    const calls = async () => {
      const rows: Array<ReturnType<typeof metered>> = [];
      const params = {
        model: "claude-sonnet-4-5",
        max_tokens: 64,
        messages: [{ role: "user" as const, content: "Hi" }],
      };
      const message = await stage.anthropic.messages.create(params).withResponse();
      rows.push(metered(await rowFor(message.response.headers.get("x-request-id"))));
      const stream = await stage.anthropic.messages.create({ ...params, stream: true }).withResponse();
      for await (const _event of stream.data);
      rows.push(metered(await rowFor(stream.response.headers.get("x-request-id"))));
      const known = new Set((await newGeminiRows(new Set(), 0)).map((row) => row.request_id));
      const answer = await stage.google.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
      expect(answer.text).toBe("Hello from the fake upstream");
      let text = "";
      for await (const chunk of await stage.google.models.generateContentStream({
        model: "gemini-2.5-flash",
        contents: "Hi",
      }))
        text += chunk.text ?? "";
      expect(text).toBe("Hello from the fake upstream");
      rows.push(...(await newGeminiRows(known, 2)).map(metered));
      return rows;
    };
    const plain = await calls();
    expect(plain.map((row) => row.input_tokens)).toEqual([11, 11, 11, 11]);
    stage.fake.setCompression("gzip");
    expect(await calls()).toEqual(plain);
  });

  it("passes the provider's compressed bytes and its content-encoding to the client unchanged", async () => {
    stage.fake.setCompression("gzip");
    for (const stream of [false, true]) {
      const received = await rawCall(
        `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/chat/completions`,
        stage.project.bearer("provider-a"),
        JSON.stringify({ model: "gpt-4o-mini", messages: [], stream }),
      );
      const sent = stage.fake.last()?.sentBody;
      expect(received.headers["content-encoding"]).toBe("gzip");
      expect(received.headers["content-type"]).toBe(stream ? "text/event-stream" : "application/json");
      if (!stream) expect(received.headers["content-length"]).toBe(String(sent?.length));
      expect(sent && received.body.equals(sent)).toBe(true);
      const row = await rowFor(received.headers["x-request-id"] as string);
      expect(row).toMatchObject({ input_tokens: 11, output_tokens: 7, streamed: stream ? 1 : 0 });
    }
  });
});

/** A POST through node:http, which (unlike fetch) leaves a compressed body as it came. */
function rawCall(url: string, bearer: string, body: string) {
  return new Promise<{ headers: IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    const outgoing = httpRequest(
      url,
      {
        method: "POST",
        headers: {
          authorization: `Bearer ${bearer}`,
          "content-type": "application/json",
          "accept-encoding": "gzip",
        },
      },
      (response) => {
        const chunks: Buffer[] = [];
        response.on("data", (chunk: Buffer) => chunks.push(chunk));
        response.on("end", () => resolve({ headers: response.headers, body: Buffer.concat(chunks) }));
        response.on("error", reject);
      },
    );
    outgoing.on("error", reject);
    outgoing.end(body);
  });
}

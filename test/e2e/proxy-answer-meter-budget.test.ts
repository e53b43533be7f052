import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { collectGarbage } from "../support/garbage-collection.js";
import { type ProxyStage, startProxyStage } from "../support/proxy-stage.js";

const mib = 1024 * 1024;

/** Buffer memory (outside V8's heap, where a Buffer's bytes are) once everything unreachable is collected. */
function bufferBytesAfterGc(): number {
  collectGarbage();
  collectGarbage();
  return process.memoryUsage().arrayBuffers;
}

/**
 * A provider A embeddings answer of about `bytes`, its usage at the end as the provider writes it:
 * under the 4 MiB the usage meter keeps whole.
 */
function embeddingsAnswer(bytes: number): Buffer {
  const vector = Array.from({ length: 1000 }, (_, index) => (Math.sin(index) * 0.05).toFixed(9)).join(",");
  const items: string[] = [];
  for (let size = 0, index = 0; size < bytes - 200; index++) {
    const item = `{"object":"embedding","index":${index},"embedding":[${vector}]}`;
    items.push(item);
    size += item.length + 1;
  }
  return Buffer.from(
    `{"object":"list","data":[${items.join(",")}],"model":"text-embedding-3-large","usage":{"prompt_tokens":66,"total_tokens":66}}`,
  );
}

/**
 * The usage meter keeps a JSON answer whole up to 4 MiB to read its usage at the end (docs/proxy.md,
 * Usage). Many such answers under way at once held that much each, counted nowhere: 200 calls of a
 * 3.9 MiB embeddings answer took a spawned gateway's buffer memory to 620 MiB (50 MiB without the
 * meter), past the body budget's default of 518 MiB, which counted none of it. The meter's kept bytes
 * over 64 KiB now count in the body budget while it has room; without it, the answer is read as one
 * over 4 MiB is, from copies of its first 4 KiB and last 64 KiB. Measured while the answers are
 * under way: the provider sends all but their last bytes, and holds those until the measurement is
 * taken. The gateway runs in this process, so what its meters keep is in this process's buffer memory.
 */
describe("the usage meter's kept answer bytes and the body budget", () => {
  const budget = 16 * mib;
  const calls = 12;
  let stage: ProxyStage;

  beforeAll(async () => {
    stage = await startProxyStage({ maxBufferedBodyBytes: budget });
  });

  afterAll(() => stage?.close());

  async function embeddings(): Promise<{ status: number; bytes: number }> {
    const answer = await fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/embeddings`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${stage.project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body: JSON.stringify({ model: "text-embedding-3-large", input: ["hi"] }),
    });
    // Read and let go, as it comes: the client keeps none of it.
    let bytes = 0;
    const reader = (answer.body as ReadableStream<Uint8Array>).getReader();
    for (let read = await reader.read(); !read.done; read = await reader.read()) bytes += read.value.length;
    return { status: answer.status, bytes };
  }

  it("counts them in the budget, and reads an answer with no room left from its ends: the usage is still recorded", async () => {
    const body = embeddingsAnswer(Math.floor(3.9 * mib));
    const cut = body.length - 16;
    let sendRest = () => {};
    const rest = new Promise<void>((resolve) => {
      sendRest = resolve;
    });
    stage.fake.clear();
    stage.fake.setPlan(() => ({ restSentAfter: rest }));
    for (let index = 0; index < calls; index++)
      stage.fake.enqueueResponse({
        status: 200,
        parts: [body.subarray(0, cut), body.subarray(cut)],
        headers: { "content-type": "application/json" },
      });
    const rowsBefore = (await stage.usageRows()).length;
    const before = bufferBytesAfterGc();
    try {
      const answers = Promise.all(Array.from({ length: calls }, embeddings));
      // Every answer but its last bytes has passed through the gateway.
      for (const deadline = Date.now() + 20_000; Date.now() < deadline; ) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        if (stage.fake.requests.length === calls) break;
      }
      await new Promise((resolve) => setTimeout(resolve, 1500));
      const grown = bufferBytesAfterGc() - before;
      const held = stage.sluice.gateway.bodyBudget.held();
      sendRest();
      const done = await answers;
      expect(done).toEqual(Array.from({ length: calls }, () => ({ status: 200, bytes: body.length })));
      // Before: every meter kept its answer whole, ~45 MiB, and the budget counted none of it.
      expect(grown).toBeLessThan(budget + 6 * mib);
      expect(held).toBeGreaterThan(budget / 2);
      expect(held).toBeLessThanOrEqual(budget);
    } finally {
      sendRest();
      stage.fake.setPlan(null);
    }
    // Every call's usage is read, kept whole or from its ends, and the budget holds nothing after.
    for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
      if ((await stage.usageRows()).length >= rowsBefore + calls) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const rows = (await stage.usageRows()).slice(rowsBefore);
    expect(rows).toHaveLength(calls);
    for (const row of rows)
      expect(row).toMatchObject({ status: 200, model: "text-embedding-3-large", input_tokens: 66 });
    expect(stage.sluice.gateway.bodyBudget.held()).toBe(0);
  });
});

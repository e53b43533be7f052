import { connect } from "node:net";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { proxiedChat } from "../support/proxied-chat.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sendRawHeaders } from "../support/raw-request.js";
import { googleGenAiV1Client, sdkClients } from "../support/sdk-clients.js";
import { createTestProject, startTestGateway, usageRowOf } from "../support/test-gateway.js";

describe("proxies driven by the official SDKs", () => {
  const stage = useProxyStage(sdkClients);

  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setSseDelayMs(0);
    stage.fake.hangStreamsAfter(null);
  });

  /** A POST to provider A's proxy with the project's Bearer, as a client without an SDK sends it. */
  const postToA = (body: string, init: RequestInit = {}, path = "chat/completions") =>
    fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/${path}`, {
      method: "POST",
      headers: {
        authorization: `Bearer ${stage.project.bearer("provider-a")}`,
        "content-type": "application/json",
      },
      body,
      ...init,
    });

  async function rowFor(requestId: string | null | undefined) {
    const row = (await stage.usageRows()).find((candidate) => candidate.request_id === requestId);
    expect(row, `usage row for ${requestId}`).toBeDefined();
    return row!;
  }

  describe("provider A", () => {
    it("answers a chat completion and injects the rebuilt key as Bearer", async () => {
      const { data, response } = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      expect(data.choices[0]?.message.content).toBe("Hello from the fake upstream");
      const upstream = stage.fake.last()!;
      expect(upstream.path).toBe("/a/v1/chat/completions");
      expect(upstream.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
      expect(upstream.headers["x-sluice-test-key"]).toBeUndefined();
      const row = await rowFor(response.headers.get("x-request-id"));
      expect(row).toMatchObject({
        endpoint: "proxy",
        provider: "provider-a",
        model: "gpt-4o-mini",
        status: 200,
        outcome: "ok",
        streamed: 0,
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
        auth_method: "bearer-test-key",
      });
      expect(row.cost_usd).toBeCloseTo(((11 - 3) * 0.15 + 3 * 0.075 + 7 * 0.6) / 1e6, 12);
    });

    it("streams a chat completion and records the same tokens and cost as the buffered call", async () => {
      const buffered = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      const { data: stream, response } = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }], stream: true })
        .withResponse();
      let text = "";
      for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
      expect(text).toBe("Hello from the fake upstream");
      expect((stage.fake.last()!.json as { stream_options?: unknown }).stream_options).toEqual({
        include_usage: true,
      });
      const streamedRow = await rowFor(response.headers.get("x-request-id"));
      const bufferedRow = await rowFor(buffered.response.headers.get("x-request-id"));
      expect(streamedRow.streamed).toBe(1);
      for (const column of [
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "cost_usd",
        "model",
      ] as const) {
        expect(streamedRow[column]).toEqual(bufferedRow[column]);
      }
    });

    it("records a stream's usage however the body spells its stream fields", async () => {
      // What the provider reads as `stream: true` with no usage asked for, written so that a byte
      // search would not see it: the rows must still have tokens and cost.
      const bodies = [
        '{"model":"gpt-4o-mini","messages":[],"\\u0073tream":true}',
        '{"model":"gpt-4o-mini","messages":[],"stream":true,"stream_options":{"include_usage":false},"x":{"include_usage":true}}',
      ];
      for (const body of bodies) {
        const response = await postToA(body);
        expect(response.headers.get("content-type")).toMatch(/^text\/event-stream/);
        await response.text();
        expect((stage.fake.last()!.json as { stream_options?: unknown }).stream_options, body).toEqual({
          include_usage: true,
        });
        const row = await rowFor(response.headers.get("x-request-id"));
        expect(row, body).toMatchObject({ streamed: 1, input_tokens: 11, output_tokens: 7 });
        expect(row.cost_usd, body).toBeGreaterThan(0);
      }
      // A path with percent-encoded letters is the same path: forwarded decoded, usage asked for.
      const encoded = await postToA(
        '{"model":"gpt-4o-mini","messages":[],"stream":true}',
        {},
        "chat/c%6Fmpletions",
      );
      await encoded.text();
      expect(stage.fake.last()!.path).toBe("/a/v1/chat/completions");
      expect((stage.fake.last()!.json as { stream_options?: unknown }).stream_options).toEqual({
        include_usage: true,
      });
    });

    it("counts no tokens for a POST that answers with a stored object, and records it as free: a completion's update, a batch's cancel", async () => {
      const created = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }], store: true })
        .withResponse();
      const stored = JSON.parse(JSON.stringify(created.data)) as { id: string };
      // Both answer with the stored object, whose usage was counted when it was made.
      stage.fake.enqueueResponse({ status: 200, body: { ...stored, metadata: { topic: "greeting" } } });
      const updated = await stage.openai.chat.completions
        .update(stored.id, { metadata: { topic: "greeting" } })
        .withResponse();
      expect(stage.fake.last()).toMatchObject({
        method: "POST",
        path: `/a/v1/chat/completions/${stored.id}`,
      });
      const batch = { id: "batch_1", object: "batch", status: "cancelling" };
      const usage = { input_tokens: 500, output_tokens: 90, total_tokens: 590 };
      stage.fake.enqueueResponse({ status: 200, body: { ...batch, usage } });
      const cancelled = await stage.openai.batches.cancel("batch_1").withResponse();
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/a/v1/batches/batch_1/cancel" });

      expect(await rowFor(created.response.headers.get("x-request-id"))).toMatchObject({ input_tokens: 11 });
      for (const { response } of [updated, cancelled])
        expect(await rowFor(response.headers.get("x-request-id"))).toMatchObject({
          status: 200,
          outcome: "ok",
          input_tokens: null,
          output_tokens: null,
          cost_usd: 0,
        });
    });

    it("forwards embeddings and serves models.list from the catalogue", async () => {
      const embedding = await stage.openai.embeddings.create({
        model: "text-embedding-3-small",
        input: ["a", "b"],
      });
      expect(embedding.data).toHaveLength(2);
      const models = await stage.openai.models.list();
      const ids = [];
      for await (const model of models) ids.push(model.id);
      expect(ids).toContain("gpt-4.1-mini");
      expect(stage.fake.requests.filter((request) => request.path.endsWith("/models"))).toHaveLength(0);
    });

    it("forwards the body byte for byte and keeps the query string", async () => {
      const body =
        '{ "messages" :[{"role":"user","content":"é 🙂"}],\n  "model":"gpt-4o-mini" ,"temperature":0.50}';
      const response = await fetch(
        `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/chat/completions?foo=bar&x=%2F`,
        {
          method: "POST",
          headers: {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
            "content-type": "application/json",
            cookie: "session=1",
            "openai-beta": "x=1",
          },
          body,
        },
      );
      expect(response.status).toBe(200);
      const upstream = stage.fake.last()!;
      expect(upstream.body.equals(Buffer.from(body))).toBe(true);
      expect(upstream.path).toBe("/a/v1/chat/completions?foo=bar&x=%2F");
      expect(upstream.headers.cookie).toBeUndefined();
      expect(upstream.headers["openai-beta"]).toBe("x=1");
      expect(upstream.headers["content-length"]).toBe(String(Buffer.byteLength(body)));
    });

    it("passes a provider error through unchanged", async () => {
      stage.fake.enqueueResponse({
        status: 429,
        headers: { "retry-after": "7", "x-ratelimit-remaining-requests": "0" },
        body: { error: { message: "Slow down", type: "rate_limit_exceeded", param: null, code: null } },
      });
      const response = await postToA(JSON.stringify({ model: "gpt-4o-mini", messages: [] }));
      expect(response.status).toBe(429);
      expect(response.headers.get("retry-after")).toBe("7");
      expect(response.headers.get("x-ratelimit-remaining-requests")).toBe("0");
      expect(await response.json()).toEqual({
        error: { message: "Slow down", type: "rate_limit_exceeded", param: null, code: null },
      });
      const row = await rowFor(response.headers.get("x-request-id"));
      expect(row).toMatchObject({ status: 429, outcome: "error", error_code: null });
    });

    it("keeps the provider's x-request-id for its SDK and sends Sluice's id and limits beside it", async () => {
      const plain = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      expect(plain.response.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
      expect(plain.response.headers.get("x-sluice-request-id")).toBeNull();
      expect(plain.response.headers.get("ratelimit-policy")).toContain('"project"');
      expect(plain.response.headers.get("ratelimit")).toMatch(/^"\w+";r=\d+;t=\d+$/);

      stage.fake.enqueueResponse({
        status: 200,
        headers: { "x-request-id": "req_from_provider" },
        body: JSON.parse(JSON.stringify(plain.data)),
      });
      const { response, request_id } = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      expect(request_id).toBe("req_from_provider");
      expect(response.headers.get("ratelimit")).toMatch(/^"\w+";r=\d+;t=\d+$/);
      const row = await rowFor(response.headers.get("x-sluice-request-id"));
      expect(row).toMatchObject({ status: 200, outcome: "ok", input_tokens: 11 });
    });

    it("drops a provider's own x-sluice-request-id, so the id an app reads is always Sluice's", async () => {
      // A provider (or anything between it and Sluice) that sends the header Sluice names its own id
      // with gave the app a second id, or the only one (audit: adv-observe): `req_…` of another row.
      const spoofed = "req_0000000000000000000000000000beef";
      const plain = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      const body = JSON.parse(JSON.stringify(plain.data));
      stage.fake.enqueueResponse({
        status: 200,
        headers: { "x-request-id": "req_from_provider", "x-sluice-request-id": spoofed },
        body,
      });
      const beside = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      const besideId = beside.response.headers.get("x-sluice-request-id");
      expect(besideId).toMatch(/^req_[0-9a-f]{32}$/);
      expect(besideId).not.toBe(spoofed);
      expect(await rowFor(besideId)).toMatchObject({ status: 200, outcome: "ok" });

      stage.fake.enqueueResponse({ status: 200, headers: { "x-sluice-request-id": spoofed }, body });
      const alone = await stage.openai.chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      expect(alone.response.headers.get("x-sluice-request-id")).toBeNull();
      expect(await rowFor(alone.response.headers.get("x-request-id"))).toMatchObject({ status: 200 });
    });

    it("aborts the upstream request within a second when the client disconnects, and records what it saw", async () => {
      stage.fake.setSseDelayMs(200);
      const controller = new AbortController();
      const response = await postToA(JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true }), {
        signal: controller.signal,
      });
      const reader = response.body!.getReader();
      await reader.read();
      const abortedAt = Date.now();
      controller.abort();
      const upstream = await stage.fake.waitForAbort(1000);
      expect(upstream.aborted).toBe(true);
      expect(upstream.finishedAt! - abortedAt).toBeLessThan(1000);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const row = await rowFor(response.headers.get("x-request-id"));
      expect(row).toMatchObject({ outcome: "aborted", streamed: 1 });
    });

    it("reads a stream as a stream whatever the case of its media type", async () => {
      const usage = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 };
      const chunk = { id: "c1", object: "chat.completion.chunk", model: "gpt-4o-mini", choices: [], usage };
      const sse = `data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`;
      stage.fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "Text/Event-Stream; charset=utf-8" },
        body: sse,
      });
      const response = await postToA(JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true }));
      expect(await response.text()).toBe(sse);
      const row = await rowFor(response.headers.get("x-request-id"));
      expect(row).toMatchObject({ streamed: 1, input_tokens: 5, output_tokens: 3 });
    });

    it("aborts every pipelined request's upstream when the client's connection closes", async () => {
      stage.fake.setSseDelayMs(200);
      const before = new Set((await stage.usageRows()).map((row) => row.request_id));
      const body = JSON.stringify({ model: "gpt-4o-mini", messages: [], stream: true });
      const request =
        `POST /v1/provider-a/${stage.project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
        `authorization: Bearer ${stage.project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      const socket = connect(Number(new URL(stage.sluice.url).port), "127.0.0.1");
      socket.on("error", () => {});
      socket.write(request + request);
      // Bounds for the waits below, generous for a loaded machine: each ends once its condition holds.
      const bothStarted = Date.now() + 5000;
      while (stage.fake.requests.length < 2 && Date.now() < bothStarted)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(stage.fake.requests).toHaveLength(2);
      const closedAt = Date.now();
      socket.destroy();
      const deadline = closedAt + 5000;
      while (stage.fake.requests.some((upstream) => !upstream.aborted) && Date.now() < deadline)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(stage.fake.requests.map((upstream) => upstream.aborted)).toEqual([true, true]);
      await new Promise((resolve) => setTimeout(resolve, 50));
      const rows = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      expect(rows.map((row) => row.outcome)).toEqual(["aborted", "aborted"]);
    });

    it("answers 504 when the provider sends its headers but no body in time, and records it", async () => {
      const idle = await startTestGateway({
        providerABaseUrl: `${stage.fake.url}/a/v1`,
        upstreamIdleTimeoutMs: 300,
      });
      try {
        stage.fake.hangStreamsAfter(0);
        const idleProject = await createTestProject(idle.gateway);
        const response = await proxiedChat(idle.url, idleProject, {
          body: { model: "gpt-4o-mini", messages: [], stream: true },
        });
        expect(response.status).toBe(504);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_TIMEOUT");
        expect(await usageRowOf(idle.gateway, response)).toMatchObject({
          status: 504,
          error_code: "PROVIDER_TIMEOUT",
        });
      } finally {
        stage.fake.hangStreamsAfter(null);
        await idle.close();
      }
    });

    it("records a client that leaves mid-upload as aborted (499), with no upstream call", async () => {
      const before = new Set((await stage.usageRows()).map((row) => row.request_id));
      const requestId = await new Promise<string | undefined>((resolve, reject) => {
        const socket = connect(Number(new URL(stage.sluice.url).port), "127.0.0.1", () => {
          socket.write(
            `POST /v1/provider-a/${stage.project.projectId}/chat/completions HTTP/1.1\r\nhost: x\r\n` +
              `authorization: Bearer ${stage.project.bearer("provider-a")}\r\ncontent-type: application/json\r\n` +
              'content-length: 1000\r\n\r\n{"model":',
          );
          setTimeout(() => socket.destroy(), 100);
        });
        socket.once("error", reject);
        socket.once("close", () => resolve(undefined));
      });
      expect(requestId).toBeUndefined();
      await new Promise((resolve) => setTimeout(resolve, 100));
      const added = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      expect(added).toHaveLength(1);
      expect(added[0]).toMatchObject({ status: 499, outcome: "aborted", error_code: null });
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("answers 504 when the provider sends no headers in time and 502 when it cannot be reached", async () => {
      // undici checks its timeouts about once a second, so the gap is generous.
      const slow = await startTestGateway({
        providerABaseUrl: `${stage.fake.url}/a/v1`,
        upstreamHeadersTimeoutMs: 300,
      });
      const down = await startTestGateway({ providerABaseUrl: "http://127.0.0.1:1/v1" });
      try {
        stage.fake.setLatencyMs(3000);
        const slowProject = await createTestProject(slow.gateway);
        const timedOut = await proxiedChat(slow.url, slowProject, {
          body: '{"model":"gpt-4o-mini","messages":[]}',
        });
        expect(timedOut.status).toBe(504);
        expect(((await timedOut.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_TIMEOUT");
        // The row names the model the request asked for, as any other failed call's does.
        expect(await usageRowOf(slow.gateway, timedOut)).toMatchObject({
          status: 504,
          error_code: "PROVIDER_TIMEOUT",
          model: "gpt-4o-mini",
        });
        stage.fake.setLatencyMs(0);
        const downProject = await createTestProject(down.gateway);
        const unreachable = await proxiedChat(down.url, downProject, {
          body: '{"model":"gpt-4o","messages":[]}',
        });
        expect(unreachable.status).toBe(502);
        expect(((await unreachable.json()) as { error: { code: string } }).error.code).toBe("PROVIDER_ERROR");
        expect(await usageRowOf(down.gateway, unreachable)).toMatchObject({ status: 502, model: "gpt-4o" });
      } finally {
        stage.fake.setLatencyMs(0);
        await slow.close();
        await down.close();
      }
    });
  });

  describe("provider B", () => {
    it("answers messages with its key header and the configured version", async () => {
      const message = await stage.anthropic.messages.create(
        { model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] },
        { headers: { "anthropic-beta": "prompt-caching-2024-07-31", "anthropic-version": "1999-01-01" } },
      );
      expect(message.content[0]).toMatchObject({ type: "text", text: "Hello from the fake upstream" });
      const upstream = stage.fake.last()!;
      expect(upstream.path).toBe("/b/v1/messages");
      expect(upstream.headers["x-api-key"]).toBe(stage.project.providerKeys["provider-b"]);
      expect(upstream.headers["anthropic-version"]).toBe("2023-06-01");
      expect(upstream.headers["anthropic-beta"]).toBe("prompt-caching-2024-07-31");
      expect(upstream.headers.authorization).toBeUndefined();
    });

    it("sends the version SLUICE_PROVIDER_B_VERSION names, on the proxy and on /v1/text", async () => {
      const versioned = await startTestGateway({
        providerBBaseUrl: `${stage.fake.url}/b/v1`,
        providerBVersion: "2024-10-22",
      });
      try {
        const bProject = await createTestProject(versioned.gateway, {
          provider: "provider-b",
          outputSchema: { type: "object", properties: { answer: { type: "string" } }, required: ["answer"] },
        });
        const headers = {
          authorization: `Bearer ${bProject.bearer("provider-b")}`,
          "content-type": "application/json",
          "anthropic-version": "1999-01-01",
        };
        const proxied = await fetch(`${versioned.url}/v1/provider-b/${bProject.projectId}/v1/messages`, {
          method: "POST",
          headers,
          body: JSON.stringify({ model: "claude-sonnet-4-5", max_tokens: 16, messages: [] }),
        });
        expect(proxied.status).toBe(200);
        expect(stage.fake.last()!.headers["anthropic-version"]).toBe("2024-10-22");
        const text = await fetch(`${versioned.url}/v1/text/${bProject.projectId}`, {
          method: "POST",
          headers,
          body: JSON.stringify({ text: "Hi" }),
        });
        expect(text.status).toBe(200);
        expect(stage.fake.last()!.headers["anthropic-version"]).toBe("2024-10-22");
      } finally {
        await versioned.close();
      }
    });

    it("streams messages and records the same usage as the buffered call", async () => {
      const buffered = await stage.anthropic.messages
        .create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      const { data: stream, response } = await stage.anthropic.messages
        .create({
          model: "claude-sonnet-4-5",
          max_tokens: 64,
          messages: [{ role: "user", content: "Hi" }],
          stream: true,
        })
        .withResponse();
      let text = "";
      for await (const event of stream)
        if (event.type === "content_block_delta" && event.delta.type === "text_delta")
          text += event.delta.text;
      expect(text).toBe("Hello from the fake upstream");
      const streamedRow = await rowFor(
        response.headers.get("request-id")
          ? response.headers.get("x-request-id")
          : response.headers.get("x-request-id"),
      );
      const bufferedRow = await rowFor(buffered.response.headers.get("x-request-id"));
      expect(streamedRow).toMatchObject({
        streamed: 1,
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
      });
      for (const column of ["input_tokens", "output_tokens", "cached_tokens", "cost_usd", "model"] as const)
        expect(streamedRow[column]).toEqual(bufferedRow[column]);
    });

    it("prices prompt-cache writes above the input price, by their lifetime", async () => {
      const usage = {
        input_tokens: 1000,
        cache_creation_input_tokens: 3000,
        cache_read_input_tokens: 2000,
        cache_creation: { ephemeral_5m_input_tokens: 1000, ephemeral_1h_input_tokens: 2000 },
        output_tokens: 100,
      };
      stage.fake.enqueueResponse({
        status: 200,
        body: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "claude-sonnet-4-5-20250929",
          content: [{ type: "text", text: "Cached" }],
          stop_reason: "end_turn",
          stop_sequence: null,
          usage,
        },
      });
      const { response } = await stage.anthropic.messages
        .create({ model: "claude-sonnet-4-5", max_tokens: 64, messages: [{ role: "user", content: "Hi" }] })
        .withResponse();
      const row = await rowFor(response.headers.get("x-request-id"));
      expect(row).toMatchObject({ input_tokens: 6000, cached_tokens: 2000, output_tokens: 100 });
      // Per 1M: 3 input, 0.3 read, 3.75 five-minute and 6 one-hour writes, 15 output.
      const expected = (1000 * 3 + 2000 * 0.3 + 1000 * 3.75 + 2000 * 6 + 100 * 15) / 1e6;
      expect(row.cost_usd).toBeCloseTo(expected, 12);
    });

    it("serves models.list from the catalogue", async () => {
      const upstreamCalls = stage.fake.requests.length;
      const ids = [];
      for await (const model of stage.anthropic.models.list()) ids.push(model.id);
      expect(ids.length).toBeGreaterThan(0);
      expect(ids.every((id) => typeof id === "string")).toBe(true);
      expect(stage.fake.requests).toHaveLength(upstreamCalls);
    });

    it("answers models.retrieve from the catalogue, and 404 for a model it does not list", async () => {
      const upstreamCalls = stage.fake.requests.length;
      const [first] = (await stage.anthropic.models.list()).data;
      const model = await stage.anthropic.models.retrieve(first?.id ?? "");
      expect(model).toMatchObject({ id: first?.id, type: "model", display_name: first?.display_name });
      await expect(stage.anthropic.models.retrieve("no-such-model")).rejects.toMatchObject({ status: 404 });
      expect(stage.fake.requests).toHaveLength(upstreamCalls);
    });

    it("refuses a non-JSON body with 415 and GET with 405", async () => {
      const url = `${stage.sluice.url}/v1/provider-b/${stage.project.projectId}/messages`;
      const text = await fetch(url, {
        method: "POST",
        headers: { "x-api-key": stage.project.bearer("provider-b"), "content-type": "text/plain" },
        body: "hi",
      });
      expect(text.status).toBe(415);
      expect(await usageRowOf(stage.sluice.gateway, text)).toMatchObject({
        status: 415,
        error_code: "UNSUPPORTED_MEDIA_TYPE",
      });
      expect(
        (await fetch(url, { headers: { "x-api-key": stage.project.bearer("provider-b") } })).status,
      ).toBe(405);
    });

    // SPEC: "Provider errors are forwarded" on B's and C's proxies too, status, headers and body.
    it.each([
      [
        "provider-b",
        "v1/messages",
        529,
        { type: "error", error: { type: "overloaded_error", message: "Overloaded" } },
      ],
      [
        "provider-c",
        "v1beta/models/gemini-2.5-flash:generateContent",
        400,
        { error: { code: 400, message: "Invalid JSON payload", status: "INVALID_ARGUMENT" } },
      ],
    ] as const)("passes %s's error through unchanged", async (provider, path, status, error) => {
      stage.fake.enqueueResponse({ status, headers: { "retry-after": "3" }, body: error });
      const response = await fetch(`${stage.sluice.url}/v1/${provider}/${stage.project.projectId}/${path}`, {
        method: "POST",
        headers: {
          authorization: `Bearer ${stage.project.bearer(provider)}`,
          "content-type": "application/json",
        },
        body: "{}",
      });
      expect(response.status).toBe(status);
      expect(response.headers.get("retry-after")).toBe("3");
      expect(await response.json()).toEqual(error);
      expect(await rowFor(response.headers.get("x-request-id"))).toMatchObject({
        status,
        outcome: "error",
        error_code: null,
      });
    });

    it("authenticates before it looks at the body's type, as the other routes do: 401 without credentials, 404 for an unknown project", async () => {
      const textBody = { method: "POST", headers: { "content-type": "text/plain" }, body: "hi" };
      const anonymous = await fetch(
        `${stage.sluice.url}/v1/provider-b/${stage.project.projectId}/messages`,
        textBody,
      );
      expect(anonymous.status).toBe(401);
      const unknown = await fetch(
        `${stage.sluice.url}/v1/provider-c/prj_nosuchproject0000/models/gemini-2.5-flash:generateContent`,
        { ...textBody, headers: { "x-goog-api-key": stage.project.bearer("provider-c") } },
      );
      expect(unknown.status).toBe(404);
      expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe("PROJECT_NOT_FOUND");
    });
  });

  describe("provider C", () => {
    it("answers generateContent with its key header and client identifier", async () => {
      const result = await stage.google.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
      expect(result.text).toBe("Hello from the fake upstream");
      const upstream = stage.fake.last()!;
      // @google/genai 3.x addresses the v1 API by default: the configured base's v1 sibling.
      expect(upstream.path).toBe("/c/v1/models/gemini-2.5-flash:generateContent");
      expect(upstream.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);
      expect(upstream.headers["x-goog-api-client"]).toMatch(/^sluice\//);
    });

    // SPEC: provider C's proxy requires `Content-Type: application/json`, as provider B's does.
    it("refuses a body that is not JSON, or has no content type, with 415 and never calls upstream", async () => {
      const url = `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models/gemini-2.5-flash:generateContent`;
      const body = JSON.stringify({ contents: [{ parts: [{ text: "Hi" }] }] });
      const text = await fetch(url, {
        method: "POST",
        headers: { "x-goog-api-key": stage.project.bearer("provider-c"), "content-type": "text/plain" },
        body,
      });
      expect(text.status).toBe(415);
      expect(((await text.json()) as { error: { code: string } }).error.code).toBe("UNSUPPORTED_MEDIA_TYPE");
      const untyped = await sendRawHeaders(
        url,
        { "x-goog-api-key": stage.project.bearer("provider-c"), "content-length": String(body.length) },
        body,
      );
      expect(untyped.status).toBe(415);
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("serves @google/genai 1.x, still the most used, on its default v1beta API: generateContent, its stream and interactions", async () => {
      const v1 = googleGenAiV1Client(stage.sluice, stage.project);
      const result = await v1.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
      expect(result.text).toBe("Hello from the fake upstream");
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/gemini-2.5-flash:generateContent");
      expect(stage.fake.last()!.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);
      const stream = await v1.models.generateContentStream({ model: "gemini-2.5-flash", contents: "Hi" });
      for await (const _chunk of stream);
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
      const { data, response } = await v1.interactions
        .create({ model: "gemini-2.5-flash", input: "Hi", store: false })
        .withResponse();
      expect(data.status).toBe("completed");
      expect(stage.fake.last()!.path).toBe("/c/v1beta/interactions");
      expect(await rowFor(result.sdkHttpResponse?.headers?.["x-request-id"] ?? null)).toMatchObject({
        provider: "provider-c",
        model: "gemini-2.5-flash",
        streamed: 0,
        input_tokens: 11,
        output_tokens: 7,
      });
      expect(await rowFor(response.headers.get("x-request-id"))).toMatchObject({
        model: "gemini-2.5-flash",
        input_tokens: 11,
        output_tokens: 7,
      });
      // Its interactions stream names its events as v1beta does (3.x reads the step-based v1 stream).
      const { data: events, response: streamed } = await v1.interactions
        .create({ model: "gemini-2.5-flash", input: "Hi", stream: true })
        .withResponse();
      const types: string[] = [];
      for await (const event of events) types.push(event.event_type);
      expect(types.at(-1)).toBe("interaction.complete");
      await vi.waitFor(
        async () =>
          expect(await rowFor(streamed.headers.get("x-request-id"))).toMatchObject({
            streamed: 1,
            input_tokens: 11,
            output_tokens: 7,
          }),
        { timeout: 5000 },
      );
      const names = [];
      for await (const model of await v1.models.list()) names.push(model.name);
      expect(names).toContain("models/gemini-2.5-flash");
    });

    it("streams with ?alt=sse and records the same usage as generateContent", async () => {
      const stream = await stage.google.models.generateContentStream({
        model: "gemini-2.5-flash",
        contents: "Hi",
      });
      let text = "";
      for await (const chunk of stream) text += chunk.text ?? "";
      expect(text).toBe("Hello from the fake upstream");
      expect(stage.fake.last()!.path).toBe("/c/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
      await stage.google.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
      const rows = (await stage.usageRows()).filter((row) => row.provider === "provider-c").slice(-2);
      expect(rows.map((row) => row.streamed).sort()).toEqual([0, 1]);
      expect(rows[0]).toMatchObject({
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
        model: "gemini-2.5-flash",
      });
      expect(rows[0]?.cost_usd).toBe(rows[1]?.cost_usd);
    });

    it("records a prompt its filter blocked (no candidates, only the prompt counted) alike, streamed and not", async () => {
      // Google's answer to a blocked prompt: no candidates, and a usageMetadata without the counts that are 0.
      const blocked = {
        promptFeedback: { blockReason: "PROHIBITED_CONTENT" },
        usageMetadata: { promptTokenCount: 11, totalTokenCount: 11 },
        modelVersion: "gemini-2.5-flash",
        responseId: "fake-blocked",
      };
      stage.fake.enqueueResponse({ status: 200, body: blocked });
      stage.fake.enqueueResponse({
        status: 200,
        headers: { "content-type": "text/event-stream" },
        body: `data: ${JSON.stringify(blocked)}\r\n\r\n`,
      });
      const ask = { model: "gemini-2.5-flash", contents: "Hi" };
      const buffered = await stage.rowAddedBy(async () => {
        const answer = await stage.google.models.generateContent(ask);
        expect(answer.promptFeedback?.blockReason).toBe("PROHIBITED_CONTENT");
        expect(answer.candidates).toBeUndefined();
      });
      const streamed = await stage.rowAddedBy(async () => {
        const chunks = [];
        for await (const chunk of await stage.google.models.generateContentStream(ask)) chunks.push(chunk);
        expect(chunks.map((chunk) => chunk.promptFeedback?.blockReason)).toEqual(["PROHIBITED_CONTENT"]);
      });
      for (const [row, streamedFlag] of [
        [buffered, 0],
        [streamed, 1],
      ] as const) {
        expect(row).toMatchObject({
          model: "gemini-2.5-flash",
          status: 200,
          outcome: "ok",
          streamed: streamedFlag,
          input_tokens: 11,
          output_tokens: 0,
        });
        // gemini-2.5-flash: $0.30 per 1M input tokens; the output Google left out is 0, not unknown.
        expect(row.cost_usd).toBeCloseTo((11 * 0.3) / 1e6, 12);
      }
    });

    it("answers models.get from the catalogue, and 404 for a model it does not list or a project without a key", async () => {
      const upstreamCalls = stage.fake.requests.length;
      const model = await stage.google.models.get({ model: "gemini-2.5-flash" });
      expect(model).toMatchObject({ name: "models/gemini-2.5-flash" });
      expect(
        model.supportedActions ??
          (model as { supportedGenerationMethods?: string[] }).supportedGenerationMethods,
      ).toContain("generateContent");
      // Imagen generates through predict, the Gemini image models through generateContent.
      const methods = async (id: string) => {
        const read = await stage.google.models.get({ model: id });
        return (
          read.supportedActions ??
          (read as { supportedGenerationMethods?: string[] }).supportedGenerationMethods
        );
      };
      expect(await methods("imagen-4.0-generate-001")).toEqual(["predict"]);
      expect(await methods("gemini-nano-banana-2.1")).toContain("generateContent");
      await expect(stage.google.models.get({ model: "no-such-model" })).rejects.toMatchObject({
        status: 404,
      });
      const other = await stage.sluice.gateway.admin.createProject({
        name: "No keys",
        provider: "provider-c",
        testMode: true,
      });
      const keyless = await fetch(
        `${stage.sluice.url}/v1/provider-c/${other.project.id}/v1beta/models/gemini-2.5-flash`,
      );
      expect(keyless.status).toBe(404);
      expect(stage.fake.requests).toHaveLength(upstreamCalls);
    });

    it("serves models.list from the catalogue, on the SDK's v1 path and on v1beta", async () => {
      const upstreamCalls = stage.fake.requests.length;
      const names = [];
      for await (const model of await stage.google.models.list()) names.push(model.name);
      expect(names).toContain("models/gemini-2.5-flash");
      const v1beta = await fetch(
        `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models`,
      );
      expect(v1beta.status).toBe(200);
      expect(((await v1beta.json()) as { models: unknown[] }).models).toHaveLength(names.length);
      const unknown = await fetch(`${stage.sluice.url}/v1/provider-c/no-such-project/v1beta/models`);
      expect(unknown.status).toBe(404);
      expect(stage.fake.requests).toHaveLength(upstreamCalls);
    });

    it("forwards embedContent, the JSON-array stream and inline data", async () => {
      const embedding = await stage.google.models.embedContent({
        model: "gemini-embedding-001",
        contents: "Hi",
      });
      expect(embedding.embeddings?.[0]?.values?.length).toBe(3);
      const inline = {
        contents: [
          { parts: [{ inlineData: { mimeType: "image/png", data: "iVBORw0KGgo=" } }, { text: "what?" }] },
        ],
      };
      const response = await fetch(
        `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models/gemini-2.5-flash:streamGenerateContent`,
        {
          method: "POST",
          headers: {
            "x-goog-api-key": stage.project.bearer("provider-c"),
            "content-type": "application/json",
          },
          body: JSON.stringify(inline),
        },
      );
      const chunks = JSON.parse(await response.text()) as unknown[];
      expect(chunks.length).toBeGreaterThan(1);
      expect(stage.fake.last()!.json).toEqual(inline);
      expect(await rowFor(response.headers.get("x-request-id"))).toMatchObject({
        input_tokens: 11,
        output_tokens: 7,
      });
    });

    it("records the JSON-array stream (no ?alt=sse) as streamed, with the final chunk's tokens, as the SSE stream", async () => {
      const stream = await stage.google.models.generateContentStream({
        model: "gemini-2.5-flash",
        contents: "Hi",
      });
      for await (const _chunk of stream);
      const [sseRow] = (await stage.usageRows()).filter((row) => row.provider === "provider-c").slice(-1);
      const url = `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models/gemini-2.5-flash:streamGenerateContent`;
      const call = () =>
        fetch(url, {
          method: "POST",
          headers: {
            "x-goog-api-key": stage.project.bearer("provider-c"),
            "content-type": "application/json",
          },
          body: JSON.stringify({ contents: [{ parts: [{ text: "Hi" }] }] }),
        });
      const response = await call();
      expect(response.headers.get("content-type")).toMatch(/^application\/json/);
      const chunks = JSON.parse(await response.text()) as Array<{ usageMetadata: unknown }>;
      // Every chunk reports usage; only the last one's is the call's.
      expect(chunks.length).toBeGreaterThan(1);
      expect(chunks[0]?.usageMetadata).not.toEqual(chunks.at(-1)?.usageMetadata);
      const arrayRow = await rowFor(response.headers.get("x-request-id"));
      expect(sseRow?.streamed).toBe(1);
      expect(arrayRow).toMatchObject({
        streamed: 1,
        input_tokens: 11,
        output_tokens: 7,
        cached_tokens: 3,
        reasoning_tokens: 2,
        model: "gemini-2.5-flash",
      });
      for (const column of [
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "reasoning_tokens",
        "cost_usd",
      ] as const)
        expect(arrayRow[column]).toEqual(sseRow?.[column]);
      // The provider's error answer on the stream path is no stream.
      stage.fake.failNext(400);
      const refused = await call();
      expect(refused.status).toBe(400);
      await refused.text();
      expect(await rowFor(refused.headers.get("x-request-id"))).toMatchObject({ status: 400, streamed: 0 });
      // The method's colon percent-encoded names the same method.
      stage.fake.enqueueResponse({ status: 200, body: chunks });
      const encoded = await fetch(url.replace(":stream", "%3Astream"), {
        method: "POST",
        headers: { "x-goog-api-key": stage.project.bearer("provider-c"), "content-type": "application/json" },
        body: "{}",
      });
      await encoded.text();
      expect(await rowFor(encoded.headers.get("x-request-id"))).toMatchObject({
        streamed: 1,
        input_tokens: 11,
        output_tokens: 7,
      });
    });

    it("maps the SDK's v1 path onto the provider's v1 API", async () => {
      const response = await fetch(
        `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1/models/gemini-2.5-flash:generateContent`,
        {
          method: "POST",
          headers: {
            "x-goog-api-key": stage.project.bearer("provider-c"),
            "content-type": "application/json",
          },
          body: JSON.stringify({ contents: [{ parts: [{ text: "Hi" }] }] }),
        },
      );
      expect(response.status).toBe(200);
      expect(stage.fake.last()!.path).toBe("/c/v1/models/gemini-2.5-flash:generateContent");
    });

    it("maps the SDK's v1alpha path onto the provider's v1alpha API", async () => {
      const { GoogleGenAI } = await import("@google/genai");
      const alpha = new GoogleGenAI({
        apiKey: stage.project.bearer("provider-c"),
        httpOptions: {
          baseUrl: `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}`,
          apiVersion: "v1alpha",
        },
      });
      const answer = await alpha.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" });
      expect(answer.text).toBeTruthy();
      expect(stage.fake.last()!.path).toBe("/c/v1alpha/models/gemini-2.5-flash:generateContent");
      const before = new Set((await stage.usageRows()).map((entry) => entry.request_id));
      const stream = await alpha.models.generateContentStream({ model: "gemini-2.5-flash", contents: "Hi" });
      for await (const _chunk of stream);
      expect(stage.fake.last()!.path).toBe(
        "/c/v1alpha/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
      );
      // The stream's row is written as the gateway ends it, a moment after the SDK read its end.
      const streamed = async () => (await stage.usageRows()).filter((entry) => !before.has(entry.request_id));
      await vi.waitFor(async () => expect(await streamed()).toHaveLength(1), { timeout: 5000 });
      expect(await streamed()).toMatchObject([
        { provider: "provider-c", status: 200, streamed: 1, input_tokens: 11, output_tokens: 7 },
      ]);
      // Its model list and one model's entry are Sluice's own answers, as under v1beta and v1.
      const models = await alpha.models.list();
      expect(models.page.length).toBeGreaterThan(0);
      expect((await alpha.models.get({ model: "gemini-2.5-flash" })).name).toBe("models/gemini-2.5-flash");
      expect(stage.fake.last()!.path).toBe(
        "/c/v1alpha/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
      );
    });
  });

  describe("path and credential rules", () => {
    it("names the base URL's missing project id when the SDK's base URL leaves it out", async () => {
      const { OpenAI } = await import("openai");
      const { default: Anthropic } = await import("@anthropic-ai/sdk");
      const refusal = (error: unknown) => error as { status: number; message: string };
      const chat = await new OpenAI({
        baseURL: `${stage.sluice.url}/v1/provider-a`,
        apiKey: stage.project.bearer("provider-a"),
        maxRetries: 0,
      }).chat.completions
        .create({ model: "gpt-4o-mini", messages: [{ role: "user", content: "Hi" }] })
        .then(() => ({ status: 200, message: "" }), refusal);
      expect(chat.status).toBe(404);
      expect(chat.message).toContain('Project "chat" does not exist');
      expect(chat.message).toContain("did you mean /v1/provider-a/{projectId}/chat/completions?");
      const messages = await new Anthropic({
        baseURL: `${stage.sluice.url}/v1/provider-b`,
        apiKey: stage.project.bearer("provider-b"),
        maxRetries: 0,
      }).messages
        .create({ model: "claude-haiku-4-5", max_tokens: 8, messages: [{ role: "user", content: "Hi" }] })
        .then(() => ({ status: 200, message: "" }), refusal);
      expect(messages.status).toBe(404);
      expect(messages.message).toContain("PROJECT_NOT_FOUND");
      expect(messages.message).toContain("did you mean /v1/provider-b/{projectId}/v1/messages?");
      // A project id that is no provider path's start gets no such hint.
      const unknown = await fetch(
        `${stage.sluice.url}/v1/provider-a/prj_nosuchproject0000/chat/completions`,
        {
          method: "POST",
          headers: {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: "{}",
        },
      );
      const plain = ((await unknown.json()) as { error: { message: string } }).error.message;
      expect(plain).toBe('Project "prj_nosuchproject0000" does not exist');
      expect(stage.fake.requests).toHaveLength(0);
    });

    it.each(["..%2Fadmin", "%2e%2e/%2e%2e/admin", "chat/../../admin", "https:%2F%2Fevil.example", "a%5Cb"])(
      "refuses the provider path %s with 400 before any upstream call",
      async (path) => {
        const response = await fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/${path}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: "{}",
        });
        expect([400, 404]).toContain(response.status);
        expect(stage.fake.requests).toHaveLength(0);
      },
    );

    it("checks and forwards the path as sent: an encoded slash is 400, an encoded ? or # stays in the path", async () => {
      const post = (path: string) =>
        fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/${path}`, {
          method: "POST",
          headers: {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
            "content-type": "application/json",
          },
          body: "{}",
        });
      for (const path of ["chat%2Fcompletions", "chat%2fcompletions", "chat%5Ccompletions"]) {
        const response = await post(path);
        expect(response.status, path).toBe(400);
        expect(((await response.json()) as { error: { code: string } }).error.code).toBe("BAD_REQUEST");
      }
      expect(stage.fake.requests).toHaveLength(0);
      await (await post("files/a%3Fkey=INJECTED%23frag?purpose=x")).arrayBuffer();
      expect(stage.fake.last()!.path).toBe("/a/v1/files/a%3Fkey=INJECTED%23frag?purpose=x");
    });

    it("forwards HEAD and OPTIONS on provider A (SPEC: ANY) and answers HEAD on the model list", async () => {
      const url = `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/files/file-1`;
      const headers = { authorization: `Bearer ${stage.project.bearer("provider-a")}` };
      for (const method of ["HEAD", "OPTIONS"]) {
        const response = await fetch(url, { method, headers });
        await response.arrayBuffer();
        expect(stage.fake.last()).toMatchObject({ method, path: "/a/v1/files/file-1" });
        expect(stage.fake.last()!.headers.authorization).toBe(
          `Bearer ${stage.project.providerKeys["provider-a"]}`,
        );
      }
      const list = await fetch(`${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/models`, {
        method: "HEAD",
      });
      expect(list.status).toBe(200);
      expect(await list.text()).toBe("");
      expect(Number(list.headers.get("content-length"))).toBeGreaterThan(0);
    });

    it("forwards GET, PUT, PATCH and DELETE on provider A (SPEC: ANY) with their bodies and the injected key, and answers with the provider's status", async () => {
      const url = `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/vector_stores/vs_1/files/file-1`;
      for (const method of ["GET", "PUT", "PATCH", "DELETE"]) {
        stage.fake.clear();
        stage.fake.enqueueResponse({ status: 202, body: { method } });
        const body = method === "GET" || method === "DELETE" ? undefined : JSON.stringify({ method });
        const response = await fetch(url, {
          method,
          headers: {
            authorization: `Bearer ${stage.project.bearer("provider-a")}`,
            "x-ai-key": stage.project.partialKeys["provider-a"],
            ...(body === undefined ? {} : { "content-type": "application/json" }),
          },
          ...(body === undefined ? {} : { body }),
        });
        expect(response.status, method).toBe(202);
        expect(await response.json()).toEqual({ method });
        const upstream = stage.fake.last()!;
        expect(upstream).toMatchObject({ method, path: "/a/v1/vector_stores/vs_1/files/file-1" });
        expect(upstream.body.toString()).toBe(body ?? "");
        expect(upstream.headers.authorization).toBe(`Bearer ${stage.project.providerKeys["provider-a"]}`);
        expect(upstream.headers["x-ai-key"]).toBeUndefined();
      }
    });

    it("takes the project from the path over a different x-project-id on the proxies (SPEC: not needed there)", async () => {
      const other = await createTestProject(stage.sluice.gateway);
      const response = await postToA(JSON.stringify({ model: "gpt-4o-mini", messages: [] }), {
        headers: {
          authorization: `Bearer ${stage.project.bearer("provider-a")}`,
          "content-type": "application/json",
          "x-project-id": other.projectId,
        },
      });
      expect(response.status).toBe(200);
      expect(stage.fake.last()!.headers.authorization).toBe(
        `Bearer ${stage.project.providerKeys["provider-a"]}`,
      );
      expect(stage.fake.last()!.headers["x-project-id"]).toBeUndefined();
      expect((await rowFor(response.headers.get("x-request-id"))).project_id).toBe(stage.project.projectId);
    });

    it("never forwards a client's key= query parameter to provider C, which would stand beside the injected key", async () => {
      const response = await fetch(
        `${stage.sluice.url}/v1/provider-c/${stage.project.projectId}/v1beta/models/gemini-2.5-flash:generateContent?key=CLIENT-SECRET&alt=json&k%65y=AGAIN`,
        {
          method: "POST",
          headers: {
            "x-goog-api-key": stage.project.bearer("provider-c"),
            "content-type": "application/json",
          },
          body: JSON.stringify({ contents: [{ parts: [{ text: "Hi" }] }] }),
        },
      );
      expect(response.status).toBe(200);
      const upstream = stage.fake.last()!;
      expect(upstream.path).toBe("/c/v1beta/models/gemini-2.5-flash:generateContent?alt=json");
      expect(upstream.headers["x-goog-api-key"]).toBe(stage.project.providerKeys["provider-c"]);
    });

    it("refuses a key of another provider with 403 and never calls upstream", async () => {
      const response = await proxiedChat(
        stage.sluice.url,
        { projectId: stage.project.projectId, bearer: stage.project.bearer("provider-b") },
        { body: "{}" },
      );
      expect(response.status).toBe(403);
      expect(((await response.json()) as { error: { code: string } }).error.code).toBe("FORBIDDEN");
      expect(stage.fake.requests).toHaveLength(0);
    });
  });
});

import type OpenAI from "openai";
import { toFile } from "openai";
import { beforeEach, describe, expect, it } from "vitest";
import { type FakeUsage, fakeAudio } from "../fakes/fake-upstream-responses.js";
import { beforeTimer, timerFiredFirst } from "../support/before-timer.js";
import { useProxyStage } from "../support/proxy-stage.js";
import { sendRawHeaders } from "../support/raw-request.js";
import { googleGenAiV1Client, sdkClients } from "../support/sdk-clients.js";

/**
 * The token-consuming calls of the official SDKs beyond chat, messages and generateContent (which
 * proxy-sdk.test.ts covers), each made through Sluice against the fake upstream in the provider's
 * recorded answer shape: whether it goes through, and what its usage row records. A call whose answer
 * reports no tokens (a free call, one billed by duration, one that only starts a job) records none,
 * and its cost is unknown (null), never 0.
 */
describe("metering of the SDKs' other token-consuming calls", () => {
  const defaultUsage: FakeUsage = { input: 11, output: 7, cached: 3, reasoning: 2 };

  const stage = useProxyStage(sdkClients);

  beforeEach(() => {
    stage.fake.clear();
    stage.fake.setUsage({
      ...defaultUsage,
      toolUse: 0,
      audioInput: 0,
      cachedAudio: undefined,
      thinking: undefined,
      webSearches: undefined,
      compaction: undefined,
      advisor: undefined,
    } as FakeUsage);
  });

  const rowOf = (run: () => Promise<unknown>) => stage.rowAddedBy(run);

  const noTokens = {
    input_tokens: null,
    output_tokens: null,
    cached_tokens: null,
    reasoning_tokens: null,
    cost_usd: null,
  };
  /** A call the provider bills nothing for that reports no tokens: free, not of unknown cost. */
  const free = { ...noTokens, cost_usd: 0 };
  const audioFile = () => toFile(Buffer.from("RIFF\u0024\u0000\u0000\u0000WAVEfmt fake"), "hello.wav");

  describe("provider A", () => {
    // GPT-6 Sol: $2 in, $0.20 cached, $2.50 per 1M written to the cache, $10 out.
    it("prices the GPT-6 models' cache writes: chat JSON and streamed, and the Responses API, alike", async () => {
      const counts = { ...defaultUsage, input: 10_000, output: 1000, cached: 2000, reasoning: 0 };
      stage.fake.setUsage({ ...counts, cacheWrite: 6000 });
      const rows = [
        await rowOf(async () => {
          await stage.openai.chat.completions.create({
            model: "gpt-6-sol",
            messages: [{ role: "user", content: "hi" }],
          });
        }),
        await rowOf(async () => {
          const stream = await stage.openai.chat.completions.create({
            model: "gpt-6-sol",
            messages: [{ role: "user", content: "hi" }],
            stream: true,
            stream_options: { include_usage: true },
          });
          for await (const _chunk of stream);
        }),
        await rowOf(async () => {
          await stage.openai.responses.create({ model: "gpt-6-sol", input: "hi" });
        }),
      ];
      for (const row of rows)
        expect(row).toMatchObject({
          model: "gpt-6-sol",
          input_tokens: 10_000,
          cached_tokens: 2000,
          cost_usd: 0.0294,
        });
      // Without the write count (an older model's answer), the same call costs less, and is priced.
      stage.fake.setUsage({ ...counts, cacheWrite: undefined });
      const unwritten = await rowOf(async () => {
        await stage.openai.chat.completions.create({
          model: "gpt-6-sol",
          messages: [{ role: "user", content: "hi" }],
        });
      });
      expect(unwritten.cost_usd).toBe(0.0264);
    });

    it("records a gpt-4o transcription's tokens, JSON and streamed, with an unknown cost (the catalogue has no audio prices)", async () => {
      const json = await rowOf(async () => {
        const transcription = await stage.openai.audio.transcriptions.create({
          model: "gpt-4o-transcribe",
          file: await audioFile(),
        });
        expect(transcription.text).toBe("Hello from the fake upstream");
        expect(transcription.usage).toMatchObject({ type: "tokens", input_tokens: 11, output_tokens: 7 });
      });
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/a/v1/audio/transcriptions" });
      expect(stage.fake.last()!.headers["content-type"]).toMatch(/^multipart\/form-data; boundary=/);
      expect(json).toMatchObject({
        status: 200,
        outcome: "ok",
        streamed: 0,
        model: "gpt-4o-transcribe",
        input_tokens: 11,
        output_tokens: 7,
        cost_usd: null,
      });
      const streamed = await rowOf(async () => {
        const stream = await stage.openai.audio.transcriptions.create({
          model: "gpt-4o-mini-transcribe",
          file: await audioFile(),
          stream: true,
        });
        let text = "";
        for await (const event of stream) if (event.type === "transcript.text.done") text = event.text;
        expect(text).toBe("Hello from the fake upstream");
      });
      expect(streamed).toMatchObject({
        streamed: 1,
        model: "gpt-4o-mini-transcribe",
        input_tokens: 11,
        output_tokens: 7,
        cost_usd: null,
      });
    });

    it("records no tokens for whisper-1, which reports the audio's duration, for a translation, or for a text answer", async () => {
      for (const call of [
        async () => {
          const transcription = await stage.openai.audio.transcriptions.create({
            model: "whisper-1",
            file: await audioFile(),
          });
          expect(transcription.usage).toEqual({ type: "duration", seconds: 3 });
        },
        async () => stage.openai.audio.translations.create({ model: "whisper-1", file: await audioFile() }),
        async () => {
          const text = await stage.openai.audio.transcriptions.create({
            model: "gpt-4o-transcribe",
            file: await audioFile(),
            response_format: "text",
          });
          expect(text).toBe("Hello from the fake upstream\n");
        },
      ]) {
        const row = await rowOf(call);
        expect(row).toMatchObject({ status: 200, outcome: "ok", ...noTokens });
        expect(row.model).toMatch(/^(whisper-1|gpt-4o-transcribe)$/);
      }
    });

    it("records speech's tokens when it streams as SSE (speech.audio.done), none for an answer of audio bytes", async () => {
      const audio = await rowOf(async () => {
        const speech = await stage.openai.audio.speech.create({
          model: "gpt-4o-mini-tts",
          voice: "alloy",
          input: "Hi",
        });
        expect(Buffer.from(await speech.arrayBuffer()).equals(fakeAudio)).toBe(true);
      });
      expect(audio).toMatchObject({ model: "gpt-4o-mini-tts", streamed: 0, ...noTokens });
      const sse = await rowOf(async () => {
        const speech = await stage.openai.audio.speech.create({
          model: "gpt-4o-mini-tts",
          voice: "alloy",
          input: "Hi",
          stream_format: "sse",
        });
        expect(await speech.text()).toContain('"type":"speech.audio.done"');
      });
      expect(sse).toMatchObject({
        model: "gpt-4o-mini-tts",
        streamed: 1,
        input_tokens: 11,
        output_tokens: 7,
        cost_usd: null,
      });
    });

    it("forwards files.create's multipart form intact, records it as free, and refuses a form over the body cap with 413 before the provider sees it", async () => {
      const content = Buffer.from(Array.from({ length: 300_000 }, (_, index) => (index * 7) % 256));
      stage.fake.enqueueResponse({
        status: 200,
        body: {
          id: "file-abc123",
          object: "file",
          bytes: content.length,
          created_at: 1_763_000_000,
          filename: "batch.jsonl",
          purpose: "batch",
          status: "processed",
        },
      });
      const row = await rowOf(async () => {
        const file = await stage.openai.files.create({
          file: await toFile(content, "batch.jsonl"),
          purpose: "batch",
        });
        expect(file.id).toBe("file-abc123");
      });
      expect(row).toMatchObject({ status: 200, outcome: "ok", ...free });
      const sent = stage.fake.last()!;
      expect(sent).toMatchObject({ method: "POST", path: "/a/v1/files" });
      // One form, its boundary the one the content type names, whole: the file's bytes and the
      // purpose field between its delimiters, the closing delimiter at the end.
      const boundary = /^multipart\/form-data; boundary=(\S+)$/.exec(
        String(sent.headers["content-type"]),
      )?.[1];
      expect(boundary).toBeDefined();
      expect(Number(sent.headers["content-length"])).toBe(sent.body.length);
      expect(sent.body.subarray(0, boundary!.length + 4).toString("latin1")).toBe(`--${boundary}\r\n`);
      expect(sent.body.subarray(-boundary!.length - 8).toString("latin1")).toBe(`\r\n--${boundary}--\r\n`);
      expect(sent.body.includes(content)).toBe(true);
      expect(sent.body.toString("latin1")).toMatch(/name="purpose"\r\n\r\nbatch\r\n/);

      stage.fake.clear();
      const over = Buffer.alloc(21 * 1024 * 1024, 0x61);
      const refused = await rowOf(async () => {
        const error = await stage.openai.files
          .create({ file: await toFile(over, "big.jsonl"), purpose: "batch" })
          .catch((caught: unknown) => caught as InstanceType<typeof OpenAI.APIError>);
        expect(error).toMatchObject({ status: 413, message: "413 The request body exceeds 20971520 bytes" });
      });
      expect(refused).toMatchObject({ status: 413, error_code: "PAYLOAD_TOO_LARGE" });
      expect(stage.fake.requests).toHaveLength(0);
    });

    it("streams a binary answer (a file's content, speech's audio) chunk by chunk as the provider sends it, unchanged", async () => {
      const first = Buffer.from(Array.from({ length: 40_000 }, (_, index) => index % 251));
      const second = Buffer.from(Array.from({ length: 40_000 }, (_, index) => (index * 3) % 256));
      try {
        for (const [contentType, call] of [
          ["application/octet-stream", () => stage.openai.files.content("file-abc123")],
          [
            "audio/mpeg",
            () => stage.openai.audio.speech.create({ model: "gpt-4o-mini-tts", voice: "alloy", input: "Hi" }),
          ],
        ] as const) {
          // The provider sends its second part only once the client has its answer and a chunk of
          // the first: told by the order of events, not by a time. Gathered before it is passed on,
          // the answer would never come; the timer of 10 s turns that into a failure.
          let sendRest = () => {};
          const rest = new Promise<void>((resolve) => {
            sendRest = resolve;
          });
          stage.fake.setPlan(() => ({ restSentAfter: rest }));
          stage.fake.enqueueResponse({
            status: 200,
            parts: [first, second],
            headers: { "content-type": contentType },
          });
          const opened = await beforeTimer(
            call().then(async (answer) => {
              const reader = answer.body!.getReader();
              return { answer, reader, firstRead: await reader.read() };
            }),
            10_000,
          );
          sendRest();
          if (opened === timerFiredFirst)
            throw new Error("no chunk before the provider sent its second part");
          const { answer, reader, firstRead } = opened;
          expect(answer.headers.get("content-type")).toBe(contentType);
          const chunks: Uint8Array[] = firstRead.done ? [] : [firstRead.value];
          for (let read = await reader.read(); !read.done; read = await reader.read())
            chunks.push(read.value);
          expect(Buffer.concat(chunks).equals(Buffer.concat([first, second]))).toBe(true);
        }
      } finally {
        stage.fake.setPlan(null);
      }
    });

    it("records embeddings' tokens when the SDK asks for base64 (its default), also from an answer of many megabytes", async () => {
      const one = await rowOf(async () => {
        const answer = await stage.openai.embeddings.create({ model: "text-embedding-3-small", input: "Hi" });
        expect(answer.data[0]!.embedding).toHaveLength(3);
        expect(answer.data[0]!.embedding[0]).toBeCloseTo(0.0023064255, 8);
      });
      expect((stage.fake.last()!.json as { encoding_format?: string }).encoding_format).toBe("base64");
      expect(one).toMatchObject({ model: "text-embedding-3-small", input_tokens: 11, output_tokens: 0 });
      expect(one.cost_usd).toBeCloseTo((11 * 0.02) / 1e6, 12);
      // 600 vectors of 3072 floats: about 9.8 MB of base64, read from its tail.
      stage.fake.setUsage({ input: 600 });
      const many = await rowOf(async () => {
        const answer = await stage.openai.embeddings.create({
          model: "text-embedding-3-large",
          input: Array.from({ length: 600 }, () => "Hi"),
          dimensions: 3072,
        });
        expect(answer.data).toHaveLength(600);
        expect(answer.data[599]!.embedding).toHaveLength(3072);
      });
      expect(many).toMatchObject({ model: "text-embedding-3-large", input_tokens: 600, output_tokens: 0 });
      expect(many.cost_usd).toBeCloseTo((600 * 0.13) / 1e6, 12);
    });

    it("records a legacy completion's tokens, streamed (usage asked for by Sluice, its chunk kept back) and not", async () => {
      const plain = await rowOf(() =>
        stage.openai.completions.create({ model: "gpt-3.5-turbo-instruct", prompt: "Hi" }),
      );
      const streamed = await rowOf(async () => {
        const stream = await stage.openai.completions.create({
          model: "gpt-3.5-turbo-instruct",
          prompt: "Hi",
          stream: true,
        });
        let text = "";
        for await (const chunk of stream) {
          expect(chunk.usage ?? null).toBeNull();
          text += chunk.choices[0]?.text ?? "";
        }
        expect(text).toBe("Hello from the fake upstream");
      });
      expect((stage.fake.last()!.json as { stream_options?: unknown }).stream_options).toEqual({
        include_usage: true,
      });
      for (const [row, isStreamed] of [
        [plain, 0],
        [streamed, 1],
      ] as const)
        expect(row).toMatchObject({
          model: "gpt-3.5-turbo-instruct",
          streamed: isStreamed,
          input_tokens: 11,
          output_tokens: 7,
          cost_usd: null,
        });
    });

    /** A responses.compact answer as provider A sends it: 1,000 tokens in (200 cached), 100 out. */
    const compaction = (id: string) => ({
      id: `cmp_${id}`,
      object: "response.compaction",
      created_at: 1_763_000_000,
      output: [{ type: "compaction", id: `cmp_item_${id}`, encrypted_content: "gAAAA-fake" }],
      usage: {
        input_tokens: 1000,
        input_tokens_details: { cached_tokens: 200 },
        output_tokens: 100,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 1100,
      },
    });

    it("records responses.compact's tokens and cost, as any Responses API call's", async () => {
      stage.fake.enqueueResponse({ status: 200, body: compaction("fake1") });
      const row = await rowOf(() =>
        stage.openai.responses.compact({ model: "gpt-4.1", input: "A long conversation" }),
      );
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/a/v1/responses/compact" });
      expect(row).toMatchObject({
        model: "gpt-4.1",
        input_tokens: 1000,
        cached_tokens: 200,
        output_tokens: 100,
      });
      // gpt-4.1: $2 input, $0.50 cached, $8 output per 1M tokens.
      expect(row.cost_usd).toBeCloseTo((800 * 2 + 200 * 0.5 + 100 * 8) / 1e6, 12);
    });

    it("prices responses.compact at the model the body names after a long input, or after a repeated model, as the provider reads it", async () => {
      // gpt-4.1: $2 input, $0.50 cached, $8 output per 1M tokens.
      const cost = (800 * 2 + 200 * 0.5 + 100 * 8) / 1e6;
      // The conversation to compact is long by nature; the SDK writes the model where the app put it.
      const conversation = Array.from({ length: 400 }, (_, index) => ({
        role: index % 2 === 0 ? ("user" as const) : ("assistant" as const),
        content: `Turn ${index}: ${"a long exchange about the weather ".repeat(8)}`,
      }));
      stage.fake.enqueueResponse({ status: 200, body: compaction("fake2") });
      const long = await rowOf(() =>
        stage.openai.responses.compact({ input: conversation, model: "gpt-4.1" }),
      );
      expect(stage.fake.last()!.body.length).toBeGreaterThan(64 * 1024);
      expect(long).toMatchObject({ model: "gpt-4.1", input_tokens: 1000, output_tokens: 100 });
      expect(long.cost_usd).toBeCloseTo(cost, 12);
      // A body naming the model twice (or in a nested object first) runs the last top-level one.
      stage.fake.enqueueResponse({ status: 200, body: compaction("fake2") });
      const repeated = await rowOf(async () => {
        const response = await fetch(
          `${stage.sluice.url}/v1/provider-a/${stage.project.projectId}/responses/compact`,
          {
            method: "POST",
            headers: {
              authorization: `Bearer ${stage.project.bearer("provider-a")}`,
              "content-type": "application/json",
            },
            body: '{"metadata":{"model":"gpt-4.1-nano"},"model":"gpt-4.1-nano","input":"Hi","model":"gpt-4.1"}',
          },
        );
        expect(response.status).toBe(200);
        await response.arrayBuffer();
      });
      expect(repeated).toMatchObject({ model: "gpt-4.1", input_tokens: 1000 });
      expect(repeated.cost_usd).toBeCloseTo(cost, 12);
    });

    it("records a finished batch's tokens once, on a row of its own, from the polls that see it finished, with an unknown cost (no batch prices)", async () => {
      const batch = (status: string, usage: Record<string, unknown>) => ({
        id: "batch_fake2",
        object: "batch",
        endpoint: "/v1/chat/completions",
        model: "gpt-4o-mini-2024-07-18",
        errors: null,
        input_file_id: "file-fake1",
        completion_window: "24h",
        status,
        output_file_id: status === "completed" ? "file-fake2" : null,
        error_file_id: null,
        created_at: 1_763_000_000,
        in_progress_at: 1_763_000_010,
        expires_at: 1_763_086_400,
        completed_at: status === "completed" ? 1_763_000_600 : null,
        request_counts: { total: 2, completed: status === "completed" ? 2 : 1, failed: 0 },
        usage,
        metadata: null,
      });
      const counts = (input: number, cached: number, output: number) => ({
        input_tokens: input,
        input_tokens_details: { cached_tokens: cached },
        output_tokens: output,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: input + output,
      });
      const before = new Set((await stage.usageRows()).map((row) => row.request_id));
      stage.fake.enqueueResponse({ status: 200, body: batch("in_progress", counts(500, 100, 150)) });
      stage.fake.enqueueResponse({ status: 200, body: batch("completed", counts(1000, 200, 300)) });
      stage.fake.enqueueResponse({ status: 200, body: batch("completed", counts(1000, 200, 300)) });
      for (let poll = 0; poll < 3; poll++) await stage.openai.batches.retrieve("batch_fake2");
      expect(stage.fake.last()).toMatchObject({ method: "GET", path: "/a/v1/batches/batch_fake2" });
      const added = (await stage.usageRows()).filter((row) => !before.has(row.request_id));
      const runs = added.filter((row) => row.request_id.startsWith("bg_"));
      expect(added).toHaveLength(4);
      // A poll's own row: a read, free (the run's tokens are on its row).
      for (const poll of added.filter((row) => !row.request_id.startsWith("bg_")))
        expect(poll).toMatchObject({ status: 200, ...free });
      expect(runs).toHaveLength(1);
      expect(runs[0]).toMatchObject({
        status: 200,
        outcome: "ok",
        model: "gpt-4o-mini-2024-07-18",
        input_tokens: 1000,
        cached_tokens: 200,
        output_tokens: 300,
        reasoning_tokens: 0,
        cost_usd: null,
      });
    });

    it("records calls the provider bills nothing for as free: moderations, responses.inputTokens, conversations.create, realtime.clientSecrets, batches.create", async () => {
      const calls: Array<[string, () => Promise<unknown>, unknown]> = [
        ["moderations", () => stage.openai.moderations.create({ input: "Hi" }), undefined],
        [
          "responses/input_tokens",
          () => stage.openai.responses.inputTokens.count({ model: "gpt-4.1", input: "Hi" }),
          { object: "response.input_tokens", input_tokens: 42 },
        ],
        [
          "conversations",
          () =>
            stage.openai.conversations.create({ items: [{ type: "message", role: "user", content: "Hi" }] }),
          { id: "conv_fake1", object: "conversation", created_at: 1_763_000_000, metadata: {} },
        ],
        [
          "realtime/client_secrets",
          () =>
            stage.openai.realtime.clientSecrets.create({
              session: { type: "realtime", model: "gpt-realtime" },
            }),
          {
            value: "ek_fake",
            expires_at: 1_763_000_600,
            session: { type: "realtime", model: "gpt-realtime" },
          },
        ],
        [
          "batches",
          () =>
            stage.openai.batches.create({
              endpoint: "/v1/chat/completions",
              input_file_id: "file-fake1",
              completion_window: "24h",
            }),
          {
            id: "batch_fake1",
            object: "batch",
            endpoint: "/v1/chat/completions",
            input_file_id: "file-fake1",
            completion_window: "24h",
            status: "validating",
            created_at: 1_763_000_000,
            request_counts: { total: 0, completed: 0, failed: 0 },
          },
        ],
      ];
      for (const [path, call, answer] of calls) {
        if (answer !== undefined) stage.fake.enqueueResponse({ status: 200, body: answer });
        const row = await rowOf(call);
        expect(stage.fake.last(), path).toMatchObject({ method: "POST", path: `/a/v1/${path}` });
        expect(row, path).toMatchObject({ status: 200, outcome: "ok", ...free });
      }
    });
  });

  describe("provider B", () => {
    /** claude-sonnet-4-5: $3 input, $0.30 cache read, $15 output per 1M tokens; a web search $0.01. */
    const sonnetCost = (input: number, cached: number, output: number, searches = 0) =>
      ((input - cached) * 3 + cached * 0.3 + output * 15) / 1e6 + searches * 0.01;
    const ask = {
      model: "claude-sonnet-4-5",
      max_tokens: 1024,
      messages: [{ role: "user" as const, content: "Hi" }],
    };

    it("records the thinking tokens as reasoning and prices the web searches, streamed and not", async () => {
      stage.fake.setUsage({ thinking: 4, webSearches: 2 });
      const created = await rowOf(async () => {
        const message = await stage.anthropic.messages.create(ask);
        expect(message.usage).toMatchObject({
          output_tokens_details: { thinking_tokens: 4 },
          server_tool_use: { web_search_requests: 2 },
        });
      });
      const streamed = await rowOf(async () => {
        const message = await stage.anthropic.messages.stream(ask).finalMessage();
        expect(message.usage.server_tool_use?.web_search_requests).toBe(2);
      });
      for (const row of [created, streamed]) {
        expect(row).toMatchObject({
          input_tokens: 11,
          cached_tokens: 3,
          output_tokens: 7,
          reasoning_tokens: 4,
        });
        expect(row.cost_usd).toBeCloseTo(sonnetCost(11, 3, 7, 2), 12);
      }
      expect([created.streamed, streamed.streamed]).toEqual([0, 1]);
    });

    it("adds a compaction's tokens (beta), which the top-level usage leaves out, streamed and not", async () => {
      stage.fake.setUsage({ compaction: { input: 150_000, output: 3500 } });
      const params = { ...ask, betas: ["compact-2026-01-12"] };
      const created = await rowOf(() => stage.anthropic.beta.messages.create(params));
      expect(stage.fake.last()!.headers["anthropic-beta"]).toBe("compact-2026-01-12");
      const streamed = await rowOf(() => stage.anthropic.beta.messages.stream(params).finalMessage());
      for (const row of [created, streamed]) {
        expect(row).toMatchObject({ input_tokens: 150_011, cached_tokens: 3, output_tokens: 3507 });
        expect(row.cost_usd).toBeCloseTo(sonnetCost(150_011, 3, 3507), 12);
      }
    });

    it("prices a compaction and the answer each against the 200k long-context threshold on its own", async () => {
      // Anthropic's documented example: the compaction read 180k tokens, the answer 23k; together
      // over 200k, neither is on its own.
      stage.fake.setUsage({
        input: 23_000,
        output: 1000,
        cached: 0,
        reasoning: 0,
        compaction: { input: 180_000, output: 3500 },
      });
      const params = { ...ask, betas: ["compact-2026-01-12"] };
      const created = await rowOf(() => stage.anthropic.beta.messages.create(params));
      const streamed = await rowOf(() => stage.anthropic.beta.messages.stream(params).finalMessage());
      for (const row of [created, streamed]) {
        expect(row).toMatchObject({ input_tokens: 203_000, output_tokens: 4500 });
        expect(row.cost_usd).toBeCloseTo(sonnetCost(180_000, 0, 3500) + sonnetCost(23_000, 0, 1000), 12);
      }
    });

    it("prices a claude-sonnet-4-5 call over 200k input tokens (1M context window) at its long-context prices", async () => {
      stage.fake.setUsage({ input: 250_000, output: 1000, cached: 50_000, reasoning: 0 });
      const row = await rowOf(() =>
        stage.anthropic.beta.messages.create({ ...ask, betas: ["context-1m-2025-08-07"] }),
      );
      expect(row).toMatchObject({ input_tokens: 250_000, cached_tokens: 50_000, output_tokens: 1000 });
      // Over 200k, cache reads included: $6 input, $0.60 cache read, $22.50 output per 1M.
      expect(row.cost_usd).toBeCloseTo((200_000 * 6 + 50_000 * 0.6 + 1000 * 22.5) / 1e6, 12);
    });

    it("prices an advisor's sub-inference (beta) at the prices of the model it names, beside the executor's tokens", async () => {
      const advised = (model: string) =>
        rowOf(() =>
          stage.anthropic.beta.messages.create({ ...ask, model, betas: ["advisor-tool-2026-03-01"] }),
        );
      stage.fake.setUsage({ advisor: { model: "claude-opus-4-1", input: 30_000, output: 1600 } });
      const row = await advised("claude-haiku-4-5");
      // The row keeps the executor's tokens; its cost adds the advisor's: claude-haiku-4-5 $1 input,
      // $0.10 cache read, $5 output; claude-opus-4-1 $15 input, $75 output per 1M.
      expect(row).toMatchObject({ model: "claude-haiku-4-5", input_tokens: 11, output_tokens: 7 });
      expect(row.cost_usd).toBeCloseTo((8 * 1 + 3 * 0.1 + 7 * 5 + 30_000 * 15 + 1600 * 75) / 1e6, 12);
      const streamed = await rowOf(() =>
        stage.anthropic.beta.messages
          .stream({ ...ask, model: "claude-haiku-4-5", betas: ["advisor-tool-2026-03-01"] })
          .finalMessage(),
      );
      expect(streamed.cost_usd).toBe(row.cost_usd);
      // An advisor model the catalogue does not list: its prices, and so the call's cost, are unknown.
      stage.fake.setUsage({ advisor: { model: "claude-unlisted-9", input: 30_000, output: 1600 } });
      expect(await advised("claude-haiku-4-5")).toMatchObject({
        input_tokens: 11,
        output_tokens: 7,
        cost_usd: null,
      });
    });

    it("records messages.countTokens as free and a batch's creation with no tokens and an unknown cost (its run is not seen); a batch's retrieval (GET) is 405", async () => {
      const counted = await rowOf(async () => {
        const count = await stage.anthropic.messages.countTokens({
          model: "claude-sonnet-4-5",
          messages: [{ role: "user", content: "Hi" }],
        });
        expect(count.input_tokens).toBe(11);
      });
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/b/v1/messages/count_tokens" });
      expect(counted).toMatchObject({ status: 200, model: "claude-sonnet-4-5", ...free });
      stage.fake.enqueueResponse({
        status: 200,
        body: {
          id: "msgbatch_fake1",
          type: "message_batch",
          processing_status: "in_progress",
          request_counts: { processing: 1, succeeded: 0, errored: 0, canceled: 0, expired: 0 },
          ended_at: null,
          created_at: "2025-11-13T02:13:20Z",
          expires_at: "2025-11-14T02:13:20Z",
          archived_at: null,
          cancel_initiated_at: null,
          results_url: null,
        },
      });
      const created = await rowOf(() =>
        stage.anthropic.messages.batches.create({
          requests: [
            {
              custom_id: "first",
              params: {
                model: "claude-sonnet-4-5",
                max_tokens: 64,
                messages: [{ role: "user", content: "Hi" }],
              },
            },
          ],
        }),
      );
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/b/v1/messages/batches" });
      expect(created).toMatchObject({ status: 200, ...noTokens });
      const upstreamCalls = stage.fake.requests.length;
      await expect(stage.anthropic.messages.batches.retrieve("msgbatch_fake1")).rejects.toMatchObject({
        status: 405,
      });
      expect(stage.fake.requests).toHaveLength(upstreamCalls);
    });

    it("forwards a batch's cancel, a POST the SDK sends without a body or a content type, and records it as free", async () => {
      for (const cancel of [
        () => stage.anthropic.messages.batches.cancel("msgbatch_fake1"),
        () => stage.anthropic.beta.messages.batches.cancel("msgbatch_fake1"),
      ]) {
        stage.fake.clear();
        const row = await rowOf(async () => {
          const batch = await cancel();
          expect(batch.processing_status).toBe("canceling");
        });
        expect(stage.fake.last()).toMatchObject({
          method: "POST",
          path: "/b/v1/messages/batches/msgbatch_fake1/cancel",
        });
        expect(stage.fake.last()!.body).toHaveLength(0);
        expect(stage.fake.last()!.headers["content-type"]).toBeUndefined();
        expect(row).toMatchObject({ status: 200, outcome: "ok", ...free });
      }
      // Only a POST with no body is spared the content type: one with a body and none is still 415.
      stage.fake.clear();
      const untyped = await sendRawHeaders(
        `${stage.sluice.url}/v1/provider-b/${stage.project.projectId}/v1/messages/batches/msgbatch_fake1/cancel`,
        { "x-api-key": stage.project.bearer("provider-b"), "content-length": "2" },
        "{}",
      );
      expect(untyped.status).toBe(415);
      // Any other call keeps SPEC's rule: a POST without a content type is 415, bodiless or not.
      const bodiless = await sendRawHeaders(
        `${stage.sluice.url}/v1/provider-b/${stage.project.projectId}/v1/messages`,
        { "x-api-key": stage.project.bearer("provider-b"), "content-length": "0" },
        "",
      );
      expect(bodiless.status).toBe(415);
      expect(stage.fake.requests).toHaveLength(0);
    });
  });

  describe("provider C", () => {
    it("prices a prompt with audio at the model's audio prices, streamed, unstreamed and as an interaction", async () => {
      stage.fake.setUsage({ input: 1000, output: 20, cached: 0, reasoning: 0, audioInput: 900 });
      const audio = { inlineData: { mimeType: "audio/mp3", data: fakeAudio.toString("base64") } };
      const contents = [{ role: "user", parts: [{ text: "What is said?" }, audio] }];
      const calls = () => [
        () => stage.google.models.generateContent({ model: "gemini-2.5-flash", contents }),
        async () => {
          for await (const _chunk of await stage.google.models.generateContentStream({
            model: "gemini-2.5-flash",
            contents,
          }));
        },
        () => stage.google.interactions.create({ model: "gemini-2.5-flash", input: "What is said?" }),
      ];
      const rows = [];
      for (const call of calls()) rows.push(await rowOf(call));
      // gemini-2.5-flash: $0.30 text, $1 audio, $2.50 output per 1M.
      for (const row of rows) {
        expect(row).toMatchObject({ model: "gemini-2.5-flash", input_tokens: 1000, output_tokens: 20 });
        expect(row.cost_usd).toBeCloseTo((100 * 0.3 + 900 * 1 + 20 * 2.5) / 1e6, 12);
      }
      // Cached audio at $0.25, cached text at $0.075, as the breakdown of the cached part says.
      stage.fake.setUsage({ cached: 600, audioInput: 900, cachedAudio: 500 });
      const cachedRows = [];
      for (const call of calls()) cachedRows.push(await rowOf(call));
      for (const row of cachedRows) {
        expect(row).toMatchObject({ input_tokens: 1000, cached_tokens: 600 });
        expect(row.cost_usd).toBeCloseTo((400 * 1 + 500 * 0.25 + 100 * 0.075 + 20 * 2.5) / 1e6, 12);
      }
      // The same prompt in text alone costs the text prices.
      stage.fake.setUsage({ cached: 0, audioInput: 0, cachedAudio: undefined } as Partial<FakeUsage>);
      const text = await rowOf(() =>
        stage.google.models.generateContent({ model: "gemini-2.5-flash", contents: "Hi" }),
      );
      expect(text.cost_usd).toBeCloseTo((1000 * 0.3 + 20 * 2.5) / 1e6, 12);
    });

    it("prices a gemini-2.5-pro prompt over 200k tokens at its long-context prices, streamed and not", async () => {
      stage.fake.setUsage({ input: 300_000, output: 1000, cached: 100_000, reasoning: 400 });
      const rows = [
        await rowOf(() =>
          stage.google.models.generateContent({ model: "gemini-2.5-pro", contents: "A long book" }),
        ),
        await rowOf(async () => {
          for await (const _chunk of await stage.google.models.generateContentStream({
            model: "gemini-2.5-pro",
            contents: "A long book",
          }));
        }),
      ];
      for (const row of rows) {
        expect(row).toMatchObject({ input_tokens: 300_000, cached_tokens: 100_000, output_tokens: 1000 });
        // Over 200k: $2.50 input, $0.625 cached, $15 output per 1M (not $1.25, $0.31 and $10).
        expect(row.cost_usd).toBeCloseTo((200_000 * 2.5 + 100_000 * 0.625 + 1000 * 15) / 1e6, 12);
      }
    });

    it("records countTokens as free, and embeddings (batchEmbedContents), whose answers report no usage, with an unknown cost", async () => {
      const counted = await rowOf(async () => {
        const count = await stage.google.models.countTokens({ model: "gemini-2.5-flash", contents: "Hi" });
        expect(count.totalTokens).toBe(11);
      });
      expect(stage.fake.last()).toMatchObject({
        method: "POST",
        path: "/c/v1/models/gemini-2.5-flash:countTokens",
      });
      expect(counted).toMatchObject({ status: 200, model: "gemini-2.5-flash", ...free });
      const embedded = await rowOf(() =>
        stage.google.models.embedContent({ model: "gemini-embedding-001", contents: ["Hi", "there"] }),
      );
      expect(stage.fake.last()!.path).toBe("/c/v1/models/gemini-embedding-001:batchEmbedContents");
      expect(embedded).toMatchObject({ status: 200, model: "gemini-embedding-001", ...noTokens });
    });

    it("records no tokens for caches.create (its size is no use of tokens), and answers caches.list (GET) 405", async () => {
      const row = await rowOf(async () => {
        const cache = await stage.google.caches.create({
          model: "gemini-2.5-flash",
          config: { contents: "A long document", ttl: "3600s" },
        });
        expect(cache.usageMetadata?.totalTokenCount).toBe(11);
      });
      expect(stage.fake.last()).toMatchObject({ method: "POST", path: "/c/v1/cachedContents" });
      expect(row).toMatchObject({ status: 200, ...noTokens });
      await expect(stage.google.caches.list()).rejects.toThrow(/405|METHOD_NOT_ALLOWED/);
    });

    it("records no tokens for the jobs that answer an operation (batches.create, generateVideos), whose polls (GET) are 405", async () => {
      const batch = await rowOf(() =>
        stage.google.batches.create({
          model: "gemini-2.5-flash",
          src: [{ contents: [{ role: "user", parts: [{ text: "Hi" }] }] }],
        }),
      );
      expect(stage.fake.last()).toMatchObject({
        method: "POST",
        path: "/c/v1/models/gemini-2.5-flash:batchGenerateContent",
      });
      expect(batch).toMatchObject({ status: 200, model: "gemini-2.5-flash", ...noTokens });
      await expect(stage.google.batches.get({ name: "batches/fake-batch-1" })).rejects.toThrow(
        /405|METHOD_NOT_ALLOWED/,
      );
      // @google/genai 3.x calls generateVideos on Vertex AI only; 1.x and 2.x call it on the Gemini API.
      const video = await rowOf(() =>
        googleGenAiV1Client(stage.sluice, stage.project).models.generateVideos({
          model: "veo-3.0-generate-001",
          prompt: "A cat on a sluice gate",
        }),
      );
      expect(stage.fake.last()!.path).toBe("/c/v1beta/models/veo-3.0-generate-001:predictLongRunning");
      expect(video).toMatchObject({ status: 200, model: "veo-3.0-generate-001", ...noTokens });
    });
  });
});

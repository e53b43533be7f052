/**
 * Recorded-shape payloads of the three providers' APIs (OpenAI-style A, Anthropic-style B,
 * Gemini-style C), built per request from the programmed text and usage.
 */
export interface FakeUsage {
  input: number;
  output: number;
  cached: number;
  reasoning: number;
  /** Provider C: what built-in tools brought into the prompt (`toolUsePromptTokenCount`); left out when 0. */
  toolUse?: number;
  /** Provider C: the part of the prompt that is audio (`promptTokensDetails`' AUDIO entry); none when unset. */
  audioInput?: number;
  /**
   * Provider C: the part of the cached prompt that is audio (`cacheTokensDetails`' AUDIO entry, the
   * Interactions API's `cached_tokens_by_modality`); no breakdown of the cached part when unset.
   */
  cachedAudio?: number;
  /** Provider B: output tokens spent thinking (`output_tokens_details.thinking_tokens`); left out when unset. */
  thinking?: number;
  /** Provider B: searches its web search tool ran (`server_tool_use.web_search_requests`); left out when unset. */
  webSearches?: number;
  /**
   * Provider B (beta): the sampling iterations besides the answer's (`usage.iterations`): a compaction
   * (the same model summarising the context, left out of the top-level counts) or an advisor's
   * sub-inference (another model); no `iterations` when neither is set.
   */
  compaction?: { input: number; output: number };
  advisor?: { model: string; input: number; output: number };
  /** Provider A: input written to the prompt cache (`cache_write_tokens`, GPT-6 models); left out when unset. */
  cacheWrite?: number;
}

export const tinyPng = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==",
  "base64",
);

const created = 1_763_000_000;

export const providerA = {
  chat(model: string, text: string, usage: FakeUsage) {
    return {
      id: "chatcmpl-fake123",
      object: "chat.completion",
      created,
      model,
      choices: [
        {
          index: 0,
          message: { role: "assistant", content: text, refusal: null, annotations: [] },
          logprobs: null,
          finish_reason: "stop",
        },
      ],
      usage: usageA(usage),
      service_tier: "default",
      system_fingerprint: "fp_fake",
    };
  },
  chunks(model: string, text: string, usage: FakeUsage, includeUsage: boolean): string[] {
    const base = {
      id: "chatcmpl-fake123",
      object: "chat.completion.chunk",
      created,
      model,
      service_tier: "default",
      system_fingerprint: "fp_fake",
    };
    const pieces = splitText(text);
    const events = [
      {
        ...base,
        choices: [
          {
            index: 0,
            delta: { role: "assistant", content: "", refusal: null },
            logprobs: null,
            finish_reason: null,
          },
        ],
        ...(includeUsage ? { usage: null } : {}),
      },
      ...pieces.map((piece) => ({
        ...base,
        choices: [{ index: 0, delta: { content: piece }, logprobs: null, finish_reason: null }],
        ...(includeUsage ? { usage: null } : {}),
      })),
      {
        ...base,
        choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "stop" }],
        ...(includeUsage ? { usage: null } : {}),
      },
    ];
    if (includeUsage) events.push({ ...base, choices: [], usage: usageA(usage) } as never);
    return [...events.map((event) => `data: ${JSON.stringify(event)}\n\n`), "data: [DONE]\n\n"];
  },
  /**
   * An embeddings answer: `dimensions` floats per input, as a JSON array, or with `base64` (what the
   * SDK asks for unless told otherwise) as the base64 of their little-endian float32 bytes.
   */
  embeddings(model: string, inputs: number, usage: FakeUsage, base64 = false, dimensions = 3) {
    const floats = Array.from(
      { length: dimensions },
      (_, index) => [0.0023064255, -0.009327292, 0.015797347][index % 3] as number,
    );
    const vector = base64 ? Buffer.from(new Float32Array(floats).buffer).toString("base64") : floats;
    return {
      object: "list",
      data: Array.from({ length: inputs }, (_, index) => ({
        object: "embedding",
        index,
        embedding: vector,
      })),
      model,
      usage: { prompt_tokens: usage.input, total_tokens: usage.input },
    };
  },
  models() {
    return { object: "list", data: [{ id: "gpt-4o-mini", object: "model", created, owned_by: "system" }] };
  },
  /** One model (`GET models/{id}`, the SDK's `models.retrieve`), as the provider describes it. */
  model(id: string) {
    return { id, object: "model", created, owned_by: "system" };
  },
  /** A File object (`POST files`, `GET files/{id}`), for a file of `bytes` bytes. */
  file(id: string, filename: string, bytes: number, purpose: string) {
    return {
      id,
      object: "file",
      bytes,
      created_at: created,
      filename,
      purpose,
      status: "processed",
      expires_at: null,
    };
  },
  /** What `GET files` (the SDK's `files.list`) answers: a cursor page of File objects. */
  fileList(files: Array<{ id: string }>) {
    return {
      object: "list",
      data: files,
      first_id: files[0]?.id ?? null,
      last_id: files.at(-1)?.id ?? null,
      has_more: false,
    };
  },
  /**
   * An Upload object (the Uploads API: `POST uploads`, `uploads/{id}/complete`): `pending` while its
   * parts arrive, `completed` with the File it became.
   */
  upload(id: string, request: { bytes?: unknown; filename?: unknown; purpose?: unknown }, file?: unknown) {
    return {
      id,
      object: "upload",
      bytes: request.bytes,
      created_at: created,
      filename: request.filename,
      purpose: request.purpose,
      status: file === undefined ? "pending" : "completed",
      expires_at: created + 3600,
      ...(file === undefined ? {} : { file }),
    };
  },
  /** What `POST uploads/{id}/parts` (a multipart form of one `data` part) answers. */
  uploadPart(id: string, uploadId: string) {
    return { id, object: "upload.part", created_at: created, upload_id: uploadId };
  },
  /** What `DELETE files/{id}` (the SDK's `files.delete`) answers. */
  fileDeleted(id: string) {
    return { id, object: "file", deleted: true };
  },
  /** A legacy completion (`POST completions`, gpt-3.5-turbo-instruct): chat's usage counts, no details. */
  completion(model: string, text: string, usage: FakeUsage) {
    return {
      id: "cmpl-fake123",
      object: "text_completion",
      created,
      model,
      choices: [{ text, index: 0, logprobs: null, finish_reason: "stop" }],
      usage: {
        prompt_tokens: usage.input,
        completion_tokens: usage.output,
        total_tokens: usage.input + usage.output,
      },
    };
  },
  /** The same streamed: a chunk per piece, then (asked for) a usage chunk without choices. */
  completionChunks(model: string, text: string, usage: FakeUsage, includeUsage: boolean): string[] {
    const base = { id: "cmpl-fake123", object: "text_completion", created, model };
    const pieces = splitText(text);
    const events: unknown[] = pieces.map((piece, index) => ({
      ...base,
      choices: [
        { text: piece, index: 0, logprobs: null, finish_reason: index === pieces.length - 1 ? "stop" : null },
      ],
      ...(includeUsage ? { usage: null } : {}),
    }));
    if (includeUsage)
      events.push({ ...base, choices: [], usage: providerA.completion(model, "", usage).usage });
    return [...events.map((event) => `data: ${JSON.stringify(event)}\n\n`), "data: [DONE]\n\n"];
  },
  /**
   * `audio/transcriptions` as the API answers it: the gpt-4o transcribe models bill tokens and report
   * `usage: {type: "tokens", input_tokens, input_token_details: {text_tokens, audio_tokens}, …}`
   * (the prompt's text and the audio; `input_token_details`, unlike the chat APIs' `…tokens_details`);
   * whisper-1 bills the audio's duration and reports `usage: {type: "duration", seconds}`. Asked for
   * `text`, either answers the text alone.
   */
  transcription(model: string, text: string, usage: FakeUsage) {
    return {
      text,
      usage: model.startsWith("whisper") ? { type: "duration", seconds: 3 } : transcriptionUsage(usage),
    };
  },
  /**
   * A transcription streamed (`stream: true`, gpt-4o transcribe models only): `transcript.text.delta`
   * events, then `transcript.text.done` with the whole text and the usage; `data:` lines only.
   */
  transcriptionEvents(text: string, usage: FakeUsage): string[] {
    return [
      ...splitText(text).map((delta) => ({ type: "transcript.text.delta", delta })),
      { type: "transcript.text.done", text, usage: transcriptionUsage(usage) },
    ].map((event) => `data: ${JSON.stringify(event)}\n\n`);
  },
  /** `audio/speech` with `stream_format: "sse"`: audio deltas (base64), then `speech.audio.done` with the usage. */
  speechEvents(usage: FakeUsage): string[] {
    return [
      { type: "speech.audio.delta", audio: fakeAudio.toString("base64") },
      { type: "speech.audio.delta", audio: fakeAudio.toString("base64") },
      {
        type: "speech.audio.done",
        usage: {
          input_tokens: usage.input,
          output_tokens: usage.output,
          total_tokens: usage.input + usage.output,
        },
      },
    ].map((event) => `data: ${JSON.stringify(event)}\n\n`);
  },
  /** `moderations`: free, and its answer reports no usage. */
  moderation(model: string) {
    return {
      id: "modr-fake123",
      model,
      results: [
        {
          flagged: false,
          categories: { harassment: false, violence: false },
          category_scores: { harassment: 0.0001, violence: 0.0002 },
          category_applied_input_types: { harassment: ["text"], violence: ["text"] },
        },
      ],
    };
  },
  /**
   * `images/generations` as the API answers it: gpt-image models return base64 and name the size and
   * quality they used (also for `auto`) with token usage; dall-e models return a URL unless asked for
   * `b64_json`, with dall-e-3's revised prompt.
   */
  /** A GPT Image model's answer: `count` images (`b64`, a tiny PNG unless given) and the usage it reports. */
  gptImage(answer: {
    count: number;
    quality: string;
    size: string;
    usage: Record<string, unknown>;
    b64?: string;
  }) {
    return {
      created,
      background: "opaque",
      data: Array.from({ length: answer.count }, () => ({
        b64_json: answer.b64 ?? tinyPng.toString("base64"),
      })),
      output_format: "png",
      quality: answer.quality,
      size: answer.size,
      usage: answer.usage,
    };
  },
  images(request: Record<string, unknown>) {
    const model = typeof request.model === "string" ? request.model : "dall-e-2";
    const count = typeof request.n === "number" ? request.n : 1;
    const chosen = (value: unknown, fallback: string) =>
      typeof value === "string" && value !== "auto" ? value : fallback;
    if (model.startsWith("gpt-image")) {
      return providerA.gptImage({
        count,
        quality: chosen(request.quality, "medium"),
        size: chosen(request.size, "1024x1024"),
        usage: {
          input_tokens: 10,
          input_tokens_details: { image_tokens: 0, text_tokens: 10 },
          output_tokens: 100,
          total_tokens: 110,
        },
      });
    }
    const url = request.response_format !== "b64_json";
    return {
      created,
      data: Array.from({ length: count }, (_, index) => ({
        ...(model === "dall-e-3" ? { revised_prompt: `A revised prompt ${index + 1}` } : {}),
        ...(url
          ? { url: `https://images.example.com/img-${index + 1}.png?se=2026-11-02&sig=fake%2Bsig%3D` }
          : { b64_json: tinyPng.toString("base64") }),
      })),
    };
  },
};

/** A few bytes standing for an MP3 (speech answers are binary, or base64 in the SSE deltas). */
export const fakeAudio = Buffer.from(
  "ID3\u0004\u0000\u0000\u0000\u0000\u0000\u0000fake-mp3-frames",
  "latin1",
);

function transcriptionUsage(usage: FakeUsage) {
  return {
    type: "tokens",
    input_tokens: usage.input,
    input_token_details: { text_tokens: 0, audio_tokens: usage.input },
    output_tokens: usage.output,
    total_tokens: usage.input + usage.output,
  };
}

function usageA(usage: FakeUsage) {
  return {
    prompt_tokens: usage.input,
    completion_tokens: usage.output,
    total_tokens: usage.input + usage.output,
    prompt_tokens_details: {
      cached_tokens: usage.cached,
      audio_tokens: 0,
      ...(usage.cacheWrite === undefined ? {} : { cache_write_tokens: usage.cacheWrite }),
    },
    completion_tokens_details: {
      reasoning_tokens: usage.reasoning,
      audio_tokens: 0,
      accepted_prediction_tokens: 0,
      rejected_prediction_tokens: 0,
    },
  };
}

export const providerB = {
  /** A Message Batch object, as the Message Batches API answers one (created, retrieved, cancelled). */
  batch(id: string, status: "in_progress" | "canceling" | "ended" = "in_progress") {
    return {
      id,
      type: "message_batch",
      processing_status: status,
      request_counts: {
        processing: status === "ended" ? 0 : 1,
        succeeded: 0,
        errored: 0,
        canceled: 0,
        expired: 0,
      },
      ended_at: status === "ended" ? "2025-11-13T02:20:00Z" : null,
      created_at: "2025-11-13T02:13:20Z",
      expires_at: "2025-11-14T02:13:20Z",
      archived_at: null,
      cancel_initiated_at: status === "in_progress" ? null : "2025-11-13T02:14:00Z",
      results_url: status === "ended" ? `https://api.anthropic.com/v1/messages/batches/${id}/results` : null,
    };
  },
  message(model: string, content: unknown[], usage: FakeUsage, stopReason = "end_turn") {
    return {
      id: "msg_fake123",
      type: "message",
      role: "assistant",
      model,
      content,
      stop_reason: stopReason,
      stop_sequence: null,
      usage: { ...usageB(usage, usage.output), ...usageDetailsB(usage), service_tier: "standard" },
    };
  },
  events(model: string, text: string, usage: FakeUsage): string[] {
    const event = (name: string, data: unknown) => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
    return [
      event("message_start", {
        type: "message_start",
        message: {
          id: "msg_fake123",
          type: "message",
          role: "assistant",
          model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { ...usageB(usage, 1), service_tier: "standard" },
        },
      }),
      event("content_block_start", {
        type: "content_block_start",
        index: 0,
        content_block: { type: "text", text: "" },
      }),
      event("ping", { type: "ping" }),
      ...splitText(text).map((piece) =>
        event("content_block_delta", {
          type: "content_block_delta",
          index: 0,
          delta: { type: "text_delta", text: piece },
        }),
      ),
      event("content_block_stop", { type: "content_block_stop", index: 0 }),
      event("message_delta", {
        type: "message_delta",
        delta: { stop_reason: "end_turn", stop_sequence: null },
        // Cumulative counts (the API's current shape), with the details the answer has.
        usage: {
          input_tokens: usage.input - usage.cached,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: usage.cached,
          output_tokens: usage.output,
          ...usageDetailsB(usage),
        },
      }),
      event("message_stop", { type: "message_stop" }),
    ];
  },
  models() {
    return {
      data: [
        {
          type: "model",
          id: "claude-sonnet-4-5-20250929",
          display_name: "Claude Sonnet 4.5",
          created_at: "2025-09-29T00:00:00Z",
        },
      ],
      has_more: false,
      first_id: "claude-sonnet-4-5-20250929",
      last_id: "claude-sonnet-4-5-20250929",
    };
  },
};

export const providerC = {
  /** A Gemini image model's generateContent answer: one PNG, with the usageMetadata it reports. */
  imageResponse(model: string, usageMetadata: Record<string, unknown>) {
    return {
      candidates: [
        {
          content: {
            role: "model",
            parts: [{ inlineData: { mimeType: "image/png", data: tinyPng.toString("base64") } }],
          },
          finishReason: "STOP",
          index: 0,
        },
      ],
      usageMetadata,
      modelVersion: model,
    };
  },
  response(model: string, text: string, usage: FakeUsage) {
    return {
      candidates: [{ content: { parts: [{ text }], role: "model" }, finishReason: "STOP", index: 0 }],
      usageMetadata: usageC(usage),
      modelVersion: model,
      responseId: "fake-response-id",
    };
  },
  chunks(model: string, text: string, usage: FakeUsage): unknown[] {
    const pieces = splitText(text);
    return pieces.map((piece, index) => ({
      candidates: [
        {
          content: { parts: [{ text: piece }], role: "model" },
          ...(index === pieces.length - 1 ? { finishReason: "STOP" } : {}),
          index: 0,
        },
      ],
      usageMetadata:
        index === pieces.length - 1
          ? usageC(usage)
          : { promptTokenCount: usage.input, totalTokenCount: usage.input },
      modelVersion: model,
      responseId: "fake-response-id",
    }));
  },
  /**
   * An Interactions API answer (`POST …/interactions`): the top-level fields, `usage` before the
   * output as in Google's documented answer, a thought (its signature) when the model thought, then
   * the text. The output is in the shape of the SDK that addresses the API version: `outputs` (text
   * and thought blocks) on v1beta, as `@google/genai` 1.x and 2.x read it, `steps` (a `thought` step,
   * a `model_output` step holding the text) on v1, as 3.x reads it (`steps: true`). A background run
   * answers at once, `in_progress`, with no output and no usage yet. An agent's run names the agent.
   */
  interaction(
    request: Record<string, unknown>,
    text: string,
    usage: FakeUsage,
    status = "completed",
    steps = false,
  ) {
    const background = request.background === true && status === "completed";
    const output = steps
      ? { steps: interactionSteps(text, usage) }
      : { outputs: interactionOutputs(text, usage) };
    return {
      ...interactionFields(request, background ? "in_progress" : status),
      ...(background ? {} : { usage: usageInteractions(usage), ...output }),
    };
  },
  /**
   * The same answer streamed (`stream: true`), as Google sends it: each event named (`event:`) by its
   * `event_type`, which its data repeats last. On v1beta: `interaction.start`, a status update, each
   * content block's `content.start`, `content.delta`s and `content.stop`, then
   * `interaction.complete`, whose interaction carries the usage and no outputs. On v1 (`steps: true`),
   * the step-based stream: `interaction.created`, a status update, each step's `step.start`,
   * `step.delta`s and `step.stop`, then `interaction.completed` with the usage and no steps.
   */
  interactionEvents(
    request: Record<string, unknown>,
    text: string,
    usage: FakeUsage,
    steps = false,
  ): string[] {
    const named = (type: string, data: Record<string, unknown>) =>
      `event: ${type}\ndata: ${JSON.stringify({ ...data, event_type: type })}\n\n`;
    const blocks: Array<{ start: unknown; step: unknown; deltas: unknown[] }> = [];
    if (usage.reasoning > 0)
      blocks.push({
        start: { type: "thought" },
        step: { type: "thought" },
        deltas: [{ type: "thought_signature", signature: fakeThoughtSignature }],
      });
    blocks.push({
      start: { type: "text", text: "" },
      step: { type: "model_output" },
      deltas: splitText(text).map((piece) => ({ type: "text", text: piece })),
    });
    const [start, status, open, delta, stop, complete] = steps
      ? [
          "interaction.created",
          "interaction.status_update",
          "step.start",
          "step.delta",
          "step.stop",
          "interaction.completed",
        ]
      : [
          "interaction.start",
          "interaction.status_update",
          "content.start",
          "content.delta",
          "content.stop",
          "interaction.complete",
        ];
    return [
      named(start, { interaction: interactionFields(request, "in_progress") }),
      named(status, { interaction_id: fakeInteractionId, status: "in_progress" }),
      ...blocks.flatMap((block, index) => [
        named(open, steps ? { index, step: block.step } : { index, content: block.start }),
        ...block.deltas.map((piece) => named(delta, { index, delta: piece })),
        named(stop, { index }),
      ]),
      named(complete, {
        interaction: {
          ...interactionFields(request, "completed"),
          usage: usageInteractions(usage),
          ...(steps ? { steps: [] } : { outputs: [] }),
        },
      }),
    ];
  },
  embedding() {
    return { embedding: { values: [0.013168523, -0.008711934, -0.046782676] } };
  },
  /** `models/{model}:countTokens`: free; the count is the answer itself, no usageMetadata. */
  tokenCount(usage: FakeUsage) {
    return {
      totalTokens: usage.input,
      promptTokensDetails: [{ modality: "TEXT", tokenCount: usage.input }],
    };
  },
  /**
   * `cachedContents` (`caches.create`): the cache, with its size as `usageMetadata.totalTokenCount`
   * alone (billed by the hour it is stored, and at the cached price in each call that uses it).
   */
  cachedContent(model: string, usage: FakeUsage) {
    return {
      name: "cachedContents/fake-cache-1",
      model: `models/${model}`,
      createTime: "2025-11-13T02:13:20Z",
      updateTime: "2025-11-13T02:13:20Z",
      expireTime: "2025-11-13T03:13:20Z",
      displayName: "",
      usageMetadata: { totalTokenCount: usage.input },
    };
  },
  /**
   * `auth_tokens` (`authTokens.create`): an ephemeral token for the Live API, its `name` the token a
   * client connects with, with the fields the request set. Free: no usage.
   */
  authToken(request: Record<string, unknown>) {
    return {
      name: "auth_tokens/fake-ephemeral-token-1",
      uses: typeof request.uses === "number" ? request.uses : 1,
      expireTime: typeof request.expireTime === "string" ? request.expireTime : "2025-11-13T02:43:20Z",
      newSessionExpireTime:
        typeof request.newSessionExpireTime === "string"
          ? request.newSessionExpireTime
          : "2025-11-13T02:14:20Z",
    };
  },
  /**
   * A long-running operation, as `:batchGenerateContent` (a batch) and `:predictLongRunning` (Veo)
   * answer at once: its name and metadata, no result and no usage yet (they come to GET polls).
   */
  operation(name: string, metadata: Record<string, unknown> = {}) {
    return { name, metadata };
  },
  predictions(count: number) {
    return {
      predictions: Array.from({ length: count }, () => ({
        bytesBase64Encoded: tinyPng.toString("base64"),
        mimeType: "image/png",
      })),
    };
  },
  models() {
    return {
      models: [
        {
          name: "models/gemini-2.5-flash",
          displayName: "Gemini 2.5 Flash",
          supportedGenerationMethods: ["generateContent"],
        },
      ],
    };
  },
};

/** Provider B's counts: its input leaves out the cache reads (and writes), which it reports beside it. */
function usageB(usage: FakeUsage, output: number) {
  return {
    input_tokens: usage.input - usage.cached,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: usage.cached,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: output,
  };
}

/**
 * What provider B reports beside its counts, in the final usage (a JSON answer's, a stream's last
 * `message_delta`): the thinking part of the output, the server tools' requests, and (beta) the
 * sampling iterations, each only when the fake is programmed with it.
 */
function usageDetailsB(usage: FakeUsage) {
  const iteration = (type: string, input: number, output: number, fields: object = {}) => ({
    type,
    input_tokens: input,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: null,
    output_tokens: output,
    ...fields,
  });
  const { compaction, advisor } = usage;
  return {
    ...(usage.thinking === undefined ? {} : { output_tokens_details: { thinking_tokens: usage.thinking } }),
    ...(usage.webSearches === undefined
      ? {}
      : { server_tool_use: { web_search_requests: usage.webSearches, web_fetch_requests: 0 } }),
    ...(compaction || advisor
      ? {
          iterations: [
            ...(compaction ? [iteration("compaction", compaction.input, compaction.output)] : []),
            iteration("message", usage.input - usage.cached, usage.output, {
              cache_read_input_tokens: usage.cached,
              model: null,
            }),
            ...(advisor
              ? [iteration("advisor_message", advisor.input, advisor.output, { model: advisor.model })]
              : []),
          ],
        }
      : {}),
  };
}

function usageC(usage: FakeUsage) {
  return {
    promptTokenCount: usage.input,
    candidatesTokenCount: usage.output - usage.reasoning,
    totalTokenCount: usage.input + usage.output + (usage.toolUse ?? 0),
    cachedContentTokenCount: usage.cached,
    thoughtsTokenCount: usage.reasoning,
    promptTokensDetails: [
      { modality: "TEXT", tokenCount: usage.input - (usage.audioInput ?? 0) },
      ...(usage.audioInput ? [{ modality: "AUDIO", tokenCount: usage.audioInput }] : []),
    ],
    ...(usage.cachedAudio === undefined
      ? {}
      : {
          cacheTokensDetails: [
            { modality: "TEXT", tokenCount: usage.cached - usage.cachedAudio },
            { modality: "AUDIO", tokenCount: usage.cachedAudio },
          ],
        }),
    ...(usage.toolUse ? { toolUsePromptTokenCount: usage.toolUse } : {}),
  };
}

const fakeInteractionId = "v1_ChdmYWtlLWludGVyYWN0aW9uLWlkLTAwMRIXZmFrZQ";
const fakeThoughtSignature = "EpYCCpMCAdHtim9fakeSignature";
const interactionTime = "2025-11-13T02:13:20Z";

/** The interaction's own fields: id, status, times, the model or agent, the previous interaction. */
function interactionFields(request: Record<string, unknown>, status: string) {
  const runs = typeof request.agent === "string" ? { agent: request.agent } : { model: request.model };
  return {
    id: fakeInteractionId,
    status,
    created: interactionTime,
    updated: interactionTime,
    ...runs,
    role: "model",
    object: "interaction",
    ...(typeof request.previous_interaction_id === "string"
      ? { previous_interaction_id: request.previous_interaction_id }
      : {}),
  };
}

function interactionOutputs(text: string, usage: FakeUsage) {
  return [
    ...(usage.reasoning > 0 ? [{ type: "thought", signature: fakeThoughtSignature }] : []),
    { type: "text", text },
  ];
}

function interactionSteps(text: string, usage: FakeUsage) {
  return [
    ...(usage.reasoning > 0 ? [{ type: "thought", signature: fakeThoughtSignature }] : []),
    { type: "model_output", content: [{ type: "text", text }] },
  ];
}

/** The Interactions API's usage: usageMetadata's counts under its names, with the same split. */
function usageInteractions(usage: FakeUsage) {
  return {
    total_input_tokens: usage.input,
    total_output_tokens: usage.output - usage.reasoning,
    total_thought_tokens: usage.reasoning,
    total_cached_tokens: usage.cached,
    ...(usage.toolUse ? { total_tool_use_tokens: usage.toolUse } : {}),
    total_tokens: usage.input + usage.output + (usage.toolUse ?? 0),
    input_tokens_by_modality: [
      { modality: "text", tokens: usage.input - (usage.audioInput ?? 0) },
      ...(usage.audioInput ? [{ modality: "audio", tokens: usage.audioInput }] : []),
    ],
    ...(usage.cachedAudio === undefined
      ? {}
      : {
          cached_tokens_by_modality: [
            { modality: "text", tokens: usage.cached - usage.cachedAudio },
            { modality: "audio", tokens: usage.cachedAudio },
          ],
        }),
  };
}

/** Splits text into a few stream deltas (at least one). */
export function splitText(text: string): string[] {
  if (text.length <= 4) return [text];
  const size = Math.ceil(text.length / 4);
  const pieces: string[] = [];
  for (let at = 0; at < text.length; at += size) pieces.push(text.slice(at, at + size));
  return pieces;
}

export const providerErrors = {
  a: (status: number) => ({
    error: {
      message: `Fake provider A error ${status}`,
      type: status === 429 ? "rate_limit_exceeded" : "server_error",
      param: null,
      code: null,
    },
  }),
  b: (status: number) => ({
    type: "error",
    error: {
      type: status === 429 ? "rate_limit_error" : "api_error",
      message: `Fake provider B error ${status}`,
    },
  }),
  c: (status: number) => ({
    error: {
      code: status,
      message: `Fake provider C error ${status}`,
      status: status === 429 ? "RESOURCE_EXHAUSTED" : "INTERNAL",
    },
  }),
};

import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { AddressInfo } from "node:net";
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { fakeFileBytes, fileContentAnswer } from "./fake-file-content.js";
import { providerBInputRefusal, providerBPdfRefusal } from "./fake-input-refusals.js";
import { createFakeResponsesApi } from "./fake-responses-api.js";
import { providerBSchemaRefusal, providerCSchemaRefusal } from "./fake-schema-refusals.js";
import {
  type FakeUsage,
  fakeAudio,
  providerA,
  providerB,
  providerC,
  providerErrors,
} from "./fake-upstream-responses.js";
import { createResponseEncoder, type ResponseCoding } from "./response-encoder.js";

/**
 * A real local HTTP server imitating the three providers: A (OpenAI-style) under `/a/v1`, B
 * (Anthropic-style) under `/b/v1`, C (Gemini-style, generateContent and the Interactions API) under
 * `/c/v1beta`, `/c/v1alpha` and `/c/v1`. It records every request (raw body bytes included), streams SSE event by
 * event with real writes, notices client disconnects, and can be programmed with structured outputs,
 * errors, latency and pacing.
 */
interface RecordedRequest {
  provider: "a" | "b" | "c";
  method: string;
  /** Path and query string as received. */
  path: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
  json?: unknown;
  /** The client went away before the response ended. */
  aborted: boolean;
  finishedAt?: number;
  /** With a compression set: the response body exactly as sent, compressed. */
  sentBody?: Buffer;
}

/** How the fake ends a stream: see FakeUpstream.setStreamEnd. */
type StreamEnd = "whole" | "unterminated" | "cut";

export interface ProgrammedResponse {
  status: number;
  headers?: Record<string, string>;
  /**
   * The body to send (a Buffer as its bytes, a string as it is, anything else as JSON); omitted: the
   * requesting provider's own error shape for `status`.
   */
  body?: unknown;
  /**
   * (Status 200 only) The body as a stream of these pieces, each a write of its own, paced as
   * streams are (setSseDelayMs), with `headers`' content-type; `body` is then not sent.
   */
  parts?: Array<string | Buffer>;
}

/**
 * How the fake answers one request, whatever the settings say (setPlan): each field left out keeps
 * the setting's behaviour. For tests whose concurrent calls each need an answer of their own.
 */
export interface RequestPlan {
  /** The tokens this answer reports (over setUsage's). */
  usage?: Partial<FakeUsage>;
  latencyMs?: number;
  sseDelayMs?: number;
  /** As hangStreamsAfter, for this answer's stream. */
  hangStreamsAfter?: number | null;
  /**
   * The stream's events after the first are sent once this settles: until then the client can have
   * only what the upstream sent first (the order of events, where a delay is a duration).
   */
  restSentAfter?: Promise<unknown>;
  streamEnd?: StreamEnd;
  compression?: ResponseCoding | null;
  /** Answers with the provider's own error shape for this status. */
  failStatus?: number;
  /** A JSON answer cut halfway: its content-length promised the whole body, half is sent and the connection closed. */
  cutBody?: boolean;
  /** The connection is closed without any answer. */
  destroy?: boolean;
  /** Headers sent besides the answer's own (an `x-request-id` of the provider's, say). */
  headers?: Record<string, string>;
}

/** The gateway's three provider base URLs (Config's), each at its provider's path on `fake`. */
export function providerBaseUrls(fake: { url: string }) {
  return {
    providerABaseUrl: `${fake.url}/a/v1`,
    providerBBaseUrl: `${fake.url}/b/v1`,
    providerCBaseUrl: `${fake.url}/c/v1beta`,
  };
}

export interface FakeUpstream {
  url: string;
  requests: RecordedRequest[];
  last(): RecordedRequest | undefined;
  /**
   * Forgets the recorded requests and drops the answers still queued (enqueueResponse, failNext), so
   * one test's leftovers never answer the next test's calls. The other settings (structured output,
   * text, latency, usage, …) stay as set.
   */
  clear(): void;
  setStructuredOutput(value: unknown | ((request: RecordedRequest) => unknown)): void;
  setText(text: string): void;
  enqueueResponse(response: ProgrammedResponse): void;
  /** Makes the next `count` requests answer with the provider's own error shape. */
  failNext(status: number, count?: number): void;
  setSseDelayMs(ms: number): void;
  setLatencyMs(ms: number): void;
  setUsage(usage: Partial<FakeUsage>): void;
  /**
   * Streams stop after `events` events and hang (until the client leaves); a stream of no more
   * events sends them all and hangs without ending.
   */
  hangStreamsAfter(events: number | null): void;
  /**
   * How each stream ends: `whole` (as the providers send it), `unterminated` (its last event without
   * its line end and blank line, and the answer ended cleanly: the server that forgets them), or
   * `cut` (the same bytes, and the connection then closed without ending the answer).
   */
  setStreamEnd(end: StreamEnd): void;
  /**
   * Compresses every answer with `coding` whatever the request's accept-encoding says, as a server
   * that ignores it does (null: never). Streams are flushed event by event, so they still stream.
   */
  setCompression(coding: ResponseCoding | null): void;
  /** How many polls a provider A background response answers `in_progress` before it completes. */
  setResponsesPollsBeforeDone(polls: number): void;
  /** Each request's own plan (RequestPlan), asked as it arrives; null (or no plan returned): the settings alone. */
  setPlan(plan: ((request: RecordedRequest) => RequestPlan | undefined) | null): void;
  /**
   * The first recorded request the client aborted (of those `which` picks, when given), once there
   * is one. Without `which`, a request aborted earlier answers at once.
   */
  waitForAbort(timeoutMs: number, which?: (request: RecordedRequest) => boolean): Promise<RecordedRequest>;
  close(): Promise<void>;
}

export async function startFakeUpstream(
  options: {
    port?: number;
    /** How long an idle keep-alive connection stays open (Node's default, 5 s, when not given). */
    keepAliveTimeoutMs?: number;
  } = {},
): Promise<FakeUpstream> {
  const requests: RecordedRequest[] = [];
  const queued: ProgrammedResponse[] = [];
  let structured: unknown | ((request: RecordedRequest) => unknown) = { answer: "fake" };
  let text = "Hello from the fake upstream";
  let sseDelayMs = 0;
  let latencyMs = 0;
  let hangAfter: number | null = null;
  let streamEnd: StreamEnd = "whole";
  let usage: FakeUsage = { input: 11, output: 7, cached: 3, reasoning: 2 };
  let compression: ResponseCoding | null = null;
  const recordedOf = new WeakMap<ServerResponse, RecordedRequest>();
  let planFor: ((request: RecordedRequest) => RequestPlan | undefined) | null = null;
  const planOf = new WeakMap<ServerResponse, RequestPlan>();
  /** The tokens an answer reports: the settings', over which its plan's. */
  const usageFor = (response: ServerResponse): FakeUsage => ({ ...usage, ...planOf.get(response)?.usage });
  const codingFor = (response: ServerResponse): ResponseCoding | null => {
    const planned = planOf.get(response)?.compression;
    return planned === undefined ? compression : planned;
  };
  const responsesApi = createFakeResponsesApi();
  /** The request that made the last upload (`POST uploads`), whose completion answers with its fields. */
  let upload: Record<string, unknown> = {};
  const abortWaiters = new Set<(request: RecordedRequest) => void>();

  const structuredText = (request: RecordedRequest) => {
    const value =
      typeof structured === "function"
        ? (structured as (r: RecordedRequest) => unknown)(request)
        : structured;
    return typeof value === "string" ? value : JSON.stringify(value);
  };
  const structuredValue = (request: RecordedRequest) => {
    const raw = structuredText(request);
    try {
      return JSON.parse(raw) as unknown;
    } catch {
      return raw;
    }
  };

  async function handle(request: IncomingMessage, response: ServerResponse) {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const url = request.url ?? "/";
    const provider = url.startsWith("/a/") ? "a" : url.startsWith("/b/") ? "b" : "c";
    const body = Buffer.concat(chunks);
    const recorded: RecordedRequest = {
      provider,
      method: request.method ?? "GET",
      path: url,
      headers: request.headers,
      body,
      aborted: false,
    };
    try {
      if (body.length > 0) recorded.json = JSON.parse(body.toString("utf8"));
    } catch {
      // not JSON: kept as raw bytes
    }
    requests.push(recorded);
    recordedOf.set(response, recorded);
    response.once("close", () => {
      if (!response.writableFinished) {
        recorded.aborted = true;
        for (const waiter of [...abortWaiters]) waiter(recorded);
      }
      recorded.finishedAt = Date.now();
    });
    const plan = planFor?.(recorded);
    if (plan) planOf.set(response, plan);
    const wait = plan?.latencyMs ?? latencyMs;
    if (wait > 0) await sleep(wait);
    if (response.destroyed) return;
    if (plan?.destroy) {
      response.socket?.destroy();
      return;
    }
    if (plan?.failStatus !== undefined) {
      sendJson(response, plan.failStatus, providerErrors[provider](plan.failStatus));
      return;
    }
    const programmed = queued.shift();
    if (programmed?.parts !== undefined) {
      await stream(response, programmed.parts, programmed.headers?.["content-type"]);
      return;
    }
    if (programmed) {
      const body =
        programmed.body === undefined ? providerErrors[provider](programmed.status) : programmed.body;
      sendJson(response, programmed.status, body, programmed.headers);
      return;
    }
    await route(recorded, response);
  }

  async function route(request: RecordedRequest, response: ServerResponse) {
    const usage = usageFor(response);
    const path = request.path.split("?")[0] ?? "";
    const json = (request.json ?? {}) as Record<string, unknown>;
    const model = typeof json.model === "string" ? json.model : "unknown-model";
    if (path === "/a/v1/chat/completions") {
      const content = json.response_format ? structuredText(request) : text;
      if (json.stream === true) {
        const includeUsage =
          (json.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
        return stream(
          response,
          providerA.chunks(model, content, usage, includeUsage),
          "text/event-stream",
          request.path,
        );
      }
      return sendJson(response, 200, providerA.chat(model, content, usage));
    }
    if (path.startsWith("/a/v1/responses")) {
      const query = request.path.slice(path.length + 1);
      // `text.format` asks for JSON (`json_schema`, `json_object`) as `response_format` does on chat.
      const format = (json.text as { format?: { type?: string } } | undefined)?.format?.type;
      const content = format === "json_schema" || format === "json_object" ? structuredText(request) : text;
      const answer = responsesApi.handle(request.method, path, query, json, content, usage);
      if (answer?.kind === "json") return sendJson(response, answer.status, answer.body);
      if (answer) return stream(response, answer.events);
    }
    if (path === "/a/v1/embeddings")
      return sendJson(
        response,
        200,
        providerA.embeddings(
          model,
          Array.isArray(json.input) ? json.input.length : 1,
          usage,
          json.encoding_format === "base64",
          typeof json.dimensions === "number" ? json.dimensions : 3,
        ),
      );
    if (path === "/a/v1/models") return sendJson(response, 200, providerA.models());
    const oneModel = /^\/a\/v1\/models\/([^/]+)$/.exec(path);
    if (oneModel && request.method === "GET")
      return sendJson(response, 200, providerA.model(oneModel[1] ?? ""));
    // Files: a multipart upload (its file part's name and size, and `purpose`), and a deletion.
    if (path === "/a/v1/files" && request.method === "POST") {
      const form = request.body.toString("latin1");
      const filename = /name="file"; filename="([^"]*)"/.exec(form)?.[1] ?? "upload";
      const start = form.indexOf("\r\n\r\n", form.indexOf('name="file"')) + 4;
      const bytes = form.indexOf("\r\n--", start) - start;
      return sendJson(
        response,
        200,
        providerA.file("file-abc123", filename, bytes, multipartField(request.body, "purpose") ?? ""),
      );
    }
    // The Uploads API: an upload made, its parts (multipart forms of one `data` part, whose bytes
    // are kept as received), and its completion into a File of the parts' bytes together.
    if (path === "/a/v1/uploads" && request.method === "POST") {
      upload = json;
      return sendJson(response, 200, providerA.upload("upload_fake1", json));
    }
    const uploadPart = /^\/a\/v1\/uploads\/([^/]+)\/parts$/.exec(path);
    if (uploadPart && request.method === "POST")
      return sendJson(
        response,
        200,
        providerA.uploadPart(`part_fake${requests.length}`, uploadPart[1] ?? ""),
      );
    const uploadDone = /^\/a\/v1\/uploads\/([^/]+)\/complete$/.exec(path);
    if (uploadDone && request.method === "POST") {
      const { filename, bytes, purpose } = upload;
      const file = providerA.file("file-upload1", String(filename), Number(bytes), String(purpose));
      return sendJson(response, 200, providerA.upload(uploadDone[1] ?? "", upload, file));
    }
    // The files' list and one file's object (GETs, no body), and a deletion.
    if (path === "/a/v1/files" && request.method === "GET")
      return sendJson(
        response,
        200,
        providerA.fileList([providerA.file("file-abc123", "in.jsonl", 18, "batch")]),
      );
    const oneFile = /^\/a\/v1\/files\/([^/]+)$/.exec(path);
    if (oneFile && request.method === "GET")
      return sendJson(response, 200, providerA.file(oneFile[1] ?? "", "in.jsonl", 18, "batch"));
    if (oneFile && request.method === "DELETE")
      return sendJson(response, 200, providerA.fileDeleted(oneFile[1] ?? ""));
    // A file's content, byte ranges honoured (fake-file-content.ts); compressed when a compression is set.
    if (
      /^\/a\/v1\/files\/[^/]+\/content$/.test(path) &&
      (request.method === "GET" || request.method === "HEAD")
    ) {
      const representation = compression === null ? fakeFileBytes : compressSync[compression](fakeFileBytes);
      const answer = fileContentAnswer(request.headers, representation, compression);
      response.writeHead(answer.status, {
        ...answer.headers,
        "content-length": String(answer.body.length),
        "x-fake-upstream": "bytes",
      });
      return response.end(answer.body);
    }
    if (path === "/a/v1/completions") {
      const includeUsage =
        (json.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
      if (json.stream === true)
        return stream(response, providerA.completionChunks(model, text, usage, includeUsage));
      return sendJson(response, 200, providerA.completion(model, text, usage));
    }
    if (path === "/a/v1/audio/transcriptions" || path === "/a/v1/audio/translations") {
      // multipart/form-data: the SDK writes the fields after the file.
      const field = (name: string) => multipartField(request.body, name);
      const audioModel = field("model") ?? "whisper-1";
      if (path.endsWith("translations")) return sendJson(response, 200, { text });
      // Only the gpt-4o transcribe models stream; whisper-1 ignores `stream`.
      if (field("stream") === "true" && !audioModel.startsWith("whisper"))
        return stream(response, providerA.transcriptionEvents(text, usage));
      if (field("response_format") === "text")
        return sendBytes(response, 200, Buffer.from(`${text}\n`), "text/plain; charset=utf-8");
      return sendJson(response, 200, providerA.transcription(audioModel, text, usage));
    }
    if (path === "/a/v1/audio/speech") {
      if (json.stream_format === "sse") return stream(response, providerA.speechEvents(usage));
      return sendBytes(response, 200, fakeAudio, "audio/mpeg");
    }
    if (path === "/a/v1/moderations")
      return sendJson(response, 200, providerA.moderation(json.model ? model : "omni-moderation-latest"));
    if (path === "/a/v1/images/generations") {
      return sendJson(response, 200, providerA.images(json));
    }
    if (path === "/b/v1/messages") {
      // As provider B does: an empty text block anywhere in the conversation is refused.
      if (hasEmptyTextBlock(json.messages)) {
        return sendJson(response, 400, {
          type: "error",
          error: {
            type: "invalid_request_error",
            message: "messages: text content blocks must be non-empty",
          },
        });
      }
      // As provider B does: an image over its size or dimension limit, a PDF over its pages, before inference.
      const refusedInput = providerBInputRefusal(json.messages) ?? providerBPdfRefusal(json.messages);
      if (refusedInput)
        return sendJson(response, 400, {
          type: "error",
          error: { type: "invalid_request_error", message: refusedInput },
        });
      // As provider B does: a structured-output schema its grammar compiler refuses, before inference.
      const refused = providerBSchemaRefusal(
        (json.output_config as { format?: { schema?: unknown } } | undefined)?.format?.schema,
      );
      if (refused)
        return sendJson(response, 400, {
          type: "error",
          error: { type: "invalid_request_error", message: refused },
        });
      const content = json.output_format || json.output_config ? structuredText(request) : text;
      if (json.stream === true) return stream(response, providerB.events(model, content, usage));
      const tools = json.tools as Array<{ name: string }> | undefined;
      const choice = json.tool_choice as { type?: string; name?: string } | undefined;
      // `any` (must use one of the tools) is what the AI SDK sends when it falls back to a JSON tool;
      // to a model that refuses forced tool use (Sonnet 5.5, Opus 5.5) it sends its `json` tool alone
      // with `auto`, asking, not forcing, the model to answer through it, as such a model does.
      const askedForJsonTool = choice?.type === "auto" && tools?.length === 1 && tools[0]?.name === "json";
      if (tools?.length && (choice?.type === "tool" || choice?.type === "any" || askedForJsonTool)) {
        const name = choice.name ?? tools[0]?.name ?? "json";
        return sendJson(
          response,
          200,
          providerB.message(
            model,
            [{ type: "tool_use", id: "toolu_fake", name, input: structuredValue(request) }],
            usage,
            "tool_use",
          ),
        );
      }
      return sendJson(response, 200, providerB.message(model, [{ type: "text", text: content }], usage));
    }
    // A batch's cancel: a POST without a body, answered with the batch, now canceling.
    const batchCancel = /^\/b\/v1\/messages\/batches\/([^/]+)\/cancel$/.exec(path);
    if (batchCancel && request.method === "POST")
      return sendJson(response, 200, providerB.batch(batchCancel[1] ?? "", "canceling"));
    if (path === "/b/v1/messages/batches" && request.method === "POST")
      return sendJson(response, 200, providerB.batch("msgbatch_fake1"));
    if (path === "/b/v1/messages/count_tokens") return sendJson(response, 200, { input_tokens: usage.input });
    if (path === "/b/v1/models") return sendJson(response, 200, providerB.models());
    // The Interactions API and context caches, on whichever API version the SDK addresses
    // (`@google/genai` 1.x and 2.x: v1beta, 3.x: v1).
    // On v1 in the step-based shape 3.x reads, on v1beta and v1alpha in the outputs shape before it.
    const steps = path.startsWith("/c/v1/");
    if (/^\/c\/(v1beta|v1alpha|v1)\/interactions$/.test(path) && request.method === "POST") {
      if (json.stream === true)
        return stream(response, providerC.interactionEvents(json, text, usage, steps));
      return sendJson(response, 200, providerC.interaction(json, text, usage, "completed", steps));
    }
    // A cancel answers with the interaction it stopped (the fake's one id), usage included.
    if (/^\/c\/(v1beta|v1alpha|v1)\/interactions\/[^/]+\/cancel$/.test(path) && request.method === "POST")
      return sendJson(
        response,
        200,
        providerC.interaction({ model: "gemini-2.5-flash" }, text, usage, "cancelled", steps),
      );
    if (/^\/c\/(v1beta|v1alpha|v1)\/auth_tokens$/.test(path) && request.method === "POST")
      return sendJson(response, 200, providerC.authToken(json));
    if (/^\/c\/(v1beta|v1alpha|v1)\/cachedContents$/.test(path) && request.method === "POST") {
      const cached = typeof json.model === "string" ? json.model.replace(/^models\//, "") : "unknown-model";
      return sendJson(response, 200, providerC.cachedContent(cached, usage));
    }
    const gemini = /^\/c\/(v1beta|v1alpha|v1)\/models\/([^:/]+):(\w+)$/.exec(path);
    if (gemini) return routeGemini(request, response, gemini[2] ?? "", gemini[3] ?? "", json);
    if (/^\/c\/(v1beta|v1alpha|v1)\/models$/.test(path)) return sendJson(response, 200, providerC.models());
    sendJson(response, 404, { error: { message: `fake upstream has no route ${request.method} ${path}` } });
  }

  async function routeGemini(
    request: RecordedRequest,
    response: ServerResponse,
    model: string,
    method: string,
    json: Record<string, unknown>,
  ) {
    const usage = usageFor(response);
    const config = (json.generationConfig ?? {}) as Record<string, unknown>;
    // As provider C does: a response schema its API refuses, on every call.
    const refused =
      config.responseSchema !== undefined && method.endsWith("enerateContent")
        ? providerCSchemaRefusal(config.responseSchema)
        : null;
    if (refused)
      return sendJson(response, 400, { error: { code: 400, message: refused, status: "INVALID_ARGUMENT" } });
    const content = config.responseMimeType === "application/json" ? structuredText(request) : text;
    if (method === "generateContent")
      return sendJson(response, 200, providerC.response(model, content, usage));
    if (method === "streamGenerateContent") {
      const chunks = providerC.chunks(model, content, usage);
      if (request.path.includes("alt=sse"))
        return stream(
          response,
          chunks.map((chunk) => `data: ${JSON.stringify(chunk)}\r\n\r\n`),
        );
      // Without alt=sse the real API streams one JSON array, element by element.
      return stream(
        response,
        chunks.map(
          (chunk, index) =>
            `${index === 0 ? "[" : ",\r\n"}${JSON.stringify(chunk)}${index === chunks.length - 1 ? "]" : ""}`,
        ),
        "application/json; charset=UTF-8",
      );
    }
    if (method === "countTokens") return sendJson(response, 200, providerC.tokenCount(usage));
    if (method === "batchGenerateContent")
      return sendJson(
        response,
        200,
        providerC.operation("batches/fake-batch-1", {
          "@type": "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch",
          model: `models/${model}`,
          state: "BATCH_STATE_PENDING",
        }),
      );
    if (method === "predictLongRunning")
      return sendJson(response, 200, providerC.operation(`models/${model}/operations/fake-operation-1`));
    if (method === "embedContent") return sendJson(response, 200, providerC.embedding());
    if (method === "batchEmbedContents") {
      const count = Array.isArray(json.requests) ? json.requests.length : 1;
      return sendJson(response, 200, {
        embeddings: Array.from({ length: count }, () => providerC.embedding().embedding),
      });
    }
    if (method === "predict") {
      const parameters = (json.parameters ?? {}) as { sampleCount?: number };
      // Without sampleCount the Gemini API generates 4 images.
      return sendJson(response, 200, providerC.predictions(parameters.sampleCount ?? 4));
    }
    sendJson(response, 404, {
      error: { code: 404, message: `unknown method ${method}`, status: "NOT_FOUND" },
    });
  }

  /** A JSON answer, compressed when a compression is set. */
  function sendJson(
    response: ServerResponse,
    status: number,
    body: unknown,
    headers: Record<string, string> = {},
  ) {
    let payload: Buffer = Buffer.isBuffer(body)
      ? body
      : Buffer.from(typeof body === "string" ? body : JSON.stringify(body));
    const encoding: Record<string, string> = {};
    const coding = codingFor(response);
    const plan = planOf.get(response);
    if (coding !== null) {
      payload = compressSync[coding](payload);
      encoding["content-encoding"] = coding;
      const recorded = recordedOf.get(response);
      if (recorded) recorded.sentBody = payload;
    }
    response.writeHead(status, {
      "content-type": "application/json",
      "content-length": String(payload.length),
      "x-fake-upstream": "json",
      ...encoding,
      ...headers,
      ...plan?.headers,
    });
    if (plan?.cutBody) {
      response.write(payload.subarray(0, Math.floor(payload.length / 2)));
      response.socket?.end();
      return;
    }
    response.end(payload);
  }

  /** A body that is no JSON (audio, text), as sent. */
  function sendBytes(response: ServerResponse, status: number, payload: Buffer, contentType: string) {
    response.writeHead(status, {
      "content-type": contentType,
      "content-length": String(payload.length),
      "x-fake-upstream": "bytes",
    });
    response.end(payload);
  }

  async function stream(
    response: ServerResponse,
    events: Array<string | Buffer>,
    contentType = "text/event-stream",
    path = "",
  ) {
    // `?sse_delay_ms=N` paces one request (the benchmark's paced stream); else the programmed delay.
    const paced = /[?&]sse_delay_ms=(\d+)/.exec(path);
    const plan = planOf.get(response);
    const delay = paced ? Number(paced[1]) : (plan?.sseDelayMs ?? sseDelayMs);
    const hang = plan?.hangStreamsAfter === undefined ? hangAfter : plan.hangStreamsAfter;
    const end = plan?.streamEnd ?? streamEnd;
    const coding = codingFor(response);
    const recorded = recordedOf.get(response);
    const encoder = coding === null ? null : createResponseEncoder(coding, response, recorded);
    response.writeHead(200, {
      "content-type": contentType,
      "cache-control": "no-cache",
      "x-fake-upstream": "stream",
      ...(coding === null ? {} : { "content-encoding": coding }),
      ...plan?.headers,
    });
    response.flushHeaders();
    for (const [index, whole] of events.entries()) {
      if (response.destroyed) return;
      if (hang !== null && index >= hang) return;
      if (index === 1 && plan?.restSentAfter) await plan.restSentAfter;
      if (index > 0 && delay > 0) await sleep(delay);
      if (response.destroyed) return;
      const event =
        end !== "whole" && index === events.length - 1 && typeof whole === "string"
          ? whole.replace(/[\r\n]+$/, "")
          : whole;
      if (encoder) await encoder.write(event);
      else if (!response.write(event)) await new Promise((resolve) => response.once("drain", resolve));
    }
    if (hang !== null && hang >= events.length) return;
    if (end === "cut") {
      // What was written leaves first; the chunked body then lacks its last chunk.
      response.socket?.end();
      return;
    }
    if (encoder) await encoder.end();
    response.end();
  }

  const server: Server = createServer((request, response) => {
    handle(request, response).catch(() => response.destroy());
  });
  if (options.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = options.keepAliveTimeoutMs;
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    last: () => requests.at(-1),
    clear: () => {
      requests.length = 0;
      queued.length = 0;
    },
    setStructuredOutput(value) {
      structured = value;
    },
    setText(value) {
      text = value;
    },
    enqueueResponse(response) {
      queued.push(response);
    },
    failNext(status, count = 1) {
      for (let index = 0; index < count; index++) queued.push({ status });
    },
    setSseDelayMs(ms) {
      sseDelayMs = ms;
    },
    setLatencyMs(ms) {
      latencyMs = ms;
    },
    setUsage(partial) {
      usage = { ...usage, ...partial };
    },
    hangStreamsAfter(events) {
      hangAfter = events;
    },
    setStreamEnd(end) {
      streamEnd = end;
    },
    setCompression(coding) {
      compression = coding;
    },
    setResponsesPollsBeforeDone(polls) {
      responsesApi.setPollsBeforeDone(polls);
    },
    setPlan(plan) {
      planFor = plan;
    },
    waitForAbort(timeoutMs, which = () => true) {
      const already = requests.find((request) => request.aborted && which(request));
      if (already) return Promise.resolve(already);
      return new Promise((resolve, reject) => {
        const waiter = (request: RecordedRequest) => {
          if (!which(request)) return;
          abortWaiters.delete(waiter);
          clearTimeout(timer);
          resolve(request);
        };
        const timer = setTimeout(() => {
          abortWaiters.delete(waiter);
          reject(new Error("no upstream abort within the timeout"));
        }, timeoutMs);
        abortWaiters.add(waiter);
      });
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** A text field of a multipart/form-data body (up to the line end before the next boundary), or null. */
function multipartField(body: Buffer, name: string): string | null {
  const text = body.toString("latin1");
  const at = text.lastIndexOf(`name="${name}"`);
  if (at === -1) return null;
  const start = text.indexOf("\r\n\r\n", at);
  const end = text.indexOf("\r\n", start + 4);
  return start === -1 || end === -1 ? null : text.slice(start + 4, end);
}

function hasEmptyTextBlock(messages: unknown): boolean {
  if (!Array.isArray(messages)) return false;
  return messages.some((message: { content?: unknown }) =>
    typeof message.content === "string"
      ? message.content === ""
      : Array.isArray(message.content) &&
        message.content.some(
          (block: { type?: string; text?: string }) => block.type === "text" && block.text === "",
        ),
  );
}

const compressSync: Record<ResponseCoding, (bytes: Buffer) => Buffer> = {
  gzip: (bytes) => gzipSync(bytes),
  deflate: (bytes) => deflateSync(bytes),
  br: (bytes) => brotliCompressSync(bytes),
};

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

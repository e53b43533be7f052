import { describe, expect, it } from "vitest";
import { slowdownAtSixteenTimes } from "../../test/support/slowdown-at-sixteen-times.js";
import { imagenPrediction, openAiImageGeneration } from "./image-calls.js";
import { createProviderAdapters, providerPathProblem, safeProviderPath } from "./provider-adapter.js";

const adapters = createProviderAdapters({
  providerABaseUrl: "https://api.openai.com/v1",
  providerBBaseUrl: "https://api.anthropic.com/v1",
  providerCBaseUrl: "https://generativelanguage.googleapis.com/v1beta",
  providerBVersion: "2023-06-01",
  clientIdentifier: "sluice/1.0.0",
});

describe("provider adapters", () => {
  it("recognises the image generations priced per image, and nothing else", () => {
    const a = adapters["provider-a"];
    const c = adapters["provider-c"];
    expect(a.imageCall?.("POST", "images/generations")).toBe(openAiImageGeneration);
    for (const [method, path] of [
      ["GET", "images/generations"],
      ["POST", "images/edits"],
      ["POST", "images/variations"],
      ["POST", "chat/completions"],
    ] as const)
      expect(a.imageCall?.(method, path)).toBeNull();
    expect(c.imageCall?.("POST", "v1beta/models/imagen-4.0-generate-001:predict")).toBe(imagenPrediction);
    expect(c.imageCall?.("POST", "models/imagen-4.0-generate-001%3Apredict")).toBe(imagenPrediction);
    expect(c.imageCall?.("POST", "models/veo-3.0-generate-001:predictLongRunning")).toBeNull();
    expect(c.imageCall?.("POST", "models/gemini-2.5-flash:generateContent")).toBeNull();
  });

  it("reads how many images a request asks for, with the provider's default", () => {
    const body = (value: unknown) => Buffer.from(JSON.stringify(value));
    expect(openAiImageGeneration.requested(body({ n: 3, size: "1024x1024", quality: "low" }))).toEqual({
      count: 3,
      size: "1024x1024",
      quality: "low",
    });
    expect(openAiImageGeneration.requested(body({ n: 0.5 }))).toEqual({
      count: 1,
      size: null,
      quality: null,
    });
    expect(openAiImageGeneration.requested(Buffer.from("not json"))).toEqual({
      count: 1,
      size: null,
      quality: null,
    });
    expect(imagenPrediction.requested(body({ parameters: { sampleCount: 2 } })).count).toBe(2);
    expect(imagenPrediction.requested(body({ instances: [{ prompt: "x" }] })).count).toBe(4);
    // A body after a byte order mark is read as the provider reads it.
    const marked = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), body({ parameters: { sampleCount: 2 } })]);
    expect(imagenPrediction.requested(marked).count).toBe(2);
  });

  it("maps each SDK's version segment onto the configured base URL", () => {
    expect(adapters["provider-a"].target("chat/completions")).toEqual({
      origin: "https://api.openai.com",
      path: "/v1/chat/completions",
    });
    expect(adapters["provider-b"].target("v1/messages")).toEqual({
      origin: "https://api.anthropic.com",
      path: "/v1/messages",
    });
    expect(adapters["provider-b"].target("messages")).toEqual({
      origin: "https://api.anthropic.com",
      path: "/v1/messages",
    });
    expect(adapters["provider-c"].target("v1beta/models/gemini-2.5-flash:generateContent")).toEqual({
      origin: "https://generativelanguage.googleapis.com",
      path: "/v1beta/models/gemini-2.5-flash:generateContent",
    });
    expect(adapters["provider-c"].target("v1/models/gemini-2.5-flash:generateContent").path).toBe(
      "/v1/models/gemini-2.5-flash:generateContent",
    );
    expect(adapters["provider-c"].target("v1alpha/models/gemini-2.5-flash:generateContent").path).toBe(
      "/v1alpha/models/gemini-2.5-flash:generateContent",
    );
    expect(adapters["provider-c"].target("models/x:streamGenerateContent").path).toBe(
      "/v1beta/models/x:streamGenerateContent",
    );
  });

  it("injects each provider's key header and required headers", () => {
    const a: Record<string, string> = {};
    adapters["provider-a"].inject(a, "sk-a");
    expect(a).toEqual({ authorization: "Bearer sk-a" });
    const b: Record<string, string> = { "anthropic-version": "1999-01-01" };
    adapters["provider-b"].inject(b, "sk-b");
    expect(b).toEqual({ "x-api-key": "sk-b", "anthropic-version": "2023-06-01" });
    const c: Record<string, string> = {};
    adapters["provider-c"].inject(c, "AIza");
    expect(c).toEqual({ "x-goog-api-key": "AIza", "x-goog-api-client": "sluice/1.0.0" });
  });

  it("tells the Responses API calls that can report a background run apart (provider A only)", () => {
    const call = (method: string, path: string) => adapters["provider-a"].responsesCall?.(method, path);
    expect(call("POST", "responses")).toBe("post");
    expect(call("POST", "responses/resp_1/cancel")).toBe("post");
    expect(call("GET", "responses/resp_1")).toBe("poll");
    // A batch's poll reports a finished batch's tokens as a background run's poll does.
    expect(call("GET", "batches/batch_1")).toBe("poll");
    for (const [method, path] of [
      ["POST", "chat/completions"],
      ["GET", "chat/completions/chatcmpl_1"],
      ["GET", "responses/resp_1/input_items"],
      ["DELETE", "responses/resp_1"],
      ["GET", "responses"],
      ["POST", "responses/input_tokens"],
      ["POST", "responses/compact"],
      ["POST", "batches"],
      ["GET", "batches"],
      ["POST", "batches/batch_1/cancel"],
    ] as const)
      expect(call(method, path), `${method} ${path}`).toBeNull();
    expect(adapters["provider-b"].responsesCall).toBeUndefined();
    expect(adapters["provider-c"].responsesCall).toBeUndefined();
  });

  it("finds the requested model in the body or, for provider C, the path", () => {
    expect(
      adapters["provider-a"].requestModel(
        "chat/completions",
        Buffer.from('{"model": "gpt-4o-mini","messages":[]}'),
      ),
    ).toBe("gpt-4o-mini");
    // As the provider reads the body: the last top-level `model`, after any input, escapes decoded.
    for (const provider of ["provider-a", "provider-b"] as const) {
      const model = (body: string) => adapters[provider].requestModel("responses/compact", Buffer.from(body));
      const long = JSON.stringify({ input: "x".repeat(100 * 1024), model: "gpt-4.1" });
      expect(model(long)).toBe("gpt-4.1");
      expect(model('{"metadata":{"model":"gpt-4.1-nano"},"input":"Hi","model":"gpt-4.1"}')).toBe("gpt-4.1");
      expect(model('{"model":"gpt-4.1-nano","input":"Hi","model":"gpt-4.1"}')).toBe("gpt-4.1");
      expect(model('{"model":"gpt-4.1-nano","mod\\u0065l":"gpt-4.1"}')).toBe("gpt-4.1");
      expect(model('\ufeff {"model":"gpt-4.1"}')).toBe("gpt-4.1");
      expect(model('{"metadata":{"model":"gpt-4.1-nano"},"input":"Hi"}')).toBeNull();
      for (const body of ['{"model":1}', '{"model":""}', `{"model":"${"x".repeat(201)}"}`, "[]"])
        expect(model(body), body).toBeNull();
      // A body that is no whole JSON object (the provider refuses it) names the first model it spells.
      expect(model('{"model":"gpt-4.1","input":[')).toBe("gpt-4.1");
      // Written in UTF-8, as JSON is: read as such, whole or not.
      expect(model('{"model":"modèle-ü","input":"Hi"}')).toBe("modèle-ü");
      expect(model('{"model":"modèle-ü","input":[')).toBe("modèle-ü");
    }
    const c = (path: string) => adapters["provider-c"].requestModel(path, Buffer.alloc(0));
    expect(c("v1beta/models/gemini-2.5-flash:generateContent")).toBe("gemini-2.5-flash");
    // The colon percent-encoded, as some clients send it.
    expect(c("v1beta/models/imagen-4.0-generate-001%3Apredict")).toBe("imagen-4.0-generate-001");
    expect(c("models/gemini-2.5-flash%3agenerateContent")).toBe("gemini-2.5-flash");
    expect(c("models/%zz:predict")).toBeNull();
    expect(c("models/:predict")).toBeNull();
  });

  it("tells provider C's interaction creation apart, and counts nothing for a cancel", () => {
    const c = adapters["provider-c"];
    for (const path of ["v1beta/interactions", "interactions", "v1/interactions", "v1alpha/interactions"])
      expect(c.interactionsCall?.(path), path).toBe(true);
    for (const path of [
      "v1beta/interactions/v1_abc/cancel",
      "v1beta/interactions/v1_abc",
      "v1beta/models/gemini-2.5-flash:generateContent",
      "v1beta/interactionsx",
      "v1beta/x/interactions",
    ])
      expect(c.interactionsCall?.(path), path).toBe(false);
    expect(c.answersStored?.("v1beta/interactions/v1_abc/cancel")).toBe(true);
    expect(c.answersStored?.("v1alpha/interactions/v1_abc/cancel")).toBe(true);
    expect(c.answersStored?.("v1beta/interactions")).toBe(false);
    expect(c.answersStored?.("v1beta/models/gemini-2.5-flash:generateContent")).toBe(false);
    expect(adapters["provider-a"].interactionsCall).toBeUndefined();
    expect(adapters["provider-b"].interactionsCall).toBeUndefined();
  });

  it("names the calls each provider bills nothing for, and only those", () => {
    const free = (provider: keyof typeof adapters, method: string, path: string) =>
      adapters[provider].freeCall(method, path);
    for (const method of ["GET", "HEAD", "OPTIONS", "DELETE"]) {
      expect(free("provider-a", method, "responses/resp_1"), method).toBe(true);
      expect(free("provider-a", method, "files/file-1"), method).toBe(true);
    }
    for (const path of [
      "moderations",
      "responses/input_tokens",
      "files",
      "uploads",
      "uploads/upload_1/parts",
      "uploads/upload_1/complete",
      "batches",
      "batches/batch_1/cancel",
      "responses/resp_1/cancel",
      "chat/completions/chatcmpl_1",
      "conversations",
      "conversations/conv_1/items",
      "realtime/client_secrets",
    ])
      expect(free("provider-a", "POST", path), path).toBe(true);
    for (const path of [
      "chat/completions",
      "responses",
      "responses/compact",
      "embeddings",
      "images/generations",
      "audio/speech",
      "vector_stores",
      "fine_tuning/jobs",
      "moderations/x",
      "batchesx",
      "chat/completions/chatcmpl_1/messages",
    ])
      expect(free("provider-a", "POST", path), path).toBe(false);
    expect(free("provider-a", "PUT", "files/file-1")).toBe(false);
    for (const path of [
      "v1/messages/count_tokens",
      "messages/count_tokens",
      "v1/messages/batches/b_1/cancel",
    ])
      expect(free("provider-b", "POST", path), path).toBe(true);
    for (const path of ["v1/messages", "v1/messages/batches", "v1/complete", "v1/x/messages/count_tokens"])
      expect(free("provider-b", "POST", path), path).toBe(false);
    for (const path of [
      "v1beta/models/gemini-2.5-flash:countTokens",
      "v1/models/gemini-2.5-flash%3AcountTokens",
      "v1beta/tunedModels/mine:countTokens",
      "v1beta/batches/b_1:cancel",
      "v1beta/interactions/v1_abc/cancel",
      "v1alpha/auth_tokens",
      "v1/auth_tokens",
    ])
      expect(free("provider-c", "POST", path), path).toBe(true);
    for (const path of [
      "v1beta/models/gemini-2.5-flash:generateContent",
      "v1beta/models/gemini-embedding-001:batchEmbedContents",
      "v1beta/cachedContents",
      "v1beta/models/gemini-2.5-flash:batchGenerateContent",
      "v1beta/interactions",
      "v1alpha/auth_tokens/x",
      "v1alpha/auth_tokensx",
    ])
      expect(free("provider-c", "POST", path), path).toBe(false);
  });

  it("reads an interaction's model (else its agent) from the body's top-level members, as the provider does", () => {
    const model = (body: string) =>
      adapters["provider-c"].requestModel("v1beta/interactions", Buffer.from(body));
    expect(model('{"model":"gemini-2.5-flash","input":"Hi"}')).toBe("gemini-2.5-flash");
    // After a long input, written with escapes, the last of two, spaces around.
    expect(
      model(` { "input" : ${JSON.stringify("x".repeat(70_000))} , "\\u006dodel" : "gemini-2.5-pro" } `),
    ).toBe("gemini-2.5-pro");
    expect(model('{"model":"gemini-2.5-flash","model":"gemini-2.5-pro"}')).toBe("gemini-2.5-pro");
    expect(model('\ufeff{"model":"gemini-2.5-flash","input":"Hi"}')).toBe("gemini-2.5-flash");
    // A `model` nested in a tool's schema or the input is not the request's.
    expect(
      model(
        '{"tools":[{"parameters":{"properties":{"model":"x"}}}],"input":[{"role":"model"}],"model":"gemini-2.5-flash"}',
      ),
    ).toBe("gemini-2.5-flash");
    expect(model('{"tools":[{"parameters":{"model":"gemini-2.5-pro"}}],"input":"Hi"}')).toBeNull();
    expect(model('{"agent":"deep-research-pro-preview-12-2025","input":"Research","background":true}')).toBe(
      "deep-research-pro-preview-12-2025",
    );
    for (const body of ["", "[]", '{"model":1}', '{"model":""}', '{"model":"gemini', "not json"])
      expect(model(body), body).toBeNull();
  });

  describe("the model field of a multipart body (a transcription, an image edit)", () => {
    const boundary = "----formdata-undici-0123456789";
    const contentType = `multipart/form-data; boundary=${boundary}`;
    const part = (name: string, value: string, extra = "", at = boundary) =>
      `--${at}\r\nContent-Disposition: form-data; name="${name}"${extra}\r\n\r\n${value}\r\n`;
    const body = (parts: string, epilogue = "") =>
      Buffer.from(`${parts}--${boundary}--\r\n${epilogue}`, "latin1");
    const file = (bytes = "RIFF\u0000\u0001 audio bytes") =>
      part("file", bytes, '; filename="a.wav"\r\nContent-Type: audio/wav');
    const model = (sent: Buffer, type = contentType) =>
      adapters["provider-a"].requestModel("images/edits", sent, type);

    it("is found, written after the file or before it", () => {
      expect(model(body(file() + part("model", "gpt-4o-mini-transcribe")))).toBe("gpt-4o-mini-transcribe");
      expect(model(body(part("model", "gpt-image-2") + file()))).toBe("gpt-image-2");
      // A quoted boundary, the content type's parameters in any case, a preamble before the first part.
      const quoted = `Multipart/Form-Data; charset=utf-8; BOUNDARY="${boundary}"`;
      expect(model(body(part("model", "gpt-image-2")), quoted)).toBe("gpt-image-2");
      expect(model(Buffer.concat([Buffer.from("preamble\r\n"), body(part("model", "gpt-image-2"))]))).toBe(
        "gpt-image-2",
      );
      expect(model(body(file()))).toBeNull();
      expect(model(body(part("model", "")))).toBeNull();
      expect(model(body(part("model", "x".repeat(201))))).toBeNull();
      expect(model(body(part("model", "gpt-image-2")), "multipart/form-data")).toBeNull();
      // A field's value in UTF-8, as the SDKs' forms write it (RFC 7578 5.1).
      const utf8 = (parts: string) => Buffer.from(`${parts}--${boundary}--\r\n`, "utf8");
      expect(model(utf8(part("model", "modèle-ü")))).toBe("modèle-ü");
    });

    it("is read as the provider's multipart parser reads it, not from bytes that only spell a part", () => {
      const spelled = (name: string) =>
        `\r\nContent-Disposition: form-data; name="${name}"\r\n\r\ngpt-4.1-nano`;
      // A later field's value (a prompt) that spells a model part is that field's text.
      expect(model(body(part("model", "gpt-image-2") + part("prompt", `a cat${spelled("model")}`)))).toBe(
        "gpt-image-2",
      );
      // So are a file's bytes.
      expect(model(body(part("model", "gpt-image-2") + file(`PNG${spelled("model")}\r\n`)))).toBe(
        "gpt-image-2",
      );
      // What follows the closing delimiter is the epilogue, which no parser reads.
      expect(model(body(part("model", "gpt-image-2"), part("model", "gpt-4.1-nano")))).toBe("gpt-image-2");
      // Parts delimited by another boundary than the content type's are the preamble's or a value's text.
      const other = part("model", "gpt-4.1-nano", "", "other-boundary");
      expect(model(Buffer.concat([Buffer.from(other), body(part("model", "gpt-image-2"))]))).toBe(
        "gpt-image-2",
      );
      // A part named `filename="model"` or `model2` is not the model.
      expect(model(body(part("model", "gpt-image-2") + part("image", "bytes", '; filename="model"')))).toBe(
        "gpt-image-2",
      );
      expect(model(body(part("model", "gpt-image-2") + part("model2", "gpt-4.1-nano")))).toBe("gpt-image-2");
    });

    it("reads a part's name from its Content-Disposition parameters, a quoted file name whole", () => {
      // A file name (often the app user's) that holds `;name=model;` is the file name's text.
      for (const filename of ["cat;name=model;.png", "a; name=model ;b", 'a\\";name=model;\\"'])
        expect(
          model(body(part("model", "gpt-image-2") + part("image", "PNG", `; filename="${filename}"`))),
          filename,
        ).toBe("gpt-image-2");
      // The name parameter as a token, in any case, with spaces around its `=`, before a file name.
      expect(model(body(file() + part("x", "gpt-image-2").replace('name="x"', "NAME = model")))).toBe(
        "gpt-image-2",
      );
      expect(model(body(file() + part("model", "gpt-image-2", '; filename="m.txt"')))).toBe("gpt-image-2");
      // Parameters no parser reads (an unclosed quote) name no part.
      expect(model(body(part("model", "gpt-image-2", '; filename="open')))).toBeNull();
    });

    it("is read in time linear in the body, over at most 1,000 parts", () => {
      const fields = (count: number) =>
        Array.from({ length: count }, (_, index) => part(`f${index}`, "x")).join("");
      expect(model(body(fields(998) + part("model", "gpt-image-2")))).toBe("gpt-image-2");
      expect(model(body(fields(999) + part("model", "gpt-image-2")))).toBeNull();
      // Parts whose headers never end: each is searched to its own end, not the body's. The bytes
      // the searches pass over are counted (a search to the body's end per part would pass over
      // ~1,000 bodies), not timed.
      for (const repeated of [`--${boundary}\r\nX\r\n`, `--${boundary}\r\n\r\n\r\n`]) {
        const many = body(repeated.repeat(200_000));
        const { result, scanned } = countingSearches(() => model(many));
        expect(result).toBeNull();
        expect(scanned).toBeLessThan(many.length);
      }
    });

    // A client writes the parts' headers (up to 4 KiB each, up to 1,000 parts). The pattern that
    // ends a Content-Disposition's parameters let a run of spaces or tabs after one be taken by
    // either of two runs around an optional `;`: with another byte after the run, every split of it
    // was tried, quadratic in its length (~23 ms a part of 4 KiB, ~18 s for a form of 1,000 such
    // parts, 3.9 MiB). The backtracking is inside V8's regular expressions, where only a clock sees
    // it: 16 times the run against itself (slowdown-at-sixteen-times.ts), linear reading ~16 times.
    it("reads a part's Content-Disposition built to make its patterns backtrack in linear time", () => {
      const crafted = (size: number) =>
        ["\t", " ", "; ", " ;"].map((run) =>
          body(
            part("model", "gpt-image-2") +
              part("model", "x").replace('"model"', `model${run.repeat(size / run.length)}X`),
          ),
        );
      const bodies = new Map([250, 4000].map((size) => [size, crafted(size)]));
      const readAll = (size: number) => {
        for (const sent of bodies.get(size) ?? []) if (model(sent) !== "gpt-image-2") throw new Error("read");
      };
      const slowdown = slowdownAtSixteenTimes(readAll, 250);
      expect(slowdown, `16 times the run took ${slowdown.toFixed(1)} times as long`).toBeLessThan(64);
      // Spaces, a last `;` and tabs still end the parameters.
      expect(model(body(part("model", "x").replace('"model"', "model \t; \t")))).toBe("x");
    });

    it("is the content type's to decide: a form sent as JSON is read as JSON", () => {
      const form = body(part("model", "gpt-image-2"));
      expect(adapters["provider-a"].requestModel("images/edits", form, "application/json")).toBeNull();
      expect(adapters["provider-a"].requestModel("images/edits", form, undefined)).toBeNull();
      const json = Buffer.from('{"model":"gpt-4o-mini","input":"--"}');
      expect(adapters["provider-a"].requestModel("responses", json, "application/json")).toBe("gpt-4o-mini");
      expect(adapters["provider-b"].requestModel("messages", json, "application/json")).toBe("gpt-4o-mini");
    });
  });
});

describe("safe provider paths", () => {
  it.each([
    "chat/completions",
    "models/gemini-2.5-flash:streamGenerateContent",
    "v1/messages",
    "files/file-abc/content",
    "files/report%2520v2",
    "100%25off",
    "files/a;b=c@d:e!$&'()*+,~",
  ])("accepts %s", (path) => expect(safeProviderPath(path)).toBe(path));
  it.each([
    "",
    "../admin",
    "chat/../../admin",
    "%2e%2e/admin",
    "chat/%2E%2e/x",
    "chat%2fcompletions",
    "a\\b",
    "/etc/passwd",
    "https://evil.example/x",
    "//evil.example/x",
    "chat//completions",
    "./chat",
    "a%00b",
    "a%zz",
    "%252e%252e/admin",
    "a%252fb",
    "a%255cb",
    "a%2500b",
    "%25252e%25252e/admin",
    "a|b",
    "a{b}",
    'a"b',
    "a<b>",
    "a^b",
    "a`b",
    "caf\u00e9",
    // A stray escape that decodes to nothing does not hide the traversal behind it.
    "x%252f..%252f..%252fadmin%25",
    "a%252fb%25",
  ])("rejects %j, and says why", (path) => {
    expect(safeProviderPath(path)).toBeNull();
    expect(providerPathProblem(path)).not.toBe("is not one the proxy forwards");
  });
  it.each([
    ["", "is empty"],
    ["chat/completions/", "has an empty segment (a leading, trailing or doubled slash)"],
    ["/chat/completions", "has an empty segment (a leading, trailing or doubled slash)"],
    ["chat/%2E%2e/x", "has a `.` or `..` segment"],
    ["chat%2fcompletions", "has an encoded slash or backslash"],
    ["https://evil.example/x", "reads as an absolute URL (a scheme such as `http:` first)"],
    ["a%zz", "has a `%` that starts no UTF-8 escape (write a percent sign as `%25`)"],
    ["a|b", 'has a character a URL path must percent-encode (such as `|`, `{`, `<`, `"` or `^`)'],
  ])("names the problem of %j: it %s", (path, problem) => expect(providerPathProblem(path)).toBe(problem));
  it.each([
    ["chat/c%6Fmpletions", "chat/completions"],
    ["r%65sponses/resp_1", "responses/resp_1"],
    [
      "models/gemini%2D2.5%2dflash%3AstreamGenerateContent",
      "models/gemini-2.5-flash%3AstreamGenerateContent",
    ],
    ["files/report%2520v2%7e", "files/report%2520v2~"],
  ])("decodes the unreserved characters of %s", (path, normalized) =>
    expect(safeProviderPath(path)).toBe(normalized),
  );
});

/**
 * What `read` returns, and how many bytes the Buffer searches (`indexOf`) it made passed over: from
 * where each started to where it found its value, or to the end.
 */
function countingSearches<T>(read: () => T): { result: T; scanned: number } {
  const original = Buffer.prototype.indexOf;
  let scanned = 0;
  Buffer.prototype.indexOf = function (
    this: Buffer,
    value: string | number | Uint8Array,
    byteOffset?: number,
    encoding?: BufferEncoding,
  ) {
    const at = original.call(this, value, byteOffset, encoding);
    const from =
      typeof byteOffset === "number" ? (byteOffset < 0 ? this.length + byteOffset : byteOffset) : 0;
    scanned +=
      (at === -1 ? this.length : at + (typeof value === "number" ? 1 : value.length)) - Math.max(from, 0);
    return at;
  } as typeof original;
  try {
    return { result: read(), scanned };
  } finally {
    Buffer.prototype.indexOf = original;
  }
}

import { describe, expect, it } from "vitest";
import { type ImageListReading, ImageListScanner } from "./image-list-scanner.js";

const openAi = () => new ImageListScanner("data", ["b64_json", "url"]);
const imagen = () => new ImageListScanner("predictions", ["bytesBase64Encoded", "gcsUri"]);

function scan(scanner: ImageListScanner, text: string, chunkSize = text.length): ImageListReading {
  const bytes = Buffer.from(text);
  for (let at = 0; at < bytes.length; at += chunkSize) scanner.push(bytes.subarray(at, at + chunkSize));
  return scanner.result();
}

const gptImageAnswer = JSON.stringify({
  created: 1_763_000_000,
  background: "opaque",
  data: [{ b64_json: "iVBORw0KGgo+/==" }, { b64_json: "iVBORw0KGgo/+==" }],
  output_format: "png",
  quality: "medium",
  size: "1536x1024",
  usage: { input_tokens: 10, input_tokens_details: { image_tokens: 0, text_tokens: 10 }, output_tokens: 100 },
});

describe("ImageListScanner", () => {
  it("counts the images of a gpt-image answer and reads the size and quality it names", () => {
    expect(scan(openAi(), gptImageAnswer)).toEqual({
      images: 2,
      complete: true,
      size: "1536x1024",
      quality: "medium",
    });
  });

  it("reads the same whichever byte each chunk boundary falls on", () => {
    const answer = JSON.stringify({
      created: 1,
      data: [
        { url: 'https://example.com/a.png?sig=\\"x\\\\', revised_prompt: 'a "data": [{"url": 1}] \\' },
        { revised_prompt: '\\\\\\"b64_json\\"', b64_json: "QUJD" },
      ],
      size: "1024x1024",
    });
    const whole = scan(openAi(), answer);
    expect(whole).toEqual({ images: 2, complete: true, size: "1024x1024", quality: null });
    for (const size of [1, 2, 3, 5, 7, 13]) expect(scan(openAi(), answer, size)).toEqual(whole);
  });

  it("does not take a key inside a string, or the same names deeper in the answer, for the list's", () => {
    const answer = JSON.stringify({
      note: '{"data":[{"b64_json":"x"}]}',
      meta: { data: [{ b64_json: "x" }], size: "1x1" },
      data: [{ b64_json: "QQ==", nested: { url: "u", b64_json: "x" } }, [{ url: "u" }], "url"],
    });
    expect(scan(openAi(), answer, 4)).toEqual({ images: 1, complete: true, size: null, quality: null });
  });

  it("counts an entry once however many image members it has", () => {
    expect(scan(openAi(), '{"data":[{"url":"a","b64_json":"b"}]}').images).toBe(1);
  });

  it("counts only Imagen predictions that hold an image, not filtered ones or the prompt's attributes", () => {
    const answer = JSON.stringify({
      predictions: [
        { bytesBase64Encoded: "QUJD", mimeType: "image/png" },
        { raiFilteredReason: "Filtered by the safety filter." },
        { safetyAttributes: { categories: [], scores: [] }, contentType: "Positive Prompt" },
        { mimeType: "image/png", bytesBase64Encoded: "REVG" },
      ],
    });
    expect(scan(imagen(), answer, 9)).toEqual({ images: 2, complete: true, size: null, quality: null });
  });

  it("reports a cut answer as incomplete, with the images seen so far", () => {
    const reading = scan(openAi(), gptImageAnswer.slice(0, gptImageAnswer.indexOf(',{"b64_json"')));
    expect(reading).toEqual({ images: 1, complete: false, size: null, quality: null });
  });

  it("reads an answer without the list, or no JSON object, as no images", () => {
    expect(scan(imagen(), "{}")).toEqual({ images: 0, complete: true, size: null, quality: null });
    expect(scan(openAi(), '[{"data":[{"url":"u"}]}]').images).toBe(0);
    expect(scan(openAi(), "<html>data</html>").complete).toBe(false);
    expect(scan(openAi(), '{"data": {"url": "u"}}').images).toBe(0);
  });

  it("does not keep a long size or quality value", () => {
    const reading = scan(openAi(), JSON.stringify({ size: "x".repeat(100), quality: "high", data: [] }), 10);
    expect(reading).toEqual({ images: 0, complete: true, size: null, quality: "high" });
  });

  // The base64 is jumped by a native search (Buffer indexOf): only the structural bytes, and those
  // before each quote, are read one by one in JavaScript. Counted, not timed: the bytes of the 9 MiB
  // answer read by index, through a view of each chunk that counts them.
  it("walks a multi-megabyte answer without reading its images byte by byte", () => {
    const image = "A".repeat(3 * 1024 * 1024);
    const answer = Buffer.from(
      JSON.stringify({ created: 1, data: [0, 1, 2].map(() => ({ b64_json: image })), size: "1024x1024" }),
    );
    let bytesRead = 0;
    const counted = (chunk: Buffer) =>
      new Proxy(chunk, {
        get(target, key) {
          if (typeof key === "string" && /^\d+$/.test(key)) bytesRead++;
          const value = Reflect.get(target, key, target);
          return typeof value === "function" ? value.bind(target) : value;
        },
      });
    const scanner = openAi();
    for (let at = 0; at < answer.length; at += 64 * 1024)
      scanner.push(counted(answer.subarray(at, at + 64 * 1024)));
    expect(scanner.result()).toEqual({ images: 3, complete: true, size: "1024x1024", quality: null });
    expect(bytesRead).toBeGreaterThan(0);
    expect(bytesRead).toBeLessThan(1000);
  });
});

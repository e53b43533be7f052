import { repeatedMembers } from "../json-repeated-members.js";
import { byteOrderMarkLength } from "./json-bytes.js";

/**
 * An image generation on a proxy, priced per image from what its answer holds (proxy/
 * image-list-scanner.ts): the answer's top-level list of images, the members of an entry that hold
 * an image, and what the request asked for.
 */
export interface ImageCall {
  /** The answer's top-level member that lists the images. */
  list: string;
  /**
   * Members of a listed entry that hold an image. An entry with none of them is no image (provider
   * C: an image its safety filter withheld, which has only `raiFilteredReason`, or the prompt's own
   * safety attributes, which the SDK reads out of the same list).
   */
  imageKeys: readonly string[];
  /** What the request asked for; its body is read only when the answer is priced. */
  requested(body: Buffer): RequestedImages;
  /**
   * The model the request's body names, read as the provider reads it (the whole JSON: the last
   * `model` member, escapes decoded), where the answer names none; absent where the path names it.
   */
  model?(body: Buffer): string | null;
}

export interface RequestedImages {
  /** How many images were asked for: the request's number, else the provider's default. */
  count: number;
  size: string | null;
  quality: string | null;
  /**
   * The members the body names more than once (repeatedMembers: `n`, `parameters.sampleCount`…),
   * when there are any: which of them the provider reads is unpredictable (RFC 8259 §4), so the
   * price before the call is not read from such a body (it is refused).
   */
  repeated?: readonly string[];
}

/**
 * Provider A `POST images/generations` (JSON): `{"data":[{"b64_json"|"url",…}],…}`. The request's
 * `n` defaults to 1. Edits and variations (multipart) are not priced: an edit is also billed for the
 * images it is given, which the catalogue has no price for, and variations are dall-e-2's only.
 */
export const openAiImageGeneration: ImageCall = {
  list: "data",
  imageKeys: ["b64_json", "url"],
  requested(body) {
    const request = jsonObject(body);
    return withRepeated(body, request, {
      count: wholeCount(request?.n) ?? 1,
      size: stringOrNull(request?.size),
      quality: stringOrNull(request?.quality),
    });
  },
  model(body) {
    const model = jsonObject(body)?.model;
    return typeof model === "string" && model.length <= 200 ? model : null;
  },
};

/**
 * Provider C `POST models/{model}:predict` (Imagen): `{"predictions":[{"bytesBase64Encoded",
 * "mimeType"},…]}` (`gcsUri` on Vertex AI). `parameters.sampleCount` defaults to 4 on the Gemini API.
 * Imagen's prices do not depend on the size.
 */
export const imagenPrediction: ImageCall = {
  list: "predictions",
  imageKeys: ["bytesBase64Encoded", "gcsUri"],
  requested(body) {
    const request = jsonObject(body);
    const parameters = request?.parameters;
    const sampleCount =
      typeof parameters === "object" && parameters !== null
        ? (parameters as Record<string, unknown>).sampleCount
        : undefined;
    return withRepeated(body, request, { count: wholeCount(sampleCount) ?? 4, size: null, quality: null });
  },
};

/** `requested` with the members `body` (a JSON object, `request` as it parsed) names more than once. */
function withRepeated(
  body: Buffer,
  request: Record<string, unknown> | null,
  requested: RequestedImages,
): RequestedImages {
  const repeated = request === null ? [] : repeatedMembers(body);
  return repeated.length === 0 ? requested : { ...requested, repeated };
}

function jsonObject(body: Buffer): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(body.toString("utf8", byteOrderMarkLength(body)));
    return typeof value === "object" && value !== null && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : null;
  } catch {
    return null;
  }
}

function wholeCount(value: unknown): number | null {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 1 ? value : null;
}

function stringOrNull(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

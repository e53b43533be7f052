import { GatewayError } from "../errors.js";

/** A validated /v1/image request (SPEC.md, POST /v1/image). */
export interface ImageRequest {
  prompt: string;
  model?: string;
  size?: `${number}x${number}`;
  aspectRatio?: `${number}:${number}`;
  n: number;
  seed?: number;
  maxImagesPerCall?: number;
  providerOptions: {
    "provider-a"?: { style?: string; quality?: string };
    "provider-c"?: { safetyFilterLevel?: string; personGeneration?: string };
  };
  /** Options that were given but are not supported, reported back as warnings. */
  warnings: string[];
}

const sizePattern = /^([1-9]\d{1,4})x([1-9]\d{1,4})$/;
const ratioPattern = /^([1-9]\d{0,2}):([1-9]\d{0,2})$/;
const knownOptions = {
  "provider-a": ["style", "quality"],
  "provider-c": ["safetyFilterLevel", "personGeneration"],
} as const;

/**
 * Validates the body: a missing or ill-typed field is 400 BAD_REQUEST; values that are malformed
 * or incompatible (size and aspectRatio together, n outside 1..20) are 422 VALIDATION_ERROR.
 */
export function parseImageRequest(body: Record<string, unknown>): ImageRequest {
  const { prompt, model, size, aspectRatio, n, seed, maxImagesPerCall, providerOptions } = body;
  if (typeof prompt !== "string" || prompt.trim() === "")
    throw bad("`prompt` is required and must be a non-empty string");
  const request: ImageRequest = { prompt, n: 1, providerOptions: {}, warnings: [] };
  if (model !== undefined)
    request.model =
      typeof model === "string" && model !== "" ? model : invalid(bad("`model` must be a string"));
  if (size !== undefined && aspectRatio !== undefined)
    throw incompatible("`size` and `aspectRatio` are mutually exclusive: give one of them");
  if (size !== undefined) {
    if (typeof size !== "string") throw bad("`size` must be a string such as 1024x1024");
    if (!sizePattern.test(size))
      throw incompatible("`size` must have the form {width}x{height}, e.g. 1024x1024");
    request.size = size as ImageRequest["size"];
  }
  if (aspectRatio !== undefined) {
    if (typeof aspectRatio !== "string") throw bad("`aspectRatio` must be a string such as 16:9");
    if (!ratioPattern.test(aspectRatio))
      throw incompatible("`aspectRatio` must have the form {width}:{height}, e.g. 16:9");
    request.aspectRatio = aspectRatio as ImageRequest["aspectRatio"];
  }
  if (n !== undefined) {
    if (typeof n !== "number") throw bad("`n` must be a number");
    if (!Number.isInteger(n) || n < 1 || n > 20)
      throw incompatible("`n` must be a whole number from 1 to 20");
    request.n = n;
  }
  if (seed !== undefined) {
    if (typeof seed !== "number" || !Number.isInteger(seed)) throw bad("`seed` must be a whole number");
    request.seed = seed;
  }
  if (maxImagesPerCall !== undefined) {
    if (typeof maxImagesPerCall !== "number") throw bad("`maxImagesPerCall` must be a number");
    if (!Number.isInteger(maxImagesPerCall) || maxImagesPerCall < 1)
      throw incompatible("`maxImagesPerCall` must be a whole number of at least 1");
    request.maxImagesPerCall = maxImagesPerCall;
  }
  if (providerOptions !== undefined) parseProviderOptions(providerOptions, request);
  return request;
}

function parseProviderOptions(value: unknown, request: ImageRequest): void {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw bad("`providerOptions` must be an object");
  for (const [provider, options] of Object.entries(value)) {
    if (provider !== "provider-a" && provider !== "provider-c") {
      request.warnings.push(`providerOptions.${provider} is not supported and was ignored`);
      continue;
    }
    if (typeof options !== "object" || options === null || Array.isArray(options))
      throw bad(`\`providerOptions.${provider}\` must be an object`);
    const kept: Record<string, string> = {};
    for (const [name, option] of Object.entries(options)) {
      if (!(knownOptions[provider] as readonly string[]).includes(name)) {
        request.warnings.push(`providerOptions.${provider}.${name} is not supported and was ignored`);
      } else if (typeof option !== "string")
        throw bad(`\`providerOptions.${provider}.${name}\` must be a string`);
      else kept[name] = option;
    }
    request.providerOptions[provider] = kept;
  }
}

function bad(message: string): GatewayError {
  return new GatewayError("BAD_REQUEST", message);
}

function incompatible(message: string): GatewayError {
  return new GatewayError("VALIDATION_ERROR", message);
}

function invalid(error: GatewayError): never {
  throw error;
}

import { GatewayError } from "../errors.js";
import { isModelName, modelNameRule } from "../providers/model-name.js";
import type { ProviderId } from "../providers/provider-id.js";
import {
  bareModelId,
  findModel,
  modelsFor,
  notAnImageModelOf,
  shutdownNotice,
} from "../usage/model-catalogue.js";

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

/** Provider C's safety levels by the names clients know, onto Imagen's `safetySetting` values. */
export const imagenSafetySettings: Record<string, string> = {
  block_most: "block_low_and_above",
  block_some: "block_medium_and_above",
  block_few: "block_only_high",
  block_fewest: "block_none",
  block_low_and_above: "block_low_and_above",
  block_medium_and_above: "block_medium_and_above",
  block_only_high: "block_only_high",
  block_none: "block_none",
};

/**
 * The provider options and their values (docs/images.md), checked here so that a refusal names the
 * option: the AI SDK checks only `quality` and `personGeneration`, without saying which was wrong.
 * Provider A's `quality` covers gpt-image (low/medium/high/auto) and dall-e-3 (standard/hd), and
 * each model's own list is applied once the model is known (imageModelRules, fitImageRequest);
 * `personGeneration` takes the values of @ai-sdk/google's Imagen options.
 */
const optionValues: Record<"provider-a" | "provider-c", Record<string, readonly string[]>> = {
  "provider-a": {
    style: ["vivid", "natural"],
    quality: ["low", "medium", "high", "xhigh", "max", "auto", "standard", "hd"],
  },
  "provider-c": {
    safetyFilterLevel: Object.keys(imagenSafetySettings),
    personGeneration: ["dont_allow", "allow_adult", "allow_all"],
  },
};

const imageProviders = Object.keys(optionValues) as Array<keyof typeof optionValues>;

/**
 * What each catalogued image model takes where it is narrower than the provider's lists above, by
 * catalogue id (a dated or `models/` name finds its entry through findModel). `quality`, `sizes`
 * and `aspectRatios` list the values it takes (any other is 422); `style: false` means it takes no
 * `style` (dropped with a warning). A model with no entry, or unknown to the catalogue, takes what
 * its provider's lists allow. dall-e-3's sizes are not listed on purpose: the price table's sizes
 * are not the real API's (its `maxSize` bounds them instead). A catalogued provider A model with
 * neither `sizes` nor `sizeRules` takes no size larger than its `maxSize`, else than the largest
 * any catalogued model makes (largestCataloguedImage): a larger one would only be the provider's
 * refusal, after its images were reserved in the body budget (decision 0054).
 */
interface ImageModelRules {
  quality?: readonly string[];
  style?: false;
  sizes?: readonly string[];
  /** The rules a size must meet, for a model that takes any size within them (sizeRules). */
  sizeRules?: SizeRules;
  /** The largest size a model whose sizes are neither listed nor ruled makes (SizeBounds). */
  maxSize?: SizeBounds;
  aspectRatios?: readonly string[];
  /**
   * The longest prompt the provider documents for the model, in characters (counted as code
   * points, promptLength): a longer one is the provider's 400, answered as a 502 (422 instead).
   * None where the provider documents no limit, or one in tokens (Imagen's, the Gemini models'),
   * which Sluice cannot count as the provider does.
   */
  maxPromptChars?: number;
  /**
   * The most images one provider call takes (provider A's `n`, Imagen's `sampleCount`): a
   * `maxImagesPerCall` above it would be the provider's 400, answered as a 502 (422 instead).
   */
  maxImagesPerCall?: number;
}

/**
 * The sizes a model takes by rule rather than from a list: both sides multiples of `multipleOf`,
 * neither longer than `maxSide`, the longer at most `maxAspectRatio` times the shorter, and from
 * `minPixels` to `maxPixels` pixels in all.
 */
interface SizeRules extends SizeBounds {
  multipleOf: number;
  maxAspectRatio: number;
  minPixels: number;
}

/** The largest a size may be: neither side longer than `maxSide`, at most `maxPixels` pixels in all. */
interface SizeBounds {
  maxSide: number;
  maxPixels: number;
}

/**
 * Provider A's images API: "The maximum length is 32000 characters for the GPT image models"
 * (dall-e-3: 4000), in its Create image reference.
 */
const gptImagePromptChars = 32000;

const gptImage: ImageModelRules = {
  quality: ["low", "medium", "high", "auto"],
  style: false,
  sizes: ["1024x1024", "1536x1024", "1024x1536"],
  maxPromptChars: gptImagePromptChars,
  maxImagesPerCall: 10,
};
const imagen: ImageModelRules = { aspectRatios: ["1:1", "3:4", "4:3", "9:16", "16:9"], maxImagesPerCall: 4 };
/**
 * GPT Image 2: any size within the rules of provider A's image generation guide ("Size
 * constraints": the longest edge at most 3840px, both edges multiples of 16px, the long edge at
 * most 3 times the short, 655,360 to 8,294,400 pixels in all; its Create image reference says the
 * same of `gpt-image-2` and its snapshot).
 */
const gptImage2: ImageModelRules = {
  quality: ["low", "medium", "high", "auto"],
  style: false,
  sizeRules: { multipleOf: 16, maxSide: 3840, maxAspectRatio: 3, minPixels: 655_360, maxPixels: 8_294_400 },
  maxPromptChars: gptImagePromptChars,
  maxImagesPerCall: 10,
};
/**
 * The GPT Image 2.6 models: the prompt limit of the GPT image models; no size rules, as provider
 * A's documentation found states GPT Image 2's rules for `gpt-image-2` and the 2.5 models only.
 * Their sizes are bounded by the largest a catalogued model makes (largestCataloguedImage: GPT
 * Image 2's 3840 pixels a side, 8,294,400 in all, which resellers also give as these models' own).
 */
const gptImage26: ImageModelRules = {
  quality: ["low", "medium", "high", "xhigh", "max", "auto"],
  style: false,
  maxPromptChars: gptImagePromptChars,
  maxImagesPerCall: 10,
};
const geminiImage: ImageModelRules = {
  aspectRatios: ["1:1", "2:3", "3:2", "3:4", "4:3", "4:5", "5:4", "9:16", "16:9", "21:9"],
};

export const imageModelRules: Readonly<Record<string, ImageModelRules>> = {
  "gpt-image-1": gptImage,
  "gpt-image-1-mini": gptImage,
  // Sizes at most 1792x1024 either way: provider A's Create image reference lists 1024x1024,
  // 1792x1024 and 1024x1792 for dall-e-3 (SPEC's price table's 1536x1024 fits within them).
  "dall-e-3": {
    quality: ["standard", "hd"],
    maxSize: { maxSide: 1792, maxPixels: 1792 * 1024 },
    maxPromptChars: 4000,
    maxImagesPerCall: 1,
  },
  "gpt-image-2": gptImage2,
  "gpt-image-2.6-sunburst": gptImage26,
  "gpt-image-2.6-flare": gptImage26,
  ...Object.fromEntries(
    modelsFor("provider-c")
      .filter((model) => model.capabilities.image)
      .map((model) => [model.id, model.id.startsWith("imagen-") ? imagen : geminiImage]),
  ),
};

/**
 * The largest image a catalogued model makes, by its sizes, size rules or largest size: no other
 * model's is refused (fitImageRequest), and no image is reserved larger in the body budget
 * (estimatedImageBytes), even for a model the catalogue does not know, which takes any size
 * (decision 0054).
 */
export const largestCataloguedImage: Readonly<SizeBounds> = Object.values(imageModelRules).reduce(
  (largest, rules) => {
    const sides = (rules.sizes ?? []).map((size) => size.split("x").map(Number) as [number, number]);
    const bounds = [rules.sizeRules, rules.maxSize].filter((bound) => bound !== undefined);
    return {
      maxSide: Math.max(largest.maxSide, ...sides.flat(), ...bounds.map((bound) => bound.maxSide)),
      maxPixels: Math.max(
        largest.maxPixels,
        ...sides.map(([width, height]) => width * height),
        ...bounds.map((bound) => bound.maxPixels),
      ),
    };
  },
  { maxSide: 0, maxPixels: 0 },
);

/** largestCataloguedImage's pixels: what no image is reserved larger than (estimatedImageBytes). */
export const largestCataloguedImagePixels = largestCataloguedImage.maxPixels;

/**
 * Fits a parsed request to the project's provider and the model that will run it, before any
 * provider call: a model the catalogue lists but not as an image model of this provider is 422
 * (requireImageModel); the other image provider's options (their values already checked) are
 * dropped with a warning, and a catalogued model's rules (imageModelRules) apply: a value it does
 * not take is 422 VALIDATION_ERROR naming the option and the model, a `style` it does not take is
 * dropped with a warning.
 */
export function fitImageRequest(
  provider: ProviderId,
  modelId: string,
  request: ImageRequest,
  today: Date = new Date(),
): ImageRequest {
  requireImageModel(provider, modelId, today);
  const warnings = [...request.warnings];
  const providerOptions = { ...request.providerOptions };
  for (const other of imageProviders) {
    if (other === provider || providerOptions[other] === undefined) continue;
    delete providerOptions[other];
    warnings.push(`providerOptions.${other} is ignored: this project generates images with ${provider}`);
  }
  const catalogued = findModel(provider, modelId);
  const rules = catalogued ? imageModelRules[catalogued.id] : undefined;
  if (rules) {
    const a = providerOptions["provider-a"];
    requirePromptWithin(request.prompt, rules.maxPromptChars, modelId);
    requireListed("providerOptions.provider-a.quality", a?.quality, rules.quality, modelId);
    requireListed("size", request.size, rules.sizes, modelId);
    requireSizeWithin(request.size, rules.sizeRules, modelId);
    // A size neither listed nor ruled: at most the model's largest, else the catalogue's.
    if (provider === "provider-a" && !rules.sizes && !rules.sizeRules)
      requireSizeAtMost(request.size, rules.maxSize ?? largestCataloguedImage, modelId);
    requireListed("aspectRatio", request.aspectRatio, rules.aspectRatios, modelId);
    requireAtMost(request.maxImagesPerCall, rules.maxImagesPerCall, modelId);
    if (rules.style === false && a?.style !== undefined) {
      const { style: _ignored, ...kept } = a;
      providerOptions["provider-a"] = kept;
      warnings.push(`providerOptions.provider-a.style is not supported by ${modelId} and was ignored`);
    }
  }
  if (provider === "provider-c" && generatesThroughGemini(modelId))
    return fitToGemini(modelId, { ...request, providerOptions, warnings });
  return { ...request, providerOptions, warnings };
}

/**
 * Provider C's Gemini image models (any `gemini-` name, as the AI SDK tells them from Imagen's)
 * generate through generateContent: one image per call (the AI SDK refuses more in one, so n is
 * sent as n calls), a seed its API takes (32-bit), and Imagen's safety and person parameters mean
 * nothing there (dropped with a warning rather than sent where the provider would refuse the
 * request).
 */
function fitToGemini(modelId: string, request: ImageRequest): ImageRequest {
  if (request.maxImagesPerCall !== undefined && request.maxImagesPerCall > 1)
    throw new GatewayError(
      "VALIDATION_ERROR",
      `\`maxImagesPerCall\` must be 1 for model ${modelId}: it generates one image per call`,
    );
  // Sent as generateContent's `generationConfig.seed`, an int32: a larger one is the provider's 400.
  if (request.seed !== undefined && (request.seed < geminiSeed.min || request.seed > geminiSeed.max))
    throw new GatewayError(
      "VALIDATION_ERROR",
      `\`seed\` must be a whole number from ${geminiSeed.min} to ${geminiSeed.max} for model ${modelId}`,
      { details: { option: "seed", ...geminiSeed } },
    );
  const c = request.providerOptions["provider-c"];
  if (!c) return { ...request, maxImagesPerCall: 1 };
  for (const option of Object.keys(c))
    request.warnings.push(
      `providerOptions.provider-c.${option} is not supported by ${modelId} and was ignored`,
    );
  const { "provider-c": _imagenOnly, ...providerOptions } = request.providerOptions;
  return { ...request, providerOptions, maxImagesPerCall: 1 };
}

/** The seeds a Gemini image model takes: its API's `generationConfig.seed` is a signed 32-bit integer. */
const geminiSeed = { min: -(2 ** 31), max: 2 ** 31 - 1 } as const;

/** Whether provider C generates with this model through a Gemini image model (any `gemini-` name), not Imagen. */
export const generatesThroughGemini = (modelId: string) => bareModelId(modelId).startsWith("gemini-");

/**
 * A chat, embedding or other provider's model that the catalogue lists would only be refused by
 * the provider (a 502): it is 422 naming the model and the image models to name instead. A model
 * no catalogue lists is sent on, as the analysis endpoints and the admin API trust one: catalogues
 * lag the providers' new models.
 */
function requireImageModel(provider: ProviderId, modelId: string, today: Date): void {
  const refused = notAnImageModelOf(provider, modelId);
  if (refused === null) return;
  const modelProvider = refused.listedBy;
  const served = servedImageModels(provider, today);
  throw new GatewayError(
    "VALIDATION_ERROR",
    `model ${JSON.stringify(modelId)} ${modelProvider === provider ? "is not an image model" : `is a ${modelProvider} model`}; this project generates images with ${provider}, ${served.length > 0 ? `whose image models are ${served.join(", ")}` : "none of whose catalogued image models is still served"}`,
    { details: { model: modelId, provider, modelProvider } },
  );
}

/**
 * `provider`'s catalogued image models still served on `today`, to pick one from: those without
 * a shutdown date first, then those with one, each with its date. One its provider has shut down
 * (gpt-image-1, Imagen 4) is left out: named, it would fail at the provider.
 */
function servedImageModels(provider: ProviderId, today: Date): string[] {
  const served = modelsFor(provider).filter(
    (model) => model.capabilities.image && shutdownNotice(provider, model.id, today) === null,
  );
  return [
    ...served.filter((model) => !model.deprecated).map((model) => model.id),
    ...served.flatMap((model) =>
      model.deprecated ? [`${model.id} (until ${model.deprecated.shutdown})`] : [],
    ),
  ];
}

function requireListed(
  option: string,
  value: string | undefined,
  allowed: readonly string[] | undefined,
  modelId: string,
): void {
  if (value === undefined || !allowed || allowed.includes(value)) return;
  throw new GatewayError(
    "VALIDATION_ERROR",
    `\`${option}\` must be one of: ${allowed.join(", ")} for model ${modelId}`,
    {
      details: { option, allowed },
    },
  );
}

/** A prompt over the model's documented characters is 422 naming its length and the limit. */
function requirePromptWithin(prompt: string, max: number | undefined, modelId: string): void {
  if (max === undefined || prompt.length <= max) return;
  const length = promptLength(prompt);
  if (length <= max) return;
  throw new GatewayError(
    "VALIDATION_ERROR",
    `\`prompt\` has ${length} characters; model ${modelId} takes at most ${max}`,
    { details: { option: "prompt", length, max } },
  );
}

/**
 * A prompt's characters as Unicode code points (as Python's `len` counts them): a character outside
 * the Basic Multilingual Plane, an emoji, is one, not the two UTF-16 units of `length`; an unpaired
 * surrogate is one. Never more than `length` either, so a prompt the provider takes by either count
 * is not refused. Counted only for a prompt whose `length` is over the limit.
 */
function promptLength(prompt: string): number {
  // No surrogate at all (any one-byte string, which V8 answers without a scan): `length` it is.
  if (!surrogate.test(prompt)) return prompt.length;
  let length = prompt.length;
  for (let index = 0; index < prompt.length - 1; index++) {
    const unit = prompt.charCodeAt(index);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = prompt.charCodeAt(index + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        length--;
        index++;
      }
    }
  }
  return length;
}

const surrogate = /[\uD800-\uDFFF]/;

/** A size outside the model's size rules is 422 naming the rule it breaks, with all of them in `details`. */
function requireSizeWithin(size: string | undefined, rules: SizeRules | undefined, modelId: string): void {
  if (size === undefined || rules === undefined) return;
  const [width, height] = size.split("x").map(Number) as [number, number];
  const longer = Math.max(width, height);
  const shorter = Math.min(width, height);
  const pixels = width * height;
  const broken =
    width % rules.multipleOf !== 0 || height % rules.multipleOf !== 0
      ? `its width and height must both be multiples of ${rules.multipleOf}`
      : longer > rules.maxSide
        ? `its longer side must be at most ${rules.maxSide} pixels`
        : longer > shorter * rules.maxAspectRatio
          ? `its longer side must be at most ${rules.maxAspectRatio} times its shorter side (${rules.maxAspectRatio}:1)`
          : pixels < rules.minPixels || pixels > rules.maxPixels
            ? `it must have from ${grouped(rules.minPixels)} to ${grouped(rules.maxPixels)} pixels, not ${grouped(pixels)}`
            : null;
  if (broken === null) return;
  throw new GatewayError("VALIDATION_ERROR", `\`size\` ${size} does not fit model ${modelId}: ${broken}`, {
    details: {
      option: "size",
      multipleOf: rules.multipleOf,
      maxSide: rules.maxSide,
      maxAspectRatio: `${rules.maxAspectRatio}:1`,
      minPixels: rules.minPixels,
      maxPixels: rules.maxPixels,
    },
  });
}

/**
 * A size larger than `bounds` (a longer side, or more pixels) is 422 naming the bound it passes,
 * with both in `details`: what the model makes no larger than, not a rule of its own.
 */
function requireSizeAtMost(size: string | undefined, bounds: SizeBounds, modelId: string): void {
  if (size === undefined) return;
  const [width, height] = size.split("x").map(Number) as [number, number];
  const pixels = width * height;
  const broken =
    Math.max(width, height) > bounds.maxSide
      ? `its longer side must be at most ${bounds.maxSide} pixels`
      : pixels > bounds.maxPixels
        ? `it must have at most ${grouped(bounds.maxPixels)} pixels, not ${grouped(pixels)}`
        : null;
  if (broken === null) return;
  throw new GatewayError("VALIDATION_ERROR", `\`size\` ${size} does not fit model ${modelId}: ${broken}`, {
    details: { option: "size", maxSide: bounds.maxSide, maxPixels: bounds.maxPixels },
  });
}

/** 8294400 as 8,294,400, whatever the locale. */
const grouped = (count: number) => String(count).replace(/\B(?=(\d{3})+$)/g, ",");

function requireAtMost(maxImagesPerCall: number | undefined, max: number | undefined, modelId: string): void {
  if (maxImagesPerCall === undefined || max === undefined || maxImagesPerCall <= max) return;
  throw new GatewayError(
    "VALIDATION_ERROR",
    `\`maxImagesPerCall\` must be at most ${max} for model ${modelId}: it generates at most ${max} per call`,
    { details: { option: "maxImagesPerCall", max } },
  );
}

/**
 * Validates the body: a missing or ill-typed field is 400 BAD_REQUEST; values that are malformed
 * or incompatible (size and aspectRatio together, n outside 1..20, a provider option value not
 * listed for it) are 422 VALIDATION_ERROR.
 */
export function parseImageRequest(body: Record<string, unknown>): ImageRequest {
  const { prompt, model, size, aspectRatio, n, seed, maxImagesPerCall, providerOptions } = body;
  if (typeof prompt !== "string" || prompt.trim() === "")
    throw bad("`prompt` is required and must be a non-empty string (not only whitespace)");
  const request: ImageRequest = { prompt, n: 1, providerOptions: {}, warnings: [] };
  if (model !== undefined) {
    if (typeof model !== "string") throw bad("`model` must be a string");
    // It becomes part of the provider's URL (provider C: `models/{model}:predict`); "" is malformed.
    if (!isModelName(model)) throw incompatible(`\`model\` ${modelNameRule}`);
    request.model = model;
  }
  if (size !== undefined && aspectRatio !== undefined)
    throw incompatible("`size` and `aspectRatio` are mutually exclusive: give one of them");
  if (size !== undefined) {
    if (typeof size !== "string") throw bad("`size` must be a string such as 1024x1024");
    if (!sizePattern.test(size))
      throw incompatible(
        /^\d{1,20}x\d{1,20}$/.test(size)
          ? `\`size\` ${size} is out of range: width and height are each from 10 to 99999 pixels`
          : "`size` must have the form {width}x{height}, e.g. 1024x1024",
      );
    request.size = size as ImageRequest["size"];
  }
  if (aspectRatio !== undefined) {
    if (typeof aspectRatio !== "string") throw bad("`aspectRatio` must be a string such as 16:9");
    if (!ratioPattern.test(aspectRatio))
      throw incompatible(
        /^\d{1,20}:\d{1,20}$/.test(aspectRatio)
          ? `\`aspectRatio\` ${aspectRatio} is out of range: width and height are each from 1 to 999`
          : "`aspectRatio` must have the form {width}:{height}, e.g. 16:9",
      );
    request.aspectRatio = aspectRatio as ImageRequest["aspectRatio"];
  }
  if (n !== undefined) {
    if (typeof n !== "number") throw bad("`n` must be a number");
    if (!Number.isInteger(n) || n < 1 || n > 20)
      throw incompatible("`n` must be a whole number from 1 to 20");
    request.n = n;
  }
  if (seed !== undefined) {
    if (typeof seed !== "number") throw bad("`seed` must be a number");
    if (!Number.isInteger(seed)) throw incompatible("`seed` must be a whole number");
    request.seed = seed;
  }
  if (maxImagesPerCall !== undefined) {
    if (typeof maxImagesPerCall !== "number") throw bad("`maxImagesPerCall` must be a number");
    if (!Number.isInteger(maxImagesPerCall) || maxImagesPerCall < 1)
      throw incompatible("`maxImagesPerCall` must be a whole number of at least 1");
    request.maxImagesPerCall = maxImagesPerCall;
  }
  const unknownFields = Object.keys(body).filter((field) => !Object.hasOwn(imageFields, field));
  if (unknownFields.length > 0) request.warnings.push(ignoredFields(unknownFields));
  if (providerOptions !== undefined) parseProviderOptions(providerOptions, request);
  return request;
}

/** The fields /v1/image takes (SPEC.md); any other is ignored with a warning (ignoredFields). */
const imageFields = {
  prompt: true,
  model: true,
  size: true,
  aspectRatio: true,
  n: true,
  seed: true,
  maxImagesPerCall: true,
  providerOptions: true,
} as const;

/**
 * One warning for the fields of the body /v1/image does not take, as for unknown provider options:
 * a client gets told that what it asked for was not done (a `quality` given at the top, as
 * provider A's own API takes it, generated and billed the default quality unsaid). A field that
 * is a provider option is named where it goes.
 */
function ignoredFields(fields: string[]): string {
  const misplaced = fields
    .flatMap((field) =>
      imageProviders
        .filter((provider) => Object.hasOwn(optionValues[provider], field))
        .map((provider) => `providerOptions.${provider}.${field}`),
    )
    .slice(0, namedInWarning);
  const warning = ignored(fields);
  return misplaced.length > 0
    ? `${warning}: provider options go in providerOptions (${misplaced.join(", ")})`
    : warning;
}

/**
 * At most this many members in `providerOptions` and in each provider's options: there are two
 * image providers of two options each, and every unknown one costs a word in a warning.
 */
const maxProviderOptions = 100;

function parseProviderOptions(value: unknown, request: ImageRequest): void {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw bad("`providerOptions` must be an object");
  const unknownProviders: string[] = [];
  for (const [provider, options] of entriesWithin("providerOptions", value)) {
    if (provider !== "provider-a" && provider !== "provider-c") {
      unknownProviders.push(`providerOptions.${provider}`);
      continue;
    }
    if (typeof options !== "object" || options === null || Array.isArray(options))
      throw bad(`\`providerOptions.${provider}\` must be an object`);
    const kept: Record<string, string> = {};
    const unknown: string[] = [];
    for (const [name, option] of entriesWithin(`providerOptions.${provider}`, options)) {
      const path = `providerOptions.${provider}.${name}`;
      const allowed = Object.hasOwn(optionValues[provider], name) ? optionValues[provider][name] : undefined;
      if (!allowed) unknown.push(path);
      else if (typeof option !== "string") throw bad(`\`${path}\` must be a string`);
      else if (!allowed.includes(option))
        throw new GatewayError("VALIDATION_ERROR", `\`${path}\` must be one of: ${allowed.join(", ")}`, {
          details: { option: path, allowed },
        });
      else kept[name] = option;
    }
    if (unknown.length > 0) request.warnings.push(ignored(unknown));
    request.providerOptions[provider] = kept;
  }
  if (unknownProviders.length > 0) request.warnings.push(ignored(unknownProviders));
}

/** The members of an options object; more than maxProviderOptions is 422 naming the object. */
function entriesWithin(path: string, options: object): Array<[string, unknown]> {
  const entries = Object.entries(options);
  if (entries.length > maxProviderOptions)
    throw new GatewayError(
      "VALIDATION_ERROR",
      `\`${path}\` has ${entries.length} members; at most ${maxProviderOptions} are taken (docs/images.md lists the provider options)`,
      { details: { option: path, count: entries.length, max: maxProviderOptions } },
    );
  return entries;
}

/**
 * One warning for the unknown options of one object, whatever their number: the first few named
 * (a long name cut), then how many more, so that the answer does not grow with the request.
 */
function ignored(paths: string[]): string {
  const named = paths
    .slice(0, namedInWarning)
    .map((path) => (path.length > 80 ? `${path.slice(0, 80)}…` : path));
  if (paths.length === 1) return `${named[0]} is not supported and was ignored`;
  const more = paths.length - named.length;
  const list =
    more > 0
      ? `${named.join(", ")} and ${more} more`
      : `${named.slice(0, -1).join(", ")} and ${named.at(-1)}`;
  return `${list} are not supported and were ignored`;
}

const namedInWarning = 3;

function bad(message: string): GatewayError {
  return new GatewayError("BAD_REQUEST", message);
}

function incompatible(message: string): GatewayError {
  return new GatewayError("VALIDATION_ERROR", message);
}

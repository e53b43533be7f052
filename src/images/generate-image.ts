import { randomUUID } from "node:crypto";
import { GatewayError } from "../errors.js";
import { deadlineSignal } from "../net/deadline-signal.js";
import type { AiSdkModels, SdkImageModel } from "../providers/ai-sdk-provider.js";
import type { AnswerFinish } from "../providers/answer-finish-reason.js";
import type { ProviderId } from "../providers/provider-id.js";
import { providerRefusal, refusalOfFailedCall } from "../providers/provider-refusal.js";
import {
  apiCallFailure,
  isProviderTimeout,
  providerTimeout,
  responseTooLargeFailure,
  successfulAnswerUnread,
} from "../providers/sdk-call-failure.js";
import { usageFromProviderC } from "../providers/usage-from-json.js";
import { quotesKey } from "../proxy/reflected-key-mask.js";
import type { Project } from "../storage/project-repository.js";
import { decodeForgivingBase64, isPaddedBase64 } from "../structured/base64.js";
import { sniffImageType } from "../structured/image-input.js";
import { bareModelId, defaultModel, findModel } from "../usage/model-catalogue.js";
import { costOfTokens } from "../usage/token-cost.js";
import { sumOrUnknown, type TokenUsage, tokenCount } from "../usage/token-usage.js";
import { type AnswerReservation, answerBytes, estimatedImageBytes } from "./image-answer-size.js";
import { imageCost } from "./image-cost.js";
import {
  fitImageRequest,
  generatesThroughGemini,
  type ImageRequest,
  imagenSafetySettings,
} from "./image-request.js";
import { type VaultStore, vaultPath } from "./vault-store.js";

/** SPEC.md's image generation result. */
export interface ImageResult {
  images: Array<{ base64: string; mediaType: string; url?: string; path?: string }>;
  warnings?: string[];
  providerMetadata?: Record<string, unknown>;
}

export interface ImageGenerationDeps {
  models: AiSdkModels;
  vault: VaultStore;
  vaultUrlTtlSeconds: number;
  /** Time allowed to store one image in the vault (SLUICE_VAULT_TIMEOUT_MS). */
  vaultTimeoutMs: number;
  timeoutMs: number;
  now: () => Date;
  /** The image model of each image provider for calls that name none (SLUICE_PROVIDER_x_IMAGE_MODEL). */
  defaultImageModels: DefaultImageModels;
}

export type DefaultImageModels = Readonly<Record<"provider-a" | "provider-c", string>>;

/**
 * The model a request names (SPEC: it overrides the project's model), else the project's model when
 * the catalogue knows it as an image model, else the provider's default image model (SPEC's first,
 * unless SLUICE_PROVIDER_x_IMAGE_MODEL names another); null when the provider has none. A project's
 * chat model (for the analysis endpoints) is never sent here. A `models/` name is given without that
 * prefix: the AI SDK's Imagen model adds it to the URL again.
 */
export function imageModelFor(
  provider: ProviderId,
  project: Pick<Project, "model">,
  request: Pick<ImageRequest, "model">,
  defaults: DefaultImageModels,
): string | null {
  if (request.model) return bareModelId(request.model);
  if (project.model && findModel(provider, project.model)?.capabilities.image)
    return bareModelId(project.model);
  return provider === "provider-b" ? null : bareModelId(defaults[provider]);
}

/**
 * Generates images through the AI SDK (which batches n over the model's images-per-call limit, or
 * `maxImagesPerCall`), prices the execution, and stores the images in the vault when the project
 * asks. `onBilled` hears the cost (and the tokens the provider reported) as soon as the provider has
 * answered, so a later failure (a vault write) can still record what the generation cost.
 *
 * A model of SPEC.md's price table is priced per image (imageCost); a model the catalogue prices by
 * the token (the GPT Image 2 and Gemini image models) by the tokens each provider call reports,
 * image tokens at their own prices, as the proxies price it.
 *
 * `reservation` counts the images the call will hold (decision 0054): reserved once the request is
 * fitted (a 422 comes first) and before any provider call, settled at their real size once they come.
 * Before it, a call whose price the table gives before it runs (its model, quality and size priced
 * per image) tells it to `call.priceKnown`, which refuses it (throws) when it would pass the
 * project's spend cap: nothing reserved, nothing sent.
 */
export async function generateImages(
  deps: ImageGenerationDeps,
  call: {
    project: Project;
    provider: ProviderId;
    providerKey: string;
    priceKnown?: (costUsd: number) => void | Promise<void>;
  },
  request: ImageRequest,
  onBilled: (costUsd: number | null, usage: TokenUsage | null) => void = () => {},
  /** Aborts the provider calls early: the client went away. */
  signal?: AbortSignal,
  reservation?: AnswerReservation,
): Promise<{ result: ImageResult; costUsd: number | null; usage: TokenUsage | null }> {
  const modelId = imageModelFor(call.provider, call.project, request, deps.defaultImageModels);
  if (!modelId || !defaultModel(call.provider, "image"))
    throw new GatewayError(
      "VALIDATION_ERROR",
      `${call.provider} has no image models; use a project of provider-a or provider-c`,
    );
  // What this provider and model cannot take is refused (422) or dropped here, before any call.
  const fitted = fitImageRequest(call.provider, modelId, request, deps.now());
  const a = fitted.providerOptions["provider-a"];
  const c = fitted.providerOptions["provider-c"];
  const warnings = [...fitted.warnings];
  const extraBody = extraParameters(call.provider, a?.style, c?.safetyFilterLevel);
  const ai = await import("ai");
  const sdkModel = await deps.models.image(call.provider, modelId, call.providerKey, extraBody);
  if (!sdkModel) throw new GatewayError("VALIDATION_ERROR", `${call.provider} has no image models`);
  // `answered`: what provider A's answer says one image was generated at, over what was asked.
  const costOf = (images: number, answered?: AnsweredImage) =>
    imageCost({
      provider: call.provider,
      model: modelId,
      quality: answered?.quality ?? a?.quality,
      size: answered?.size ?? fitted.size,
      aspectRatio: fitted.aspectRatio,
      n: images,
    }).costUsd;
  const tokenPriced = findModel(call.provider, modelId)?.pricing != null;
  // The price of the images asked for, as the table gives it before the call (what the answer names
  // may price them otherwise: gpt-image's `auto` quality has no price until then). A model priced by
  // the token, or not in the table, has none: it counts as decision 0057 says.
  const knownPrice = tokenPriced ? null : costOf(fitted.n);
  if (knownPrice !== null) {
    const told = call.priceKnown?.(knownPrice);
    if (told instanceof Promise) await told;
  }
  // Each call's images by what its answer names (provider A), else by the request: the same rule
  // whether every call answered or some failed after others were billed.
  const billedCost = (calls: BilledCall[]) =>
    tokenPriced
      ? tokenCost(call.provider, modelId, calls)
      : imagesCost(calls, call.provider === "provider-a", costOf);
  // Imagen leaves out the images its filter withheld unless asked for their reason: an answer
  // with fewer images than asked is the filter's doing (a Gemini image model says why, each call).
  const shortfallFiltered = call.provider === "provider-c" && !generatesThroughGemini(modelId);
  // A Gemini image model's calls are each made by a model built for that call alone, whose fetch
  // notes its answer's finish reason: the calls of one request run at once.
  const modelForCall =
    call.provider === "provider-c" && generatesThroughGemini(modelId)
      ? async (finish: AnswerFinish) =>
          (await deps.models.image(call.provider, modelId, call.providerKey, extraBody, finish)) ?? sdkModel
      : null;
  const { model, billedCalls } = countingBilledCalls(ai, sdkModel, call.provider, modelForCall);
  // Not AbortSignal.any with AbortSignal.timeout, whose timer a garbage collection can take
  // (deadline-signal.ts): the call would then run past its deadline.
  reservation?.reserve(fitted.n, estimatedImageBytes(call.provider, fitted));
  const deadline = deadlineSignal(deps.timeoutMs, signal);
  const generated = await ai
    .generateImage({
      model,
      prompt: fitted.prompt,
      n: fitted.n,
      ...(fitted.size ? { size: fitted.size } : {}),
      ...(fitted.aspectRatio ? { aspectRatio: fitted.aspectRatio } : {}),
      ...(fitted.seed !== undefined ? { seed: fitted.seed } : {}),
      ...(fitted.maxImagesPerCall ? { maxImagesPerCall: fitted.maxImagesPerCall } : {}),
      providerOptions: {
        ...(a?.quality ? { openai: { quality: a.quality } } : {}),
        ...(c?.personGeneration ? { google: { personGeneration: c.personGeneration } } : {}),
      },
      maxRetries: 0,
      abortSignal: deadline.signal,
    })
    .catch(async (error: unknown) => {
      // n split over several calls: the batches that did answer were billed all the same.
      const billed = await billedCalls();
      const paid = billed.filter(isPaid);
      if (paid.length > 0) onBilled(billedCost(paid), summedUsage(paid));
      throw imageFailure(ai, error, call.provider, modelId, deps.now(), billed);
    })
    .finally(deadline.clear);
  reservation?.settle(answerBytes(generated.images));
  const calls = await billedCalls();
  const paid = calls.filter(isPaid);
  const costUsd = billedCost(paid);
  const usage = summedUsage(paid);
  onBilled(costUsd, usage);
  // The same warning comes once per provider call (a Gemini image model makes one per image).
  for (const warning of new Set(generated.warnings.map(describeWarning)))
    if (!warnings.includes(warning)) warnings.push(warning);
  warnings.push(...withheldWarnings(calls, fitted.n, shortfallFiltered));
  const images = await storeImages(
    deps,
    call.project,
    generated.images.map((image) => asImage(image, call.provider)),
    signal,
  );
  const result: ImageResult = { images };
  if (warnings.length > 0) result.warnings = warnings;
  // A revised prompt that quotes the provider key (a compatible server that echoes the request can
  // write it there) is left out, as a prompt not revised is: the client holds only a share of the key.
  const revised = (
    generated.providerMetadata?.openai as { images?: Array<{ revisedPrompt?: string } | null> } | undefined
  )?.images?.map((image) =>
    image?.revisedPrompt && !quotesKey(image.revisedPrompt, call.providerKey) ? image.revisedPrompt : null,
  );
  if (call.provider === "provider-a" && revised?.some((prompt) => prompt !== null)) {
    result.providerMetadata = {
      "provider-a": { images: revised.map((prompt) => (prompt === null ? {} : { revisedPrompt: prompt })) },
    };
  }
  return { result, costUsd, usage };
}

/** What provider A's answer says of an image it generated (gpt-image models name both; dall-e neither). */
type AnsweredImage = { size?: string; quality?: string } | null;

/**
 * The calls' images priced per image. With `byAnswer` (provider A), a call whose answer names each
 * image's size and quality (a gpt-image model's `auto` resolved to what it generated) prices each
 * image by them, as the proxy does; any other call's images are priced by the request (`priceOf`
 * with no answer). Null when any image has no price.
 */
function imagesCost(
  calls: BilledCall[],
  byAnswer: boolean,
  priceOf: (images: number, answered?: AnsweredImage) => number | null,
): number | null {
  let total = 0;
  for (const billed of calls) {
    const prices =
      byAnswer && billed.answered?.length === billed.images
        ? billed.answered.map((image) => priceOf(1, image))
        : [priceOf(billed.images)];
    for (const price of prices) {
      if (price === null) return null;
      total += price;
    }
  }
  return Math.round(total * 1e9) / 1e9;
}

/**
 * One provider call that answered: the images it asked for and returned, the tokens it reported
 * (null: none), and what its answer says of images it did not return (docs/decisions/0020):
 * - `filtered`: the provider's filter withheld them: Imagen's `raiFilteredReason`, a Gemini image
 *   model's `IMAGE_SAFETY` or blocked prompt (the AI SDK marks such an answer not retryable), or its
 *   `IMAGE_PROHIBITED_CONTENT` or `IMAGE_RECITATION` (ordinary finishes to the SDK);
 * - `noImage`: a Gemini image model's `NO_IMAGE`, the model answered without one.
 */
interface BilledCall {
  asked: number;
  images: number;
  usage: TokenUsage | null;
  /** Provider A: what its answer says of each image it returned; absent for an answer not read. */
  answered?: AnsweredImage[];
  /** The status of the provider's content-filter refusal of this call, which billed nothing. */
  refused?: number;
  filtered: boolean;
  noImage: boolean;
}

/** A Gemini image model's finish reasons for an image its filter stopped, beyond what the SDK marks. */
const filteredFinishes = new Set(["IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION"]);

/**
 * The warnings for images asked for and not returned by calls that did answer: those the provider's
 * filter withheld, and the rest (a Gemini image model's `NO_IMAGE` or `IMAGE_OTHER`, or no word).
 * `shortfallFiltered`: images missing from an answer were withheld by the filter (Imagen's way),
 * whatever it says.
 */
function withheldWarnings(calls: BilledCall[], asked: number, shortfallFiltered: boolean): string[] {
  let filtered = 0;
  let missing = 0;
  for (const billed of calls) {
    const short = Math.max(0, billed.asked - billed.images);
    if (billed.filtered || shortfallFiltered) filtered += short;
    else missing += short;
  }
  const count = (images: number) => `${images} of ${asked} images ${images === 1 ? "was" : "were"}`;
  return [
    ...(filtered > 0 ? [`${count(filtered)} withheld by the provider's safety filter`] : []),
    ...(missing > 0 ? [`${count(missing)} not generated by the provider`] : []),
  ];
}

/**
 * The model, wrapped to note what each provider call returns. The AI SDK sends one call per batch
 * and fails as soon as one fails; `billedCalls` waits for the calls still under way and gives those
 * that answered (the ones the provider billed), and those the provider's content filter refused
 * (`refused`, billed nothing). A refused call answers the SDK as a call whose images were all
 * withheld, so the images of the other calls are answered with a warning, as when Imagen or a
 * Gemini image model withholds some (a request whose every call was refused is still 422).
 *
 * `modelForCall`, when given, makes each call instead of `model`, with the same parameters: a model
 * built for that call, which notes its answer's finish reason in the `finish` it is given. The note
 * is bound to the call by the model that makes it, not by when its answer comes.
 */
function countingBilledCalls(
  ai: typeof import("ai"),
  model: SdkImageModel,
  provider: ProviderId,
  modelForCall: ((finish: AnswerFinish) => Promise<SdkImageModel>) | null,
) {
  const calls: Array<Promise<BilledCall | null>> = [];
  const counting = ai.wrapImageModel({
    model,
    middleware: {
      specificationVersion: "v3",
      wrapGenerate: ({ doGenerate, params }) => {
        const finish: AnswerFinish = { reason: null };
        const answered = modelForCall
          ? modelForCall(finish).then((own) => own.doGenerate(params))
          : Promise.resolve(doGenerate());
        let refused: number | null = null;
        const result = answered.catch((error: unknown) => {
          refused = contentRefusalStatus(ai, provider, error);
          if (refused === null) throw error;
          return noImagesAnswer(model.modelId);
        });
        calls.push(
          result.then(
            (answer): BilledCall =>
              refused !== null
                ? { asked: params.n, images: 0, usage: null, filtered: true, noImage: false, refused }
                : {
                    asked: params.n,
                    images: answer.images.length,
                    usage: usageOfAnswer(provider, answer),
                    ...answeredImages(answer),
                    filtered:
                      (answer as { isRetryable?: boolean }).isRetryable === false ||
                      filteredFinishes.has(finish.reason ?? ""),
                    noImage: finish.reason === "NO_IMAGE",
                  },
            (error: unknown) => generatedUnread(error, params.n),
          ),
        );
        return result;
      },
    },
  });
  const billedCalls = async () =>
    (await Promise.all(calls)).filter((billed): billed is BilledCall => billed !== null);
  return { model: counting, billedCalls };
}

/**
 * A call whose successful (2xx) answer Sluice could not read: its images were generated, and
 * billed, all the same. That is an answer larger than SLUICE_MAX_PROVIDER_RESPONSE_BYTES (Sluice
 * read no more than the cap of it), and a JSON answer the AI SDK could not use: cut short on its
 * way, or with no image data it takes (images given as URLs, not base64). Counted as the images it
 * asked for, at the size and quality the request named (the answer, which names them, was not
 * read), and with no tokens (its usage was not read either): a per-image price is known where the
 * request names one, a token price never. Null for any other failure, a 2xx that is no JSON (a
 * proxy's page, not the provider's answer) among them.
 */
function generatedUnread(error: unknown, asked: number): BilledCall | null {
  return successfulAnswerUnread(error)
    ? { asked, images: asked, usage: null, filtered: false, noImage: false }
    : null;
}

/**
 * The status of a call the provider's content filter refused (refusalOfFailedCall's contentPolicy:
 * provider A's 400 `moderation_blocked` or `content_policy_violation`, Imagen's 400), else null.
 */
function contentRefusalStatus(ai: typeof import("ai"), provider: ProviderId, error: unknown): number | null {
  if (!ai.APICallError.isInstance(error) || refusalOfFailedCall(provider, error) !== "contentPolicy")
    return null;
  return error.statusCode ?? 400;
}

/** A call the provider billed: any but one its content filter refused. */
const isPaid = (billed: BilledCall) => billed.refused === undefined;

/** A provider call's answer with no image, none to retry for: what a refused call tells the SDK. */
const noImagesAnswer = (modelId: string) => ({
  images: [] as string[],
  warnings: [],
  isRetryable: false,
  usage: undefined,
  response: { timestamp: new Date(), modelId, headers: undefined },
});

/** Provider A's answer's word on each image it returned (its size and quality), when it has one. */
function answeredImages(answer: ImageAnswer): { answered?: AnsweredImage[] } {
  const images = (answer.providerMetadata?.openai as { images?: unknown } | undefined)?.images;
  return Array.isArray(images) ? { answered: images as AnsweredImage[] } : {};
}

type ImageAnswer = {
  usage?: { inputTokens?: number | undefined; outputTokens?: number | undefined } | undefined;
  providerMetadata?: Record<string, unknown> | undefined;
};

/**
 * The tokens one provider call reported. Provider C's answer carries its usageMetadata, read as the
 * proxy reads it (generated images apart, by modality); provider A's images API reports its input
 * images apart, which the AI SDK shares out over the images (`imageTokens`). Null when the answer
 * reports no tokens (DALL·E, Imagen).
 */
function usageOfAnswer(provider: ProviderId, answer: ImageAnswer): TokenUsage | null {
  const metadata = answer.providerMetadata as
    | { google?: { usageMetadata?: unknown }; openai?: { images?: Array<{ imageTokens?: unknown } | null> } }
    | undefined;
  if (provider === "provider-c") {
    const reported = usageFromProviderC(metadata?.google?.usageMetadata);
    if (reported) return reported;
  }
  const counts = answer.usage;
  if (!counts || (counts.inputTokens === undefined && counts.outputTokens === undefined)) return null;
  const usage: TokenUsage = {
    inputTokens: tokenCount(counts.inputTokens),
    outputTokens: tokenCount(counts.outputTokens),
    cachedInputTokens: null,
    reasoningTokens: null,
  };
  let imageInput = 0;
  for (const image of metadata?.openai?.images ?? []) imageInput += tokenCount(image?.imageTokens) ?? 0;
  if (provider === "provider-a" && imageInput > 0) usage.imageInputTokens = imageInput;
  return usage;
}

/** The calls' costs by their tokens, summed; null when one call's is unknown (or reported none). */
function tokenCost(provider: ProviderId, model: string, calls: BilledCall[]): number | null {
  let micro = 0;
  for (const billed of calls) {
    const cost = billed.usage && costOfTokens(provider, model, billed.usage);
    if (cost === null) return null;
    micro += Math.round(cost * 1e9);
  }
  return micro / 1e9;
}

/**
 * The calls' tokens added up, for the usage row, as the proxies record them (a count one call left
 * unknown is unknown for all); null when a call reported none.
 */
function summedUsage(calls: BilledCall[]): TokenUsage | null {
  if (calls.length === 0) return null;
  const sum: TokenUsage = { inputTokens: 0, outputTokens: 0, cachedInputTokens: 0, reasoningTokens: 0 };
  for (const { usage } of calls) {
    if (usage === null) return null;
    sum.inputTokens = sumOrUnknown(sum.inputTokens, usage.inputTokens);
    sum.outputTokens = sumOrUnknown(sum.outputTokens, usage.outputTokens);
    sum.cachedInputTokens = sumOrUnknown(sum.cachedInputTokens, usage.cachedInputTokens);
    sum.reasoningTokens = sumOrUnknown(sum.reasoningTokens, usage.reasoningTokens);
    const imageInput = (sum.imageInputTokens ?? 0) + (usage.imageInputTokens ?? 0);
    if (imageInput > 0) sum.imageInputTokens = imageInput;
    const imageOutput = (sum.imageOutputTokens ?? 0) + (usage.imageOutputTokens ?? 0);
    if (imageOutput > 0) sum.imageOutputTokens = imageOutput;
  }
  return sum;
}

/** Provider parameters the AI SDK's option schemas do not carry; the values are already checked. */
function extraParameters(provider: ProviderId, style: string | undefined, safety: string | undefined) {
  if (provider === "provider-a" && style) return { style };
  if (provider === "provider-c" && safety)
    return { parameters: { safetySetting: imagenSafetySettings[safety] } };
  return undefined;
}

/**
 * The image as its bytes say: the AI SDK calls bytes it does not recognise `image/png`, and they
 * would be answered, and served from the vault on Sluice's own origin, as an image. Bytes that are
 * no image Sluice knows (PNG, JPEG, GIF, WebP, HEIC/HEIF) are the provider's failure (502; the call
 * was billed all the same, and its row says so).
 *
 * `base64` is those bytes in standard, padded base64, not the provider's string as it came: the AI
 * SDK also decodes URL-safe or unpadded base64 and base64 broken into lines, which a strict decoder
 * (a browser's atob, Swift's Data(base64Encoded:)) refuses and a lenient one (Python's b64decode)
 * reads as other bytes than those sniffed and stored.
 */
function asImage(
  image: { base64: string; mediaType: string },
  provider: ProviderId,
): { base64: string; uint8Array: Uint8Array; mediaType: string } {
  // Decoded here in full, by Buffer: the AI SDK read only the start, to name the type, and its own
  // decoder (`uint8Array`) is a JavaScript loop ten times slower, holding the event loop.
  const bytes = decodeForgivingBase64(image.base64);
  if (!bytes) throw notBase64(provider);
  const mediaType = sniffImageType(bytes);
  if (mediaType === null)
    // A form Sluice reads no image in (or no image at all) comes again on the same call.
    throw new GatewayError(
      "PROVIDER_ERROR",
      `The provider (${provider}) answered with data that is not an image (${bytes.length} bytes)`,
      { provider, details: { retryable: false } },
    );
  // The provider's own string where it is standard already (it is, from all three): no second copy.
  const base64 = isPaddedBase64(image.base64) ? image.base64 : bytes.toString("base64");
  return { base64, uint8Array: bytes, mediaType };
}

/**
 * The PROVIDER_ERROR for an image whose base64 does not decode (a character outside base64, or a
 * string cut short: `cause`, atob's InvalidCharacterError where the AI SDK decoded its start). The
 * provider's failure, as data that is no image is: never a 500. Retryable: an answer cut short or
 * garbled on its way, which the next generation need not be.
 */
function notBase64(provider: ProviderId, cause?: Error): GatewayError {
  return new GatewayError(
    "PROVIDER_ERROR",
    `The provider (${provider}) answered with an image that is not valid base64`,
    { provider, details: { retryable: true }, ...(cause ? { cause } : {}) },
  );
}

/**
 * Stores the images in the vault, each on its own (storeImage). When one cannot be stored the
 * request fails (503), and those that were stored are deleted: its answer never names them, so
 * nobody could fetch them, and they would stay in the vault for good.
 */
async function storeImages(
  deps: ImageGenerationDeps,
  project: Project,
  images: Array<{ base64: string; uint8Array: Uint8Array; mediaType: string }>,
  clientSignal?: AbortSignal,
): Promise<ImageResult["images"]> {
  const stored = await Promise.allSettled(
    images.map((image) => storeImage(deps, project, image, clientSignal)),
  );
  const failed = stored.find((result) => result.status === "rejected");
  if (!failed)
    return stored.map((result) => (result as PromiseFulfilledResult<ImageResult["images"][number]>).value);
  for (const result of stored)
    if (result.status === "fulfilled" && result.value.path) discard(deps, result.value.path);
  throw failed.reason;
}

/**
 * Deletes an image stored for a request that failed, within `vaultTimeoutMs`, without waiting for
 * it: the request's 503 is already why, and a deletion that fails leaves no worse than before.
 */
function discard(deps: ImageGenerationDeps, path: string): void {
  deps.vault.remove(path, AbortSignal.timeout(deps.vaultTimeoutMs)).catch(() => {});
}

/**
 * Stores one image in the vault within `vaultTimeoutMs`, stopped early when the client leaves
 * (`clientSignal`). A store that does not stop on the signal is no longer waited for either.
 */
async function storeImage(
  deps: ImageGenerationDeps,
  project: Project,
  image: { base64: string; uint8Array: Uint8Array; mediaType: string },
  clientSignal?: AbortSignal,
) {
  if (!project.saveImagesToVault || !project.teamId)
    return { base64: image.base64, mediaType: image.mediaType };
  const path = vaultPath(project.teamId, project.id, deps.now(), randomUUID(), image.mediaType);
  const deadline = AbortSignal.timeout(deps.vaultTimeoutMs);
  const signal = clientSignal ? AbortSignal.any([deadline, clientSignal]) : deadline;
  const put = deps.vault.put(path, image.uint8Array, image.mediaType, signal);
  await untilAborted(put, signal).catch((error: unknown) => {
    // A store that was not waited for may still finish: the image it keeps is deleted then. One
    // the deadline or the client's leaving cut may have been kept all the same (an object store
    // that stored it, whose answer was on its way): it is deleted too, which costs one request
    // that finds nothing when the store had not kept it.
    put.then(
      () => discard(deps, path),
      () => {
        if (signal.aborted) discard(deps, path);
      },
    );
    // The vault's store (a directory, an object store) is a dependency that failed, not a bug:
    // 503, as for the database. The images were generated and are billed (the row records their
    // cost). A client that left gets no answer; its row says aborted (499).
    throw new GatewayError(
      "SERVICE_UNAVAILABLE",
      deadline.aborted
        ? `The image vault did not store the generated images within ${deps.vaultTimeoutMs} ms`
        : "The image vault could not store the generated images",
      { cause: error, headers: { "retry-after": "5" }, dependency: "vault", details: { retryable: true } },
    );
  });
  return {
    base64: image.base64,
    mediaType: image.mediaType,
    url: deps.vault.signedUrl(path, deps.vaultUrlTtlSeconds),
    path,
  };
}

/** `work`, or the signal's reason as soon as `signal` aborts, whichever comes first. */
async function untilAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  let onAbort = () => {};
  const aborted = new Promise<never>((_resolve, reject) => {
    onAbort = () => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([work, aborted]);
  } finally {
    signal.removeEventListener("abort", onAbort);
  }
}

function describeWarning(warning: unknown): string {
  const record = warning as {
    type?: string;
    feature?: string;
    setting?: string;
    details?: string;
    message?: string;
  };
  if (record.message) return record.message;
  const what = record.feature ?? record.setting;
  return [what ? `${what} is not supported by this model` : (record.type ?? "warning"), record.details]
    .filter(Boolean)
    .join(": ");
}

/** The 422's message for a prompt the provider's filter refused (docs/decisions/0020). */
const promptRefused =
  "The provider's content filter refused this prompt or the images generated for it; change the prompt rather than retry it";

/** The 422's message for a prompt a Gemini image model answered without an image (`NO_IMAGE`). */
const noImageAnswered =
  "The model answered this prompt without an image; change the prompt (ask plainly for an image) rather than retry it";

/**
 * A failed generation on the error table. `billed`: the calls that answered. When no image came at
 * all, the prompt is why (422), not the provider, where an answer says so: a call's images were
 * withheld by the provider's filter (contentPolicy), or every call's model answered without one
 * (`NO_IMAGE`: modelRefused). A Gemini image model's `IMAGE_OTHER`, or an answer with no word,
 * stays the provider's failure.
 */
function imageFailure(
  ai: typeof import("ai"),
  error: unknown,
  provider: ProviderId,
  model: string,
  today: Date,
  billed: BilledCall[],
): GatewayError {
  if (isProviderTimeout(error)) return providerTimeout(error, provider);
  if (ai.NoImageGeneratedError.isInstance(error)) {
    if (billed.some((answer) => answer.filtered)) {
      // Every call refused by a 400 (provider A, Imagen): the status is that refusal's.
      const status = billed.find((answer) => answer.refused !== undefined)?.refused ?? 200;
      return providerRefusal("contentPolicy", status, { cause: error, message: promptRefused });
    }
    if (billed.length > 0 && billed.every((answer) => answer.noImage))
      return providerRefusal("modelRefused", 200, { cause: error, message: noImageAnswered });
  }
  // The SDK refuses an argument (such as a provider option its schema does not accept) before it
  // sends anything: the request is at fault, not the provider. The marker check also matches
  // @ai-sdk/provider's InvalidArgumentError, which the provider packages throw. TypeValidationError
  // is not mapped: the SDK also throws it for provider responses that do not match its schemas.
  if (ai.InvalidArgumentError.isInstance(error)) {
    return new GatewayError("VALIDATION_ERROR", "The provider does not accept an argument of this request", {
      cause: error,
    });
  }
  const tooLarge = responseTooLargeFailure(error, provider);
  if (tooLarge) return tooLarge;
  // The SDK decodes the start of each image to name its type: where that is no base64.
  if (error instanceof Error && error.name === "InvalidCharacterError") return notBase64(provider, error);
  if (ai.APICallError.isInstance(error))
    return apiCallFailure(error, provider, "generate images", model, today, { contentPolicy: promptRefused });
  // No image and no word why (a Gemini image model's IMAGE_OTHER): another generation may bring one.
  // Anything else is an answer the SDK could not use, which the same call gets again.
  return new GatewayError("PROVIDER_ERROR", "The provider failed to generate images", {
    cause: error,
    provider,
    details: { retryable: ai.NoImageGeneratedError.isInstance(error) },
  });
}

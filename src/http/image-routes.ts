import { GatewayError } from "../errors.js";
import { generateImages, type ImageGenerationDeps, imageModelFor } from "../images/generate-image.js";
import { parseImageRequest } from "../images/image-request.js";
import type { UrlSigner } from "../images/signed-url.js";
import { mediaTypeOf, vaultMaxAgeSeconds } from "../images/vault-store.js";
import type { Admit, CallSpend } from "./admission.js";
import { watchClient } from "./client-watch.js";
import { parseJsonObject, readBody, requireUtf8JsonContentType } from "./read-body.js";
import type { RequestContext, Router } from "./router.js";
import { sendBytes, sendJson } from "./send.js";

export interface ImageRouteDeps extends ImageGenerationDeps {
  admit: Admit;
  maxBodyBytes: number;
  /** Present when the vault is local: the gateway serves its files through signed URLs. */
  localVault?: { signer: UrlSigner; read(path: string): Promise<Buffer | null> };
}

/** POST /v1/image, /v1/image/{projectId}, and GET /v1/vault/{path} for the local vault. */
export function registerImageRoutes(router: Router, deps: ImageRouteDeps): void {
  const generate = (context: RequestContext) => handleGenerate(deps, context);
  router.on("POST", "/v1/image", generate);
  router.on("POST", "/v1/image/:projectId", generate);
  const local = deps.localVault;
  if (local) {
    router.on("GET", "/v1/vault/*", async ({ params, query, response }) => {
      const path = params["*"] ?? "";
      const search = new URLSearchParams(query);
      const verdict = local.signer.verify(path, search.get("expires"), search.get("signature"));
      if (verdict !== "ok")
        throw new GatewayError(
          "FORBIDDEN",
          verdict === "expired" ? "This vault URL has expired" : "This vault URL is not valid",
        );
      const bytes = await local.read(path);
      if (!bytes) throw new GatewayError("NOT_FOUND", "No such vault object");
      const maxAge = vaultMaxAgeSeconds(Number(search.get("expires")), deps.now().getTime());
      sendBytes(response, 200, bytes, mediaTypeOf(path), { "cache-control": `private, max-age=${maxAge}` });
    });
  }
}

async function handleGenerate(deps: ImageRouteDeps, context: RequestContext): Promise<void> {
  const { request, response, params } = context;
  const headerProject = request.headers["x-project-id"];
  const call = await deps.admit(context, {
    endpoint: "image",
    projectId: params.projectId ?? (Array.isArray(headerProject) ? headerProject[0] : headerProject),
    provider: (project) => project.provider,
  });
  let model: string | null = null;
  let spend: CallSpend | undefined;
  // A client that leaves before its images: the provider calls are aborted, and the row says so.
  const client = watchClient(response);
  try {
    requireUtf8JsonContentType(request);
    const body = parseImageRequest(parseJsonObject(await readBody(request, deps.maxBodyBytes)));
    model = imageModelFor(call.provider, call.project, body);
    const { result, costUsd } = await generateImages(
      deps,
      call,
      body,
      (billed) => {
        spend = { usage: null, costUsd: billed };
      },
      client.signal,
    );
    client.throwIfGone();
    sendJson(response, 200, result);
    call.finish({
      status: 200,
      outcome: "ok",
      provider: call.provider,
      model,
      usage: null,
      costUsd,
      streamed: false,
      timeToFirstByteMs: null,
      errorCode: null,
    });
  } catch (error) {
    call.fail(error, call.provider, model, spend);
    throw error;
  } finally {
    client.stop();
  }
}

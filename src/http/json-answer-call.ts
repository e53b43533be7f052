import { projectIdHeader } from "../auth/repeated-credential-header.js";
import { type Admit, type AdmittedCall, type CallSpend, type Endpoint, nothingSent } from "./admission.js";
import type { BodyBudget, BodyShare } from "./body-budget.js";
import { watchClient } from "./client-watch.js";
import { readBody, requireUncompressedUtf8Json } from "./read-body.js";
import type { RequestContext } from "./router.js";
import { sendJson } from "./send.js";

/** What a call has learnt by the time it fails, for its row: the model, and what it was billed. */
export interface CallSoFar {
  model: string | null;
  /** What it was billed; `nothingSent` while nothing went to the provider though the model is named. */
  spend?: CallSpend | typeof nothingSent;
}

/** The answer's JSON body and what the call cost. */
export interface JsonAnswer extends CallSpend {
  body: unknown;
  model: string | null;
}

/**
 * A call of the AI SDK routes (structured analysis, image generation): admitted for the project in
 * the path or the `x-project-id` header, a UTF-8 JSON body, answered with one JSON object, and one
 * usage row whatever happens. `run` notes in `soFar` what the failure row should name. A client
 * that leaves before its answer, or the shutdown's deadline: `signal` aborts the provider calls,
 * and the row says so (499, or 503 refused). `readBody` reads the body (413 over `maxBytes`) within
 * `bodyBudget` (503 when it does not fit), which holds its bytes until the call ends, however it
 * ends: the body, and what is made of it (a decoded image or PDF, the provider's request), is
 * garbage only then. Not the bytes' Buffer: `run` lets it go once parsed. `share` is the call's
 * part of the budget, where `run` counts what the call holds beyond its body (a PDF fetched by URL:
 * `holdInShare` throws the 503 of a body that does not fit when it does not).
 */
export async function answerWithJson(
  admit: Admit,
  bodyBudget: BodyBudget,
  context: RequestContext,
  endpoint: Endpoint,
  run: (
    call: AdmittedCall,
    signal: AbortSignal,
    soFar: CallSoFar,
    readBody: (maxBytes: number) => Promise<Buffer>,
    share: BodyShare,
  ) => Promise<JsonAnswer>,
): Promise<void> {
  const { request, response, params } = context;
  // The header only where the path names no project; sent twice, admission refuses it (400).
  const header = params.projectId === undefined ? projectIdHeader(request.rawHeaders) : undefined;
  const call = await admit(context, {
    endpoint,
    projectId: params.projectId ?? header?.value,
    projectIdRepeated: header?.repeated === true,
    provider: (project) => project.provider,
  });
  const soFar: CallSoFar = { model: null };
  const client = watchClient(response);
  const share = bodyBudget.share();
  try {
    requireUncompressedUtf8Json(request);
    // A key revoked (or the project disabled or deleted) while the body arrived: nothing is sent.
    const read = async (maxBytes: number) => {
      const body = await readBody(request, maxBytes, { share, response });
      // Awaited only when there is something to check (no turn of the loop for the usual case).
      const recheck = call.recheck();
      if (recheck) await recheck;
      return body;
    };
    const { body, model, usage, costUsd, providerAnswered, partlyUnknown } = await run(
      call,
      client.signal,
      soFar,
      read,
      share,
    );
    client.throwIfGone();
    sendJson(response, 200, body);
    call.finish({
      status: 200,
      outcome: "ok",
      provider: call.provider,
      model,
      usage,
      costUsd,
      streamed: false,
      timeToFirstByteMs: null,
      errorCode: null,
      providerAnswered,
      partlyUnknown,
    });
  } catch (error) {
    // Refused at the shutdown's deadline: whatever the aborted provider call failed with, the call
    // failed for that, and its answer is the refusal's 503.
    const failure = client.refusal() ?? error;
    // `run` names the model just before the provider call: without one, nothing went to the provider.
    call.fail(
      failure,
      call.provider,
      soFar.model,
      soFar.spend ?? (soFar.model === null ? nothingSent : undefined),
    );
    throw failure;
  } finally {
    client.stop();
    share.release();
  }
}

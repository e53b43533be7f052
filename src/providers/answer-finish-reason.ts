import { AsyncLocalStorage } from "node:async_hooks";

/**
 * The finish reason one provider call's answer named, for what the AI SDK does not pass on: a
 * Gemini image model's `IMAGE_PROHIBITED_CONTENT`, `IMAGE_RECITATION`, `IMAGE_OTHER` and `NO_IMAGE`
 * are ordinary finishes to it, and its image model drops the answer's body (docs/decisions/0020).
 */
export interface AnswerFinish {
  /** `candidates[0].finishReason` of a provider C `generateContent` answer; null when none was read. */
  reason: string | null;
}

const watched = new AsyncLocalStorage<AnswerFinish>();

/**
 * Runs `call` (one provider call of the AI SDK's) noting, in `finish`, the finish reason of the
 * answer it fetches through `finishReadingFetch`. Each call has its own note: calls run at once.
 */
export function watchingFinish<T>(call: () => T): { result: T; finish: AnswerFinish } {
  const finish: AnswerFinish = { reason: null };
  return { result: watched.run(finish, call), finish };
}

/**
 * A fetch that, inside `watchingFinish`, reads the finish reason of a successful provider C
 * `generateContent` answer from a copy of its body before the SDK reads it; any other call, and
 * every call outside `watchingFinish`, passes through untouched. A body that fails to arrive (a
 * time-out, an answer over the cap) leaves the reason unknown: the SDK reads the same failure.
 */
export function finishReadingFetch(base: typeof globalThis.fetch): typeof globalThis.fetch {
  return async (input, init) => {
    const response = await base(input, init);
    const finish = watched.getStore();
    if (!finish || !response.ok || !urlOf(input).endsWith(":generateContent")) return response;
    const answer = await response
      .clone()
      .json()
      .catch(() => null);
    const candidates = (answer as { candidates?: unknown } | null)?.candidates;
    const reason = Array.isArray(candidates)
      ? (candidates[0] as { finishReason?: unknown } | undefined)?.finishReason
      : undefined;
    finish.reason = typeof reason === "string" ? reason : null;
    return response;
  };
}

function urlOf(input: Parameters<typeof globalThis.fetch>[0]): string {
  if (typeof input === "string") return input;
  return input instanceof URL ? input.href : input.url;
}
